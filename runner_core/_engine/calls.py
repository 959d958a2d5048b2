"""The two side effects of a step: asking the model, and running a tool.

The model call emits streaming deltas as events; the tool runs inside its
``AgentToolContext``. Async tools and models run on the process event loop (``aio``); both
are bounded by the step's deadline, a tool also by its own timeout. A sync tool without
either runs inline on the calling thread, exactly as a plain function call.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from runner_core._engine import aio, tracing
from runner_core._engine.kernel import TurnKernel
from runner_core._engine.toolthreads import TOOL_THREADS
from runner_core.context import AgentToolContext
from runner_core.deps import agent_deps
from runner_core.errors import AgentWorkerError, PayloadTooLargeError, shorten
from runner_core.events import AgentEventType as E
from runner_core.messages import AiMessage, ToolCall, ToolMessage
from runner_core.models.base import (
    AsyncChatModel,
    AsyncStreamingChatModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ReasoningDelta,
    StreamDone,
    StreamingChatModel,
    TextDelta,
    ToolCallDelta,
    Usage,
    prefers_async,
)
from runner_core.policy import AgentLimits, text_size
from runner_core.telemetry import model_name
from runner_core.tools import (
    Tool,
    ToolError,
    ToolTimeoutError,
    error_content,
    render_result,
    timeout_message,
)
from runner_core.turn import AgentTurn


def call_timing(started_at: float, clock: float) -> dict[str, Any]:
    """When a call started (Unix seconds) and how long it took (ms), for its event's data."""
    return {
        "started_at": round(started_at, 3),
        "duration_ms": round((time.monotonic() - clock) * 1000, 1),
    }


def model_call_facts(
    usage: Usage, started_at: float, clock: float, model: object, request: ModelRequest
) -> dict[str, Any]:
    """What MODEL_COMPLETED adds to its token counts: timing, cache and reasoning, model."""
    return {
        **call_timing(started_at, clock),
        "cached_input_tokens": usage.cached_input_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "model": model_name(model, request.settings),
    }


def call_model(k: TurnKernel, turn: AgentTurn, request: ModelRequest) -> ModelResponse:
    """Ask the turn's model once (inside its span when traced), its answer within limits."""
    if turn.trace is tracing.ON:
        response = tracing.model_call(turn, request, lambda: _ask(k, turn, request))
    else:
        response = _ask(k, turn, request)
    return bounded_answer(response, k.policy(turn).limits)


def bounded_answer(response: ModelResponse, limits: AgentLimits) -> ModelResponse:
    """The response, its text cut to ``max_model_answer_bytes`` or a ``ModelError``.

    By ``oversized_output``: ``"truncate"`` cuts the text and says so at its end; what
    cannot be cut (tool calls, reasoning, provider data) over the limit, or ``"fail"``,
    fails the turn.
    """
    if not isinstance(response, ModelResponse):
        return response  # checked_message says what it is
    limit = limits.max_model_answer_bytes
    message = response.message
    size = _json_bytes(message)
    if size <= limit:
        return response
    if limits.oversized_output == "truncate":
        room = limit - _json_bytes(message.model_copy(update={"text": ""}))
        for _ in range(3):  # JSON escapes in the text may take a little more room
            cut = message.model_copy(
                update={"text": truncated(message.text or "", room, size, limit)}
            )
            over = _json_bytes(cut) - limit
            if over <= 0:
                return replace(response, message=cut)
            room -= over
    raise ModelError(
        f"the model answer is {size} bytes; the limit is {limit} (max_model_answer_bytes)"
    )


def _json_bytes(message: AiMessage) -> int:
    return len(message.model_dump_json().encode())


def truncated(text: str, room: int, size: int, limit: int) -> str:
    """``text`` cut to at most ``room`` UTF-8 bytes, the marker included."""
    marker = f"\n[truncated: {size} bytes, the limit is {limit}]"
    keep = max(0, room - len(marker.encode()))
    return text.encode()[:keep].decode(errors="ignore") + marker


def _ask(k: TurnKernel, turn: AgentTurn, request: ModelRequest) -> ModelResponse:
    """Ask the turn's model once; a streaming turn emits every delta as an event.

    The sync form is used when the model has one (unless it ``prefers_async``); an async
    one runs on the process loop, bounded by the step's deadline.
    """
    model: Any = turn.agent.model
    if prefers_async(model):
        return _ask_async(k, turn, model, request)
    if not (turn.state.streaming and isinstance(model, StreamingChatModel)):
        response: ModelResponse = model.generate(request)
        return response
    return _streamed(k, turn, model.stream(request))


def _ask_async(
    k: TurnKernel, turn: AgentTurn, model: object, request: ModelRequest
) -> ModelResponse:
    deadline = turn.step_deadline
    try:
        if turn.state.streaming and isinstance(model, AsyncStreamingChatModel):
            events = aio.iterate(model.astream(request), deadline=deadline)
            try:
                return _streamed(k, turn, events)
            finally:
                events.close()  # stops the loop's task if the stream had more
        if not isinstance(model, AsyncChatModel):
            raise ModelError(f"{model!r} has no agenerate() to await")
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise aio.DeadlineExceeded
        response: ModelResponse = aio.run(_awaited(model.agenerate(request)), timeout=timeout)
        return response
    except aio.DeadlineExceeded:
        raise ModelError(
            "the model call was cut off: the step time limit was reached", retryable=True
        ) from None


def _streamed(k: TurnKernel, turn: AgentTurn, events: Iterable[ModelStreamEvent]) -> ModelResponse:
    for event in events:
        if isinstance(event, StreamDone):
            return event.response
        _emit_delta(k, turn, event)
    raise ModelError("model stream ended without a final response", retryable=True)


def _emit_delta(
    k: TurnKernel, turn: AgentTurn, event: TextDelta | ReasoningDelta | ToolCallDelta
) -> None:
    if isinstance(event, TextDelta):
        k.emit(turn, E.MODEL_TEXT_DELTA, text=event.text)
    elif isinstance(event, ReasoningDelta):
        k.emit(turn, E.MODEL_REASONING_DELTA, text=event.text)
    else:
        k.emit(
            turn,
            E.MODEL_TOOL_CALL_DELTA,
            index=event.index,
            call_id=event.id,
            name=event.name,
            arguments=event.arguments,
        )


#: A call and its arguments as already validated for it, taken by the first run (a
#: middleware that runs the call again gets freshly parsed arguments).
Validated = list[tuple[ToolCall, dict[str, Any]]]


def invoke_tool(
    k: TurnKernel, turn: AgentTurn, tool: Tool, call: ToolCall, validated: Validated | None = None
) -> ToolMessage:
    """Run the tool for ``call`` (inside its span when traced).

    ``validated``: the arguments of a call checked before (taken if it is ``call`` itself).
    Blocking and thread-safe: several threads may run calls of one turn at once, each in
    its own copy of the context.
    """
    if turn.trace is tracing.ON:
        return tracing.tool_call(
            turn, tool.name, call, lambda: _run_tool(k, turn, tool, call, validated)
        )
    return _run_tool(k, turn, tool, call, validated)


def _run_tool(
    k: TurnKernel, turn: AgentTurn, tool: Tool, call: ToolCall, validated: Validated | None
) -> ToolMessage:
    """Run the tool for ``call``; a ``ToolError`` becomes an error message for the model."""
    if validated and validated[0][0] is call:
        kwargs = validated.pop()[1]  # the plan's check of these very arguments
    else:
        kwargs = tool.validate(call.arguments)  # a middleware changed the call
    ctx = _context(k, turn, tool, call)
    if tool.context_param is not None:
        kwargs[tool.context_param] = ctx
    limit = _limit(k, turn, tool)
    token = ctx.activate()
    try:
        value = _call(tool, kwargs, limit)
    except ToolError as exc:
        content = error_content("tool_error", str(exc))
        return ToolMessage(call_id=call.id, name=tool.name, content=content, is_error=True)
    except _Expired:
        assert limit is not None
        return _timed_out(k, turn, tool, call, limit)
    finally:
        AgentToolContext.deactivate(token)
    content = _bounded_result(render_result(value, tool.name), k.policy(turn).limits, tool.name)
    return ToolMessage(call_id=call.id, name=tool.name, content=content)


def _bounded_result(content: str, limits: AgentLimits, tool_name: str) -> str:
    """A tool result within ``max_tool_result_bytes``: cut, or ``PayloadTooLargeError``."""
    limit = limits.max_tool_result_bytes
    size = text_size(content, limit)
    if size <= limit:
        return content
    size = len(content.encode())
    if limits.oversized_output == "fail":
        raise PayloadTooLargeError(f"the result of tool {shorten(tool_name)}", size, limit)
    return truncated(content, limit, size, limit)


def _context(k: TurnKernel, turn: AgentTurn, tool: Tool, call: ToolCall) -> AgentToolContext:
    st = turn.state
    return AgentToolContext(
        turn_id=st.id,
        call_id=call.id,
        tool_name=tool.name,
        metadata=turn.metadata,
        submitted_input=st.submitted_inputs.get(call.id),
        deps=agent_deps(turn.agent),
        _cancel_check=lambda: k.control(turn).cancel_requested,
        _progress=lambda message, fraction: k.emit(
            turn,
            E.TOOL_PROGRESS,
            call_id=call.id,
            tool=tool.name,
            message=message,
            fraction=fraction,
        ),
        _has_input=call.id in st.submitted_inputs,
    )


# --- timeouts -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Limit:
    """How long a call may run, and whether the step's deadline (not its timeout) says so."""

    seconds: float
    by_step_deadline: bool


class _Expired(Exception):  # noqa: N818 - internal signal, never leaves this module
    """The call ran out of its limit (it was cancelled, or its thread abandoned)."""


def _limit(k: TurnKernel, turn: AgentTurn, tool: Tool) -> _Limit | None:
    """min(the tool's timeout or the policy's, time left in the step); None: unbounded."""
    own = tool.timeout if tool.timeout is not None else k.policy(turn).tool_timeout_seconds
    deadline = turn.step_deadline
    if deadline is None:
        return None if own is None else _Limit(own, False)
    left = deadline - time.monotonic()
    if own is not None and own <= left:
        return _Limit(own, False)
    return _Limit(max(left, 0.0), True)


def _call(tool: Tool, kwargs: dict[str, Any], limit: _Limit | None) -> Any:
    """The tool's return value: inline without a limit, else bounded by it."""
    if tool.is_async:
        return _await_tool(tool, kwargs, limit)
    if limit is None:
        return tool.fn(**kwargs)  # no limit: on this thread, as plain as a function call
    return _in_thread(tool, kwargs, limit.seconds)


def _await_tool(tool: Tool, kwargs: dict[str, Any], limit: _Limit | None) -> Any:
    coro = tool.fn(**kwargs)
    if not inspect.iscoroutine(coro):
        coro = _awaited(coro)
    if limit is not None and limit.seconds <= 0:
        coro.close()
        raise _Expired
    try:
        return aio.run(coro, timeout=None if limit is None else limit.seconds)
    except aio.DeadlineExceeded:
        raise _Expired from None


async def _awaited(value: Any) -> Any:
    return await value


def _in_thread(tool: Tool, kwargs: dict[str, Any], seconds: float) -> Any:
    """Run a sync tool on a tool thread (``TOOL_THREADS``); past ``seconds`` it is abandoned."""
    if seconds <= 0:
        raise _Expired
    context = contextvars.copy_context()
    try:
        return TOOL_THREADS.call(
            functools.partial(context.run, tool.fn, **kwargs), seconds, name=tool.name
        )
    except aio.DeadlineExceeded:
        raise _Expired from None


def _timed_out(
    k: TurnKernel, turn: AgentTurn, tool: Tool, call: ToolCall, limit: _Limit
) -> ToolMessage:
    """By the tool's (else the policy's) ``timeout_behavior``: tell the model, or raise."""
    behavior = tool.timeout_behavior or k.policy(turn).tool_timeout_behavior
    if behavior != "error":
        raise ToolTimeoutError(
            tool.name,
            limit.seconds,
            retryable=behavior == "retry",
            by_step_deadline=limit.by_step_deadline,
        )
    message = timeout_message(tool.name, limit.seconds, by_step_deadline=limit.by_step_deadline)
    seconds = round(limit.seconds, 3)
    content = error_content("tool_timeout", message, tool=tool.name, seconds=seconds)
    return ToolMessage(call_id=call.id, name=tool.name, content=content, is_error=True)


def is_retryable(exc: BaseException) -> bool:
    """The raiser decides (``retryable``); timeouts and connection errors are retryable."""
    if isinstance(exc, AgentWorkerError) and not isinstance(exc, ModelError):
        return bool(getattr(exc, "retryable", False))
    return bool(getattr(exc, "retryable", False)) or isinstance(exc, TimeoutError | ConnectionError)


def checked_message(response: ModelResponse, turn: AgentTurn) -> AiMessage:
    """The response's message with unique call ids; empty answers are errors.

    A call id that is missing, repeated within the response, or already used in the turn's
    history becomes ``{turn_id}-{iteration}-{index}`` (the model's id kept in
    ``original_id``): two calls never share a result message or an idempotency key.
    """
    if not isinstance(response, ModelResponse):
        raise ModelError(f"model returned {type(response).__name__}, not a ModelResponse")
    message = response.message
    if not message.text and not message.tool_calls:
        raise ModelError(
            "model returned an empty response (no text, no tool calls)", retryable=True
        )
    if not message.tool_calls:
        return message
    used = turn.used_call_ids()
    fixed: list[ToolCall] = []
    changed = False
    st = turn.state
    for i, call in enumerate(message.tool_calls):
        if not call.id or call.id in used:
            fresh = f"{st.id}-{st.iteration_count}-{i}"
            call = call.model_copy(update={"id": fresh, "original_id": call.id or None})
            changed = True
        used.add(call.id)
        fixed.append(call)
    if not changed:
        return message
    return message.model_copy(update={"tool_calls": tuple(fixed)})
