"""Worker mode in one process: a poller that claims runnable turns and steps them.

Also what a worker reports about steps it could not stop: how many sync tool threads were
abandoned on a timeout, and the lease backstop (``runner_core._engine.leases``): a step
still running ``step_grace(limit)`` seconds past its deadline loses its lease.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from runner_core._engine import aio
from runner_core._engine.leases import CUTS, STEP_GRACE_SECONDS, step_grace

if TYPE_CHECKING:
    from runner_core.runner import AgentRunner

log = logging.getLogger("runner_core.worker")

__all__ = [
    "STEP_GRACE_SECONDS",
    "AgentWorker",
    "abandoned_tool_threads",
    "cut_leases",
    "default_worker_id",
    "on_lease_cut",
    "step_grace",
]


def abandoned_tool_threads() -> int:
    """Sync tool calls this process abandoned on a timeout (their threads may still run)."""
    return aio.abandoned_threads()


def cut_leases() -> int:
    """Leases this process cut because their step ran past the time limit and its grace."""
    return CUTS.count


def on_lease_cut(listener: Callable[[str], None]) -> None:
    """Call ``listener(turn_id)`` from the heartbeat thread whenever a lease is cut."""
    CUTS.add_listener(listener)


def default_worker_id() -> str:
    """Host-process-random id; a restarted process never reuses a lease id anyway."""
    return f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class AgentWorker:
    """An in-process poller: claim runnable turns, step each once under its lease, release."""

    def __init__(self, runner: AgentRunner, worker_id: str | None = None, batch: int = 10) -> None:
        self.runner = runner
        self.worker_id = worker_id or default_worker_id()
        self.batch = batch

    def run_once(self) -> int:
        """One poll: returns how many steps were taken."""
        claimed = self.runner.claim_runnable(self.worker_id, limit=self.batch)
        for turn in claimed:
            with self.runner.holding(turn):
                self.runner.step(turn, release=True)

        return len(claimed)

    def run_until_idle(self, max_polls: int = 10_000) -> int:
        """Poll until nothing is runnable; returns the steps taken."""
        steps = 0
        for _ in range(max_polls):
            n = self.run_once()
            if n == 0:
                return steps
            steps += n
        return steps

    def run_forever(self, stop: threading.Event, idle_sleep: float = 0.05) -> None:
        """Poll until ``stop`` is set."""
        while not stop.is_set():
            try:
                if self.run_once() == 0:
                    stop.wait(idle_sleep)
            except Exception:
                log.exception("worker %s: poll failed", self.worker_id)
                stop.wait(idle_sleep)
