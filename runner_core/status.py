"""Turn statuses and phases."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Protocol

from runner_core.errors import IllegalTransitionError


class AgentTurnStatus(str, Enum):
    """Where a turn stands: can it continue, and if not, why."""

    #: Created, waiting to be stepped or claimed by a worker.
    READY = "READY"
    #: Being stepped right now.
    RUNNING = "RUNNING"
    #: Waiting for a user to submit input (a form) through a resume command.
    WAITING_FOR_USER = "WAITING_FOR_USER"
    #: Waiting for a human to approve or reject a tool call.
    WAITING_FOR_APPROVAL = "WAITING_FOR_APPROVAL"
    #: Waiting for one or more child turns to end.
    WAITING_FOR_CHILD = "WAITING_FOR_CHILD"
    #: Waiting for ``next_runnable_at`` after a retryable failure.
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    #: Ended normally with a final answer.
    COMPLETED = "COMPLETED"
    #: Ended by an error that was not retryable or had no retries left.
    FAILED = "FAILED"
    #: Ended by a cancellation request.
    CANCELLED = "CANCELLED"
    #: Ended because the model was asked ``max_iterations`` times.
    MAX_ITERATIONS_REACHED = "MAX_ITERATIONS_REACHED"
    #: Ended because the runner stepped it ``max_steps`` times.
    MAX_STEPS_REACHED = "MAX_STEPS_REACHED"
    #: Ended because a budget dimension was exhausted.
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"

    @property
    def is_blocked(self) -> bool:
        """True while the turn waits for something outside the runner."""
        return self in BLOCKED

    @property
    def is_terminal(self) -> bool:
        """True once the turn has ended, whichever way."""
        return self in TERMINAL

    def __str__(self) -> str:
        return self.value


BLOCKED = frozenset(
    {
        AgentTurnStatus.WAITING_FOR_USER,
        AgentTurnStatus.WAITING_FOR_APPROVAL,
        AgentTurnStatus.WAITING_FOR_CHILD,
        AgentTurnStatus.RETRY_SCHEDULED,
    }
)
TERMINAL = frozenset(
    {
        AgentTurnStatus.COMPLETED,
        AgentTurnStatus.FAILED,
        AgentTurnStatus.CANCELLED,
        AgentTurnStatus.MAX_ITERATIONS_REACHED,
        AgentTurnStatus.MAX_STEPS_REACHED,
        AgentTurnStatus.BUDGET_EXCEEDED,
    }
)

_S = AgentTurnStatus
_ANY_END = frozenset({_S.CANCELLED, _S.FAILED})  # a cancel request; an agent none can load

#: Every status change a turn may make: README "A turn's life" as data. A step moves a
#: READY turn, a due retry or a woken parent to RUNNING (a resume moves a blocked one);
#: RUNNING blocks or ends. Any live turn may be cancelled, and failed when no worker can
#: load its agent (``_engine.unloadable``). An ended turn never changes again.
TRANSITIONS: Mapping[AgentTurnStatus, frozenset[AgentTurnStatus]] = MappingProxyType(
    {
        _S.READY: frozenset({_S.RUNNING}) | _ANY_END,
        _S.RUNNING: BLOCKED | TERMINAL,
        **{blocked: frozenset({_S.RUNNING}) | _ANY_END for blocked in BLOCKED},
        **{ended: frozenset() for ended in TERMINAL},
    }
)


class _HasStatus(Protocol):
    id: str
    status: AgentTurnStatus


def move(turn: _HasStatus, new: AgentTurnStatus) -> None:
    """Set ``turn.status`` to ``new``, the one way any status changes.

    Raises ``IllegalTransitionError`` (and changes nothing) for an arrow not in the table.
    """
    if new not in TRANSITIONS[turn.status]:
        raise IllegalTransitionError(turn.id, turn.status, new)
    turn.status = new


class AgentTurnPhase(str, Enum):
    """What the next step does: ask the model, or handle the pending tool calls."""

    #: The next step requests the model.
    MODEL = "MODEL"
    #: The model's tool calls are saved; the next step approves or runs them.
    TOOLS = "TOOLS"

    def __str__(self) -> str:
        return self.value
