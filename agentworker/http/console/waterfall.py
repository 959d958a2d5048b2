"""A turn's waterfall: its steps, model and tool calls and waits, from committed events.

Each row has a start (Unix seconds) and a duration; the page draws the bars from them.
Model rows carry the call's tokens and, with a price table, its cost. Built from the
events' data alone (``started_at``, ``duration_ms``, token counts, ``next_runnable_at``),
so it reads the same for a live turn and one that ended long ago.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentworker.ops.costs import Prices, usage_of
from runner_core import AgentEvent, AgentEventType, Usage
from runner_core.events import TERMINAL_EVENTS

E = AgentEventType
#: What a suspended turn waits for, by the status its TURN_SUSPENDED reports.
WAITS = {
    "WAITING_FOR_APPROVAL": "approval",
    "WAITING_FOR_USER": "user input",
    "WAITING_FOR_CHILD": "child turns",
}


@dataclass(frozen=True, slots=True)
class Row:
    """One bar of the waterfall."""

    kind: str  # step, model, tool, retry, wait, end
    label: str
    start: float
    seconds: float | None
    outcome: str = ""
    detail: str = ""
    usage: Usage | None = None
    cost: float | None = None
    step: int = 0
    #: A retry's next attempt (Unix seconds).
    due: float | None = None


@dataclass(slots=True)
class Totals:
    """Tokens and cost summed over model calls (cost None when no call had a price)."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    calls: int = 0

    def add(self, usage: Usage, cost: float | None) -> None:
        """Count one model call."""
        self.usage, self.calls = self.usage + usage, self.calls + 1
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost


def rows_of(events: Sequence[AgentEvent], prices: Prices, now: float) -> list[Row]:
    """The waterfall of one turn's committed events (oldest first), in start order."""
    rows: list[Row] = []
    step_start: dict[int, float] = {}
    waiting: tuple[str, float, str] | None = None
    for i, event in enumerate(events):
        data = event.data
        step = int(data.get("step_count") or 0)
        begun = _started(event)
        step_start[step] = min(step_start.get(step, begun), begun)
        if waiting is not None and event.type is not E.TURN_SUSPENDED:
            label, since, status = waiting
            rows.append(Row("wait", f"waiting for {label}", since, event.occurred_at - since))
            waiting = None
        row = _row(event, data, step, step_start, prices)
        if row is not None:
            rows.append(row)
        if event.type is E.TURN_SUSPENDED:
            status = str(data.get("status", ""))
            waiting = (WAITS.get(status, status.lower()), event.occurred_at, status)
        if event.type is E.RETRY_SCHEDULED:
            due = float(data.get("next_runnable_at") or event.occurred_at)
            nxt = events[i + 1].occurred_at if i + 1 < len(events) else None
            end = nxt if nxt is not None else max(due, now)
            rows.append(Row("wait", "waiting to retry", event.occurred_at, end - event.occurred_at))
    if waiting is not None:
        label, since, _ = waiting
        rows.append(Row("wait", f"waiting for {label}", since, now - since, "still waiting"))
    order = {"step": 0, "model": 1, "tool": 1, "retry": 2, "wait": 3, "end": 4}
    return sorted(rows, key=lambda r: (r.start, order.get(r.kind, 5)))


def _started(event: AgentEvent) -> float:
    started = event.data.get("started_at")
    return float(started) if isinstance(started, int | float) else event.occurred_at


def _seconds(data: Any) -> float | None:
    ms = data.get("duration_ms")
    return float(ms) / 1000 if isinstance(ms, int | float) else None


def _row(
    event: AgentEvent, data: Any, step: int, step_start: dict[int, float], prices: Prices
) -> Row | None:
    """The row an event makes, if any (most events make none)."""
    kind = event.type
    if kind is E.STEP_COMPLETED:
        start = step_start.get(step, event.occurred_at)
        return Row("step", f"step {step}", start, event.occurred_at - start, step=step)
    if kind is E.MODEL_COMPLETED:
        return _model_row(event, data, step, prices)
    if kind in (E.TOOL_COMPLETED, E.TOOL_FAILED):
        outcome = "error" if kind is E.TOOL_FAILED else "ok"
        detail = _error(data) or str(data.get("content") or "")[:200]
        label = f"tool {data.get('tool', '?')}"
        return Row("tool", label, _started(event), _seconds(data), outcome, detail, step=step)
    if kind is E.RETRY_SCHEDULED:
        due = data.get("next_runnable_at")
        return Row(
            "retry",
            f"retry {data.get('attempt', '')} scheduled",
            event.occurred_at,
            0.0,
            "next attempt",
            _error(data),
            step=step,
            due=float(due) if isinstance(due, int | float) else None,
        )
    if kind in TERMINAL_EVENTS:
        detail = _error(data) or str(data.get("reason") or "")
        return Row("end", kind.value, event.occurred_at, 0.0, detail=detail)
    return None


def _model_row(event: AgentEvent, data: Any, step: int, prices: Prices) -> Row:
    usage, model = usage_of(data), str(data.get("model") or "")
    calls = ", ".join(str(c) for c in data.get("tool_calls") or ())
    return Row(
        "model",
        f"model {model}".strip(),
        _started(event),
        _seconds(data),
        f"calls {calls}" if calls else "answer",
        usage=usage,
        cost=prices.cost(model, usage),
        step=step,
    )


def _error(data: Any) -> str:
    """``type: message`` of the event's error; empty without one."""
    error = data.get("error") or {}
    return f"{error.get('type', '')}: {error.get('message', '')}" if error else ""


def totals(events: Iterable[AgentEvent], prices: Prices) -> dict[str, Totals]:
    """Per turn of the tree: tokens and cost of its model calls (from MODEL_COMPLETED)."""
    out: dict[str, Totals] = {}
    for event in events:
        if event.type is E.MODEL_COMPLETED:
            usage = usage_of(event.data)
            model = str(event.data.get("model") or "")
            out.setdefault(event.turn_id, Totals()).add(usage, prices.cost(model, usage))
    return out
