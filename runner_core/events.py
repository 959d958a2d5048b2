"""Lifecycle events and their delivery to listeners."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner_core.snapshot import AgentTurnSnapshot

log = logging.getLogger("runner_core.events")


class AgentEventType(str, Enum):
    """Every event the runner emits."""

    TURN_STARTED = "TURN_STARTED"
    STEP_STARTED = "STEP_STARTED"
    STEP_COMPLETED = "STEP_COMPLETED"
    MODEL_STARTED = "MODEL_STARTED"
    MODEL_TEXT_DELTA = "MODEL_TEXT_DELTA"
    MODEL_REASONING_DELTA = "MODEL_REASONING_DELTA"
    MODEL_TOOL_CALL_DELTA = "MODEL_TOOL_CALL_DELTA"
    MODEL_COMPLETED = "MODEL_COMPLETED"
    TOOL_STARTED = "TOOL_STARTED"
    TOOL_PROGRESS = "TOOL_PROGRESS"
    TOOL_COMPLETED = "TOOL_COMPLETED"
    TOOL_FAILED = "TOOL_FAILED"
    TOOL_APPROVAL_REQUESTED = "TOOL_APPROVAL_REQUESTED"
    TOOL_INPUT_REQUESTED = "TOOL_INPUT_REQUESTED"
    SNAPSHOT_SAVED = "SNAPSHOT_SAVED"
    TURN_SUSPENDED = "TURN_SUSPENDED"
    TURN_RESUMED = "TURN_RESUMED"
    CANCELLATION_REQUESTED = "CANCELLATION_REQUESTED"
    CHILD_STARTED = "CHILD_STARTED"
    PLAN_CREATED = "PLAN_CREATED"
    PLAN_UPDATED = "PLAN_UPDATED"
    TASK_STARTED = "TASK_STARTED"
    TASK_COMPLETED = "TASK_COMPLETED"
    TASK_FAILED = "TASK_FAILED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    MAX_ITERATIONS_REACHED = "MAX_ITERATIONS_REACHED"
    MAX_STEPS_REACHED = "MAX_STEPS_REACHED"
    TURN_COMPLETED = "TURN_COMPLETED"
    TURN_FAILED = "TURN_FAILED"
    TURN_CANCELLED = "TURN_CANCELLED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """One event; ``data`` is read-only and holds at least status, phase and step count."""

    event_id: str
    type: AgentEventType
    turn_id: str
    root_turn_id: str
    parent_turn_id: str | None
    agent_id: str
    agent_version: str
    #: Grows within a turn across processes: ``version * 1_000_000 + n``.
    sequence: int
    occurred_at: float
    data: Mapping[str, Any]


AgentEventListener = Callable[[AgentEvent], None]

_SEQUENCE_BASE = 1_000_000


class EventBus:
    """Delivers events synchronously to listeners; a listener that raises is logged."""

    def __init__(self) -> None:
        self._listeners: tuple[AgentEventListener, ...] = ()
        self._counters: dict[str, tuple[int, int]] = {}

    def add(self, listener: AgentEventListener) -> None:
        """Add a listener."""
        self._listeners = (*self._listeners, listener)

    def remove(self, listener: AgentEventListener) -> None:
        """Remove a listener (no error if absent)."""
        self._listeners = tuple(x for x in self._listeners if x is not listener)

    @property
    def active(self) -> bool:
        """True when someone listens (events are only built then)."""
        return bool(self._listeners)

    def emit(self, s: AgentTurnSnapshot, type: AgentEventType, **data: Any) -> None:
        """Build the event for the turn ``s`` and deliver it to every listener, in order."""
        listeners = self._listeners
        if not listeners:
            return
        payload = {
            "status": s.status.value,
            "phase": s.phase.value,
            "step_count": s.step_count,
            **data,
        }
        event = AgentEvent(
            event_id=uuid.uuid4().hex,
            type=type,
            turn_id=s.id,
            root_turn_id=s.root_turn_id,
            parent_turn_id=s.parent_turn_id,
            agent_id=s.agent_id,
            agent_version=s.agent_version,
            sequence=self._next_sequence(s.id, s.version),
            occurred_at=time.time(),
            data=MappingProxyType(payload),
        )
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener %r failed on %s", listener, type.value)

    def flush(self) -> None:
        """Let buffering listeners (those with a ``flush()``) write out what they hold."""
        for listener in self._listeners:
            flush = getattr(listener, "flush", None)
            if flush is None:
                continue
            try:
                flush()
            except Exception:
                log.exception("event listener %r failed to flush", listener)

    def _next_sequence(self, turn_id: str, version: int) -> int:
        last_version, n = self._counters.get(turn_id, (version, 0))
        n = n + 1 if last_version == version else 1
        if len(self._counters) > 10_000:
            self._counters.clear()
        self._counters[turn_id] = (version, n)
        return (version + 1) * _SEQUENCE_BASE + n
