"""Turns whose agent version this process cannot load (a rolling deploy, a missing agent)."""

from __future__ import annotations

import logging
from typing import Any

from runner_core._engine.kernel import TurnKernel
from runner_core._engine.leases import HeldLease
from runner_core.agent import Agent
from runner_core.errors import AgentNotFoundError
from runner_core.events import EventBus
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.status import AgentTurnStatus
from runner_core.turn import AgentTurn

log = logging.getLogger("runner_core.runner")


class UnloadableTurns:
    """What a runner does with a claimed turn whose agent it cannot load."""

    def __init__(self, kernel: TurnKernel, events: EventBus) -> None:
        self.kernel = kernel
        self.events = events

    def leave_or_fail(
        self, snapshot: AgentTurnSnapshot, held: HeldLease, exc: Exception, grace: float
    ) -> None:
        """Leave a just-claimed turn to a worker that has its agent, or fail it after ``grace``.

        During a rolling deploy some workers have a version and some do not. The lease goes
        back with no wake-up (the sweeper sends one after ``lost_wakeup_seconds``, to any
        worker); only a turn no worker has served for ``grace`` seconds since its last
        commit is failed.
        """
        waited = self.kernel.store.now() - snapshot.updated_at
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
        agent = Agent(snapshot.agent_id, _NoModel(), version=snapshot.agent_version)
        turn = AgentTurn(snapshot, agent)
        turn.held_lease = held
        try:
            self.kernel.finish(turn, AgentTurnStatus.FAILED, str(exc), exc)
        finally:
            turn.held_lease = None
            held.release()
            self.events.flush()


class _NoModel:
    """Stands in for the model of an agent that could not be loaded (never called)."""

    def generate(self, request: Any) -> Any:
        raise AgentNotFoundError("unloadable")
