"""What a step task and a sweep do, free of Celery so tests can call them directly."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from runner_core import (
    AgentRunner,
    AgentTurn,
    AgentTurnStatus,
    ConcurrentModificationError,
    LeaseLostError,
    TurnNotFoundError,
)
from runner_core.store import waiting_child_ids

log = logging.getLogger("agentworker.steps")


def step_once(runner: AgentRunner, turn_id: str, worker_id: str) -> str:
    """Claim the turn, take one step under its lease, release, then wake what is runnable.

    Returns what happened, for logs and Flower: ``not-found``, ``not-runnable``, ``fenced``
    or the turn's status after the step.
    """
    try:
        turn = runner.claim(turn_id, worker_id)
    except TurnNotFoundError:
        log.warning("step for unknown turn %s acked and dropped", turn_id)
        return "not-found"
    if turn is None:
        return "not-runnable"
    try:
        with runner.holding(turn):
            runner.step(turn, release=True)

    except (LeaseLostError, ConcurrentModificationError) as exc:
        log.warning("turn %s: fenced, another worker owns it now (%s)", turn_id, exc)
        return "fenced"
    _wake_next(runner, turn)
    return turn.status.value


def _wake_next(runner: AgentRunner, turn: AgentTurn) -> None:
    """Re-enqueue a turn that can go on, or the children it now waits for."""
    st = turn.state
    if st.status.is_terminal:
        return  # a waiting parent was woken by the fan-in, under this lease
    if st.status in (AgentTurnStatus.READY, AgentTurnStatus.RUNNING) or st.cancel_requested:
        runner.dispatch(turn.id)
    elif st.status is AgentTurnStatus.WAITING_FOR_CHILD:
        for child_id in waiting_child_ids(st):
            runner.dispatch(child_id)


@dataclass(frozen=True)
class SweepReport:
    """What one sweep woke."""

    due: int
    lost: int
    repaired: int


def sweep_once(runner: AgentRunner, lost_after: float, limit: int = 1000) -> SweepReport:
    """Wake what should run: due retries, lost wake-ups, dead workers' turns, parents.

    Safe to run twice: a wake-up is only a hint, the lease decides who steps.
    """
    store = runner.store
    now = store.now()
    due = store.due_turn_ids(now, limit)  # type: ignore[attr-defined]
    lost = store.stale_turn_ids(now, lost_after, limit)  # type: ignore[attr-defined]
    for turn_id in dict.fromkeys([*due, *lost]):
        runner.dispatch(turn_id)
    repaired = runner.repair(limit)
    return SweepReport(len(due), len(lost), repaired)
