"""What observability outside the engine reads of a turn: its trace id, its model's name.

Logs and metrics (``agentworker.ops``) label records with these; the engine's spans
(``_engine/tracing``) use the same names, so a log line, a metric and a span agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import trace
except ImportError:  # pragma: no cover - the package is optional
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from runner_core.turn import AgentTurn

#: The metadata key holding a turn's trace context (W3C ``traceparent``).
TRACEPARENT = "traceparent"


def trace_id(turn_or_metadata: AgentTurn | dict[str, Any] | None = None) -> str | None:
    """The current span's trace id (hex), else the one stored with a turn, else None."""
    if trace is not None:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            return format(ctx.trace_id, "032x")
    metadata: Any = turn_or_metadata
    if metadata is not None and not isinstance(metadata, dict):
        metadata = metadata.state.metadata
    parent = (metadata or {}).get(TRACEPARENT)
    if isinstance(parent, str) and parent.count("-") == 3:
        return parent.split("-")[1]
    return None


def model_name(model: Any, settings: dict[str, Any] | None = None) -> str:
    """The model a request asks for: its settings' ``model``, the adapter's, or its type."""
    named = (settings or {}).get("model") or getattr(model, "model", None)
    return str(named) if isinstance(named, str) and named else type(model).__name__


def provider_name(model: Any) -> str:
    """``gen_ai.provider.name``: what the adapter says, else ``agentworker``'s own type name."""
    named = getattr(model, "provider_name", None)
    return named if isinstance(named, str) else type(model).__name__.lower()
