"""Lifecycle events and their delivery to listeners."""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from runner_core._engine.frozen import freeze, thaw
from runner_core.status import AgentTurnStatus

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
    TOOL_APPROVAL_RECORDED = "TOOL_APPROVAL_RECORDED"
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


#: Live progress: sent at once by whoever makes it, never part of a commit. A consumer
#: sees them marked ``provisional`` with the ``attempt`` (lease id) that made them. The
#: start of a step (and of the turn) is one of them, so it reaches every consumer before
#: what happens inside the step; ``TURN_RESUMED`` is provisional when a step resumes the
#: turn (a retry that is due, children that reported) and committed when a resume command
#: does (docs/events.md).
PROVISIONAL = frozenset(
    {
        AgentEventType.TURN_STARTED,
        AgentEventType.STEP_STARTED,
        AgentEventType.MODEL_STARTED,
        AgentEventType.MODEL_TEXT_DELTA,
        AgentEventType.MODEL_REASONING_DELTA,
        AgentEventType.MODEL_TOOL_CALL_DELTA,
        AgentEventType.TOOL_STARTED,
        AgentEventType.TOOL_PROGRESS,
    }
)

#: The event that ends a turn, by the terminal status it ends with: the one list of both.
#: Every other list of terminal events derives from it; ``status.TERMINAL`` must equal
#: its keys (status.py is imported here, so a test pins that instead of an import).
TERMINAL_EVENT: Mapping[AgentTurnStatus, AgentEventType] = MappingProxyType(
    {
        AgentTurnStatus.COMPLETED: AgentEventType.TURN_COMPLETED,
        AgentTurnStatus.FAILED: AgentEventType.TURN_FAILED,
        AgentTurnStatus.CANCELLED: AgentEventType.TURN_CANCELLED,
        AgentTurnStatus.MAX_ITERATIONS_REACHED: AgentEventType.MAX_ITERATIONS_REACHED,
        AgentTurnStatus.MAX_STEPS_REACHED: AgentEventType.MAX_STEPS_REACHED,
        AgentTurnStatus.BUDGET_EXCEEDED: AgentEventType.BUDGET_EXCEEDED,
    }
)

#: The events that end a turn.
TERMINAL_EVENTS = frozenset(TERMINAL_EVENT.values())


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """One event; ``data`` is deeply read-only and holds at least status, phase, step count.

    Committed events (``provisional`` False) were written by the commit they describe;
    ``sequence`` numbers them 1, 2, 3, ... per turn, across processes. A provisional
    event carries the sequence of the last committed event before it and its ``attempt``.
    """

    event_id: str
    type: AgentEventType
    turn_id: str
    root_turn_id: str
    parent_turn_id: str | None
    agent_id: str
    agent_version: str
    sequence: int
    occurred_at: float
    data: Mapping[str, Any]
    provisional: bool = False
    #: The attempt (lease id, or a direct runner's step id) that made a provisional event.
    attempt: str | None = None

    def sequenced(self, sequence: int) -> AgentEvent:
        """A copy numbered as its commit assigned (every committed event gets one)."""
        return AgentEvent(
            self.event_id,
            self.type,
            self.turn_id,
            self.root_turn_id,
            self.parent_turn_id,
            self.agent_id,
            self.agent_version,
            sequence,
            self.occurred_at,
            self.data,
            self.provisional,
            self.attempt,
        )


AgentEventListener = Callable[[AgentEvent], None]

_ids: list[Any] = []


def _new_id_source() -> None:
    _ids[:] = [uuid.uuid4().hex[:20], itertools.count()]


_new_id_source()
os.register_at_fork(after_in_child=_new_id_source)


def new_event_id() -> str:
    """A unique event id: a random per-process prefix and a counter (new after a fork)."""
    prefix, counter = _ids
    return f"{prefix}{next(counter):012x}"


def make_event(
    s: AgentTurnSnapshot,
    type: AgentEventType,
    data: Mapping[str, Any],
    *,
    attempt: str | None = None,
    provisional: bool | None = None,
) -> AgentEvent:
    """An event about the turn ``s`` as it is now (unnumbered until its commit).

    ``provisional``: by default whether ``type`` is in ``PROVISIONAL``.
    """
    payload = {"status": s.status.value, "phase": s.phase.value, "step_count": s.step_count}
    payload.update(data)
    if provisional is None:
        provisional = type in PROVISIONAL
    return AgentEvent(
        event_id=new_event_id(),
        type=type,
        turn_id=s.id,
        root_turn_id=s.root_turn_id,
        parent_turn_id=s.parent_turn_id,
        agent_id=s.agent_id,
        agent_version=s.agent_version,
        sequence=s.event_sequence,
        occurred_at=time.time(),
        data=freeze(payload),
        provisional=provisional,
        attempt=attempt if provisional else None,
    )


def event_to_dict(event: AgentEvent) -> dict[str, Any]:
    """Every field of the event as JSON-ready values (enums as their values)."""
    return _document(event, thaw(event.data))


def event_json(event: AgentEvent) -> bytes:
    """The event as compact JSON, UTF-8 (unknown values as their JSON form or text)."""
    # read-only dicts and lists are dicts and lists to the encoder; other mappings copied
    data = event.data if isinstance(event.data, dict) else thaw(event.data)
    return to_json(_document(event, data), fallback=json_default)


def stored_event_json(event: AgentEvent) -> bytes:
    """An event as a stream entry holds it: what it adds, not what every entry repeats.

    Left out (the Redis store's readers put them back): the root id when the event is the root's
    own, a parent id of None, the sequence of a committed event (the entry's ``seq``),
    ``provisional`` when false and an ``attempt`` of None. A reader sees every field.
    """
    doc: dict[str, Any] = {
        "event_id": event.event_id,
        "type": event.type.value,
        "turn_id": event.turn_id,
    }
    if event.root_turn_id != event.turn_id:
        doc["root_turn_id"] = event.root_turn_id
    if event.parent_turn_id is not None:
        doc["parent_turn_id"] = event.parent_turn_id
    doc["agent_id"] = event.agent_id
    doc["agent_version"] = event.agent_version
    if event.provisional:
        doc["sequence"] = event.sequence
        doc["provisional"] = True
    if event.attempt is not None:
        doc["attempt"] = event.attempt
    doc["occurred_at"] = event.occurred_at
    doc["data"] = event.data if isinstance(event.data, dict) else thaw(event.data)
    return to_json(doc, fallback=json_default)


def _document(event: AgentEvent, data: Any) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "type": event.type.value,
        "turn_id": event.turn_id,
        "root_turn_id": event.root_turn_id,
        "parent_turn_id": event.parent_turn_id,
        "agent_id": event.agent_id,
        "agent_version": event.agent_version,
        "sequence": event.sequence,
        "occurred_at": event.occurred_at,
        "data": data,
        "provisional": event.provisional,
        "attempt": event.attempt,
    }


def event_from_dict(doc: Mapping[str, Any]) -> AgentEvent:
    """The inverse of ``event_to_dict``."""
    return AgentEvent(
        event_id=str(doc["event_id"]),
        type=AgentEventType(doc["type"]),
        turn_id=str(doc["turn_id"]),
        root_turn_id=str(doc["root_turn_id"]),
        parent_turn_id=doc.get("parent_turn_id"),
        agent_id=str(doc["agent_id"]),
        agent_version=str(doc["agent_version"]),
        sequence=int(doc.get("sequence") or 0),
        occurred_at=float(doc["occurred_at"]),
        data=freeze(doc.get("data") or {}),
        provisional=bool(doc.get("provisional", False)),
        attempt=doc.get("attempt"),
    )


def json_default(value: Any) -> Any:
    """JSON for enums, pydantic models, sets and anything else (as text)."""
    if isinstance(value, Enum):
        return value.value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


class EventBus:
    """Delivers events synchronously to listeners; a listener that raises is logged."""

    def __init__(self) -> None:
        self._listeners: tuple[AgentEventListener, ...] = ()
        #: True when someone listens (read several times a step: kept, not computed).
        self.active = False

    def add(self, listener: AgentEventListener) -> None:
        """Add a listener."""
        self._listeners = (*self._listeners, listener)
        self.active = True

    def remove(self, listener: AgentEventListener) -> None:
        """Remove a listener (no error if absent)."""
        self._listeners = tuple(x for x in self._listeners if x is not listener)
        self.active = bool(self._listeners)

    @property
    def listeners(self) -> tuple[AgentEventListener, ...]:
        """The listeners, in order."""
        return self._listeners

    def deliver(self, event: AgentEvent) -> None:
        """Hand ``event`` to every listener, in order."""
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener %r failed on %s", listener, event.type.value)

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
