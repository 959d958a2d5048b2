"""What a step task and a sweep do, free of Celery so tests can call them directly."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from agentworker.notify import webhooks
from agentworker.ops import logs, metrics
from runner_core import (
    AgentRunner,
    AgentTurn,
    AgentTurnStatus,
    ConcurrentModificationError,
    LeaseLostError,
    SnapshotCorruptedError,
    TurnNotFoundError,
)
from runner_core.errors import shorten
from runner_core.store import waiting_child_ids
from runner_core.worker import abandoned_tool_threads

log = logging.getLogger("agentworker.steps")


def step_once(runner: AgentRunner, turn_id: str, worker_id: str, chain_seconds: float = 0.0) -> str:
    """Claim the turn, take one step under its lease, release, then wake what is runnable.

    With ``chain_seconds`` > 0 the task goes on with the same turn while it can run at once
    and less than ``chain_seconds`` have passed since its claim: each step's last commit
    keeps (and renews) the lease when the turn can run at once, so the next step follows
    under it with no claim and no publish or delivery in between; each step is still
    fenced and committed on its own. The task's own message stays unacknowledged
    meanwhile, so a worker killed mid-chain leaves it to be redelivered.

    Returns what the last step did, for logs and Flower: ``not-found``, ``not-runnable``,
    ``quarantined``, ``fenced`` or the turn's status after the step.
    """
    started = time.perf_counter()
    outcome, turn = _claim(runner, turn_id, worker_id)
    if turn is None:
        metrics.step_done(outcome, None, time.perf_counter() - started)
        if outcome == "not-runnable":
            # a duplicate, or the message of a process that died after its last commit:
            # what that process's listeners would have recorded is recorded now
            webhooks.catch_up(runner, turn_id)
        return outcome
    outcome, kept = _step_chain(runner, turn, started, chain_seconds)
    if outcome in ("fenced", "quarantined"):
        return outcome
    if kept:
        # the last commit kept the lease, so it marked no wake-up queued: send one unmarked
        if _runs_now(turn) or turn.state.cancel_requested:
            runner.dispatch(turn.id, agent_id=turn.state.agent_id)
        return outcome
    _wake_next(runner, turn)
    return outcome


def _runs_now(turn: AgentTurn) -> bool:
    return turn.state.status in (AgentTurnStatus.READY, AgentTurnStatus.RUNNING)


def _claim(runner: AgentRunner, turn_id: str, worker_id: str) -> tuple[str, AgentTurn | None]:
    try:
        turn = runner.claim(turn_id, worker_id)
    except TurnNotFoundError:
        log.warning("step for unknown turn %s acked and dropped", shorten(turn_id))
        return "not-found", None
    except SnapshotCorruptedError:
        return "quarantined", None  # moved aside (and logged) by the store: never sent again
    if turn is None:
        return "not-runnable", None
    return "claimed", turn


def _step_chain(
    runner: AgentRunner, turn: AgentTurn, started: float, chain_seconds: float
) -> tuple[str, bool]:
    """Steps under the claimed lease while its commits keep it; (outcome, lease kept).

    The second value: the last commit kept the lease (``holding`` gave it back since), or
    a step raised after an earlier one kept it; either way no wake-up was marked queued.
    """
    held = turn.held_lease
    assert held is not None
    kept = False
    step_started = started
    try:
        # everything after the claim runs inside ``holding``: a failure anywhere (even
        # reading the clock) gives the lease back instead of leaving it to the heartbeat
        with runner.holding(turn), logs.turn_context(turn):
            metrics.claimed(turn, runner.store.now())
            held.keep_until = time.monotonic() + chain_seconds - (time.perf_counter() - started)
            while True:
                version = turn.state.version
                runner.step(turn, release=True)
                metrics.step_done(turn.status.value, turn, time.perf_counter() - step_started)
                metrics.tool_threads_abandoned(abandoned_tool_threads())
                kept = not held.released
                if not kept or turn.state.version == version:
                    break  # given back, or nothing was committed (``holding`` gives it back)
                step_started = time.perf_counter()
    except SnapshotCorruptedError:
        # a commit found the stored record spoiled: moved aside
        metrics.step_done("quarantined", None, time.perf_counter() - step_started)
        return "quarantined", False
    except (LeaseLostError, ConcurrentModificationError) as exc:
        metrics.step_done("fenced", turn, time.perf_counter() - step_started)
        if held.overran:
            log.warning("turn %s: fenced, its step ran past the time limit (%s)", turn.id, exc)
            metrics.fenced("lease_cut")
        else:
            log.warning("turn %s: fenced, another worker owns it now (%s)", turn.id, exc)
            metrics.fenced("lease_lost" if isinstance(exc, LeaseLostError) else "version")
        return "fenced", False
    except Exception:
        if kept:  # an earlier step kept the lease: nothing marked the turn's wake-up queued
            runner.dispatch(turn.id, agent_id=turn.state.agent_id)
        raise
    return turn.status.value, kept


def _wake_next(runner: AgentRunner, turn: AgentTurn) -> None:
    """Re-enqueue a turn that can go on, or the children it now waits for.

    The step's last commit marked them queued (it released the lease with the wake flag).
    """
    st = turn.state
    if st.status.is_terminal:
        return  # a waiting parent was woken (and marked) by the child's last commit
    if _runs_now(turn) or st.cancel_requested:
        runner.dispatch(turn.id, marked=True, agent_id=st.agent_id)
    elif st.status is AgentTurnStatus.WAITING_FOR_CHILD:
        for child_id in waiting_child_ids(st):
            runner.dispatch(child_id, marked=True)


@dataclass(frozen=True)
class SweepReport:
    """What one sweep woke."""

    due: int
    lost: int
    repaired: int


REPAIR_SECONDS = 600.0
"""How often a process's sweeps also run the repair scan (it reads every live tree)."""


class RepairClock:
    """When a process's sweeps last ran the repair scan (its process object holds one)."""

    def __init__(self) -> None:
        self.last = float("-inf")

    def due(self) -> bool:
        """Whether ``REPAIR_SECONDS`` have passed since the last scan."""
        return time.monotonic() - self.last >= REPAIR_SECONDS

    def ran(self) -> None:
        """A scan starts now."""
        self.last = time.monotonic()


def sweep_once(
    runner: AgentRunner,
    lost_after: float,
    limit: int = 1000,
    *,
    repair: bool | None = None,
    clock: RepairClock | None = None,
) -> SweepReport:
    """Wake what should run: due retries, lost wake-ups, dead workers' turns, parents.

    Safe to run twice: a wake-up is only a hint, the lease decides who steps; a wake-up
    already queued is known (its mark) and not sent again, so a backlog never multiplies.
    The repair scan (children's results that never reached their parent: records older
    than the atomic fan-in) costs what is live, so it runs every ``REPAIR_SECONDS`` by
    ``clock`` (a sweep without one always runs it), or when ``repair`` says so.
    """
    started = time.perf_counter()
    report = _sweep_once(runner, lost_after, limit, repair, clock)
    metrics.swept(time.perf_counter() - started, report.due, report.lost, report.repaired)
    return report


def _sweep_once(
    runner: AgentRunner,
    lost_after: float,
    limit: int,
    repair: bool | None,
    clock: RepairClock | None,
) -> SweepReport:
    store = runner.store
    runner.waker.retry_unsent()  # wake-ups this process could not send while Redis was down
    now = store.now()
    found = store.wakeups(now, lost_after, limit)
    due, lost = found.due, found.lost
    # each wake-up sent is marked queued: the next sweeps leave the turn alone until it has
    # been claimed, or until the mark runs out (the message really was lost)
    runner.wake(list(dict.fromkeys([*due, *lost])))
    if repair is None:
        repair = clock is None or clock.due()
    repaired = 0
    if repair:
        if clock is not None:
            clock.ran()
        repaired = runner.repair(limit)
    return SweepReport(len(due), len(lost), repaired)
