"""The two side effects of a step: asking the model, and running a tool.

The model call emits streaming deltas as events; the tool runs inside its
``AgentToolContext``.
"""

from __future__ import annotations

from runner_core._engine import tracing
from runner_core._engine.kernel import TurnKernel
from runner_core.context import AgentToolContext
from runner_core.errors import AgentWorkerError
from runner_core.events import AgentEventType as E
from runner_core.messages import AiMessage, ToolCall, ToolMessage
from runner_core.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    StreamDone,
    StreamingChatModel,
    TextDelta,
    ToolCallDelta,
)
from runner_core.tools import Tool, ToolError, error_content, render_result
from runner_core.turn import AgentTurn


def call_model(k: TurnKernel, turn: AgentTurn, request: ModelRequest) -> ModelResponse:
    """Ask the turn's model once (inside its span when traced)."""
    if turn.trace is tracing.ON:
        return tracing.model_call(turn, request, lambda: _ask(k, turn, request))
    return _ask(k, turn, request)


def _ask(k: TurnKernel, turn: AgentTurn, request: ModelRequest) -> ModelResponse:
    """Ask the turn's model once; a streaming turn emits every delta as an event."""
    model = turn.agent.model
    if not (turn.state.streaming and isinstance(model, StreamingChatModel)):
        return model.generate(request)
    for event in model.stream(request):
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


def invoke_tool(k: TurnKernel, turn: AgentTurn, tool: Tool, call: ToolCall) -> ToolMessage:
    """Run the tool for ``call`` (inside its span when traced)."""
    if turn.trace is tracing.ON:
        return tracing.tool_call(turn, tool.name, call, lambda: _run_tool(k, turn, tool, call))
    return _run_tool(k, turn, tool, call)


def _run_tool(k: TurnKernel, turn: AgentTurn, tool: Tool, call: ToolCall) -> ToolMessage:
    """Run the tool for ``call``; a ``ToolError`` becomes an error message for the model."""
    st = turn.state
    kwargs = tool.validate(call.arguments)
    ctx = AgentToolContext(
        turn_id=st.id,
        call_id=call.id,
        tool_name=tool.name,
        metadata=turn.metadata,
        submitted_input=st.submitted_inputs.get(call.id),
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
    token = ctx.activate()
    try:
        value = tool.fn(**kwargs)
    except ToolError as exc:
        content = error_content("tool_error", str(exc))
        return ToolMessage(call_id=call.id, name=tool.name, content=content, is_error=True)
    finally:
        AgentToolContext.deactivate(token)
    return ToolMessage(call_id=call.id, name=tool.name, content=render_result(value))


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
    return message.model_copy(update={"tool_calls": fixed})
