"""OpenTelemetry spans of turns: a step span, with model and tool calls inside it.

Through the OpenTelemetry API only (``opentelemetry-api``, optional): without the package,
or without an SDK ``TracerProvider`` set, nothing is traced. Whether a turn is traced is
decided once per ``AgentTurn`` object, at its first step (``turn.trace``; a worker loads
one per step), and the hooks in the step machine test that attribute before calling in
here: an untraced step costs a few attribute reads.

One trace per turn tree, across workers and days: creating a turn starts (and ends) an
``invoke_agent`` span under the producer's current context (an HTTP request,
``runner.start``) and stores its W3C ``traceparent`` in the turn's metadata (JSON, so older
workers read the record unchanged). Each step's span continues that context, and links to
the span that was current when the step began (a Celery task span). A child turn is created
inside its parent's step, so its ``invoke_agent`` span and its steps nest under that step.
Spans follow the OpenTelemetry semantic conventions for generative AI; message contents are
recorded only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - the package is optional
    trace = None  # type: ignore[assignment]

from runner_core.telemetry import TRACEPARENT, model_name, provider_name

if TYPE_CHECKING:
    from runner_core.messages import ToolCall, ToolMessage
    from runner_core.models.base import ModelRequest, ModelResponse
    from runner_core.snapshot import AgentTurnSnapshot
    from runner_core.turn import AgentTurn

T = TypeVar("T")

#: The standard opt-in of GenAI instrumentations for recording message contents.
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
SCOPE = "agentworker"
_MAX_CONTENT = 4096


#: ``AgentTurn.trace``: decided at the turn object's first step (None before).
ON, OFF = "on", "off"


def enabled() -> bool:
    """Whether an SDK tracer provider is set (the API's default provider records nothing)."""
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _tracer() -> Any:
    return trace.get_tracer(SCOPE)


def capture_content() -> bool:
    """Whether spans record prompts, answers, tool arguments and results (off by default)."""
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() in ("1", "true", "yes")


# -- turns ------------------------------------------------------------------------------------
def turn_created(snapshot: AgentTurnSnapshot) -> None:
    """A new turn (root or child): an ``invoke_agent`` span; its context goes in metadata."""
    if not enabled():
        return
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": snapshot.agent_id,
        "gen_ai.agent.name": snapshot.agent_id,
        "agentworker.agent.version": snapshot.agent_version,
        **_ids(snapshot),
    }
    if snapshot.parent_turn_id is not None:
        attributes["agentworker.parent_turn.id"] = snapshot.parent_turn_id
    if snapshot.conversation_id is not None:
        attributes["gen_ai.conversation.id"] = snapshot.conversation_id
    # no span current: a traceparent the caller put in the metadata is the parent
    current = trace.get_current_span().get_span_context().is_valid
    parent = None if current else _stored_context(snapshot.metadata)
    span = _tracer().start_span(
        f"invoke_agent {snapshot.agent_id}",
        context=parent,
        kind=trace.SpanKind.INTERNAL,
        attributes=attributes,
    )
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    span.end()
    if TRACEPARENT in carrier:
        snapshot.metadata[TRACEPARENT] = carrier[TRACEPARENT]


def _ids(snapshot: AgentTurnSnapshot) -> dict[str, str]:
    return {"agentworker.turn.id": snapshot.id, "agentworker.root_turn.id": snapshot.root_turn_id}


# -- steps ------------------------------------------------------------------------------------
def step(turn: AgentTurn, run: Callable[[], T]) -> T:
    """``run()`` (one step) inside the step's span: a child of the turn's stored context.

    The first call for a turn object decides whether it is traced (``turn.trace``); an
    untraced turn's hook skips this function altogether.
    """
    if turn.trace is None:
        turn.trace = ON if enabled() else OFF
    if turn.trace is OFF:
        return run()
    with _StepSpan(turn):
        return run()


class _StepSpan:
    """One step's span, current while the step runs; it ends after the step's last commit."""

    def __init__(self, turn: AgentTurn) -> None:
        self.turn = turn
        self.span: Any = None
        self.token: object = None

    def __enter__(self) -> _StepSpan:
        turn, st = self.turn, self.turn.state
        current = trace.get_current_span().get_span_context()
        parent = _stored_context(st.metadata)
        links = []
        if current.is_valid and (parent is None or _trace_of(parent) != current.trace_id):
            links.append(trace.Link(current, {"agentworker.link": "wake-up"}))
        attributes: dict[str, Any] = {
            "gen_ai.agent.id": st.agent_id,
            "agentworker.agent.version": st.agent_version,
            "agentworker.step.phase": st.phase.value,
            "agentworker.turn.status_before": st.status.value,
            **_ids(st),
        }
        held = turn.held_lease
        if held is not None:
            attributes["agentworker.lease.owner"] = held.owner
        self.span = _tracer().start_span(
            f"step {st.agent_id}",
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            links=links,
            attributes=attributes,
        )
        self.token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: object) -> None:
        st, span = self.turn.state, self.span
        otel_context.detach(self.token)  # type: ignore[arg-type]
        span.set_attribute("agentworker.turn.status", st.status.value)
        span.set_attribute("agentworker.turn.version", st.version)
        span.set_attribute("agentworker.step.number", st.step_count)
        if exc is not None:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
        elif st.error is not None and st.status.value in ("FAILED", "RETRY_SCHEDULED"):
            span.set_attribute("error.type", st.error.type)
            span.set_status(trace.Status(trace.StatusCode.ERROR, st.error.message))
        span.end()


def _stored_context(metadata: dict[str, Any]) -> Any:
    parent = metadata.get(TRACEPARENT)
    if not isinstance(parent, str):
        return None
    ctx = TraceContextTextMapPropagator().extract({TRACEPARENT: parent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def _trace_of(ctx: Any) -> int:
    return int(trace.get_current_span(ctx).get_span_context().trace_id)


def committed(version: int, events: int) -> None:
    """A commit of a traced turn landed: an event on the step's span (a commit point)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event("commit", {"agentworker.turn.version": version, "events": events})


# -- model and tool calls ------------------------------------------------------------------------
def model_call(
    turn: AgentTurn, request: ModelRequest, call: Callable[[], ModelResponse]
) -> ModelResponse:
    """``call()`` inside a ``chat {model}`` span that records usage and finish reasons."""
    model = model_name(turn.agent.model, request.settings)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.provider.name": provider_name(turn.agent.model),
        "gen_ai.agent.id": turn.state.agent_id,
        "agentworker.turn.id": turn.state.id,
        "agentworker.iteration": turn.state.iteration_count,
    }
    if capture_content():
        attributes["gen_ai.input.messages"] = _clip(
            json.dumps([m.model_dump(mode="json") for m in request.messages])
        )
    with _CallSpan(f"chat {model}", trace.SpanKind.CLIENT, attributes) as span:
        response = call()
        _model_done(span.span, response)
        return response


def tool_call(
    turn: AgentTurn, name: str, tool_call: ToolCall, call: Callable[[], ToolMessage]
) -> ToolMessage:
    """``call()`` inside an ``execute_tool {name}`` span."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": tool_call.id,
        "gen_ai.tool.type": "function",
        "agentworker.turn.id": turn.state.id,
    }
    if capture_content():
        attributes["gen_ai.tool.call.arguments"] = _clip(json.dumps(dict(tool_call.arguments)))
    with _CallSpan(f"execute_tool {name}", trace.SpanKind.INTERNAL, attributes) as span:
        message = call()
        _tool_done(span.span, message)
        return message


class _CallSpan:
    """A model or tool call's span, current while the call runs."""

    def __init__(self, name: str, kind: Any, attributes: dict[str, Any]) -> None:
        self.span = _tracer().start_span(name, kind=kind, attributes=attributes)
        self.token: object = None

    def __enter__(self) -> _CallSpan:
        self.token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: object) -> None:
        otel_context.detach(self.token)  # type: ignore[arg-type]
        if exc is not None:
            self.span.record_exception(exc)
            self.span.set_attribute("error.type", type(exc).__name__)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
        self.span.end()


def _model_done(span: Any, response: ModelResponse) -> None:
    usage = getattr(response, "usage", None)
    if usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    message = getattr(response, "message", None)
    if message is None:
        return
    reason = "tool_calls" if message.tool_calls else "stop"
    span.set_attribute("gen_ai.response.finish_reasons", (reason,))
    if capture_content():
        span.set_attribute("gen_ai.output.messages", _clip(message.model_dump_json()))


def _tool_done(span: Any, message: ToolMessage) -> None:
    if message.is_error:
        span.set_attribute("error.type", "tool_error")
        span.set_status(trace.Status(trace.StatusCode.ERROR, message.content[:200]))
    if capture_content():
        span.set_attribute("gen_ai.tool.call.result", _clip(message.content))


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CONTENT else text[:_MAX_CONTENT] + "…"
