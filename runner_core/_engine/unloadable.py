"""Turns whose agent version this process cannot load (a rolling deploy, a missing agent)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from runner_core.agent import Agent
from runner_core.errors import AgentNotFoundError
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.status import AgentTurnStatus
from runner_core.turn import AgentTurn
from runner_core.worker import HeldLease

if TYPE_CHECKING:
    from runner_core.runner import AgentRunner

log = logging.getLogger("runner_core.runner")


def leave_or_fail(
    runner: AgentRunner, snapshot: AgentTurnSnapshot, held: HeldLease, exc: Exception
) -> None:
    """Leave a just-claimed turn to a worker that has its agent, or fail it after a grace.

    During a rolling deploy some workers have a version and some do not. The lease goes
    back with no wake-up (the sweeper sends one after ``lost_wakeup_seconds``, to any
    worker); only a turn no worker has served for ``runner.unloadable_grace_seconds``
    since its last commit is failed.
    """
    waited = runner.store.now() - snapshot.updated_at
    grace = runner.unloadable_grace_seconds
    if waited < grace:
        log.warning(
            "turn %s needs agent %r version %r, which this worker cannot load (%s); "
            "left for another worker (unserved for %.0fs of %.0fs)",
            snapshot.id,
            snapshot.agent_id,
            snapshot.agent_version,
            exc,
            waited,
            grace,
        )
        held.release()
        return
    log.error("turn %s: no worker loaded its agent for %.0fs; failing it", snapshot.id, waited)
    turn = AgentTurn(snapshot, Agent(snapshot.agent_id, _NoModel(), version=snapshot.agent_version))
    turn.held_lease = held
    try:
        runner.kernel.finish(turn, AgentTurnStatus.FAILED, str(exc), exc)
    finally:
        turn.held_lease = None
        held.release()
        runner.events.flush()


class _NoModel:
    """Stands in for the model of an agent that could not be loaded (never called)."""

    def generate(self, request: Any) -> Any:
        raise AgentNotFoundError("unloadable")
