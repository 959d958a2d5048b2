"""Leases: fencing stale workers, lease ids, the heartbeat, direct calls on leased turns."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnStatus,
    ConcurrentModificationError,
    InMemoryAgentTurnStore,
    LeaseLostError,
    ModelRequest,
    tool,
)
from runner_core._engine.leases import HeldLease
from runner_core.snapshot import LeaseInfo
from runner_core.store import SaveResult
from tests.support.commits import save
from tests.support.scripts import Script, agent, ask, call


def test_stale_worker_is_fenced_after_its_lease_is_reclaimed(
    make_runner: Callable[..., AgentRunner], store: InMemoryAgentTurnStore
) -> None:
    # Given worker A holds a turn whose next step would run a tool
    ran: list[str] = []

    @tool
    def charge() -> str:
        """Charge."""
        ran.append("charge")
        return "charged"

    runner_a = make_runner()
    script = Script(ask(call("charge")), then="done")
    turn = runner_a.start(agent(script, charge), "buy")
    held_a = runner_a.claim(turn.id, "worker-A")
    assert held_a is not None

    # When A stalls past its lease (no heartbeat) and worker B reclaims the turn
    later = store.now() + 60.0
    snap_b = store.claim(turn.id, "worker-B", later, 30_000)
    assert snap_b is not None and snap_b.lease is not None
    assert snap_b.version == held_a.version + 1
    before = store.load(turn.id)

    # Then A's heartbeat is refused and anything A tries is fenced off
    assert held_a.held_lease is not None and held_a.held_lease.renew() is False
    with pytest.raises((LeaseLostError, ConcurrentModificationError)):
        runner_a.step(held_a)
    with pytest.raises((LeaseLostError, ConcurrentModificationError)):
        runner_a.save_snapshot(held_a)
    with pytest.raises(ConcurrentModificationError) as caught:
        save(store, held_a.state, held_a.version)
    assert (caught.value.expected, caught.value.actual) == (held_a.version, snap_b.version)
    assert store.load(turn.id) == before
    assert script.calls == 0 and ran == []
    # and A's release does not drop B's lease
    assert runner_a.release(held_a) is False
    lease = store.peek(turn.id).lease
    assert lease is not None and lease.owner == "worker-B"


def test_stale_worker_save_after_real_lease_expiry_is_refused(
    make_runner: Callable[..., AgentRunner], store: InMemoryAgentTurnStore
) -> None:
    # Given worker A with a 50 ms lease whose heartbeat has stopped (a paused process)
    runner_a = make_runner(AgentExecutionPolicy(lease_seconds=0.05))
    runner_b = make_runner(AgentExecutionPolicy(lease_seconds=5.0))
    script = Script(then="answer")
    turn = runner_a.start(agent(script), "hi")
    held_a = runner_a.claim(turn.id, "worker-A")
    assert held_a is not None and held_a.held_lease is not None
    runner_a._keeper.drop(held_a.held_lease)

    # When the lease runs out and worker B claims the turn
    time.sleep(0.06)
    held_b = runner_b.claim(turn.id, "worker-B")
    assert held_b is not None

    # Then A may not step (no model call), and B runs the turn
    with pytest.raises(LeaseLostError, match="expired"):
        runner_a.step(held_a)
    assert script.calls == 0
    with runner_b.holding(held_b):
        runner_b.step(held_b)
    assert held_b.status is AgentTurnStatus.COMPLETED
    assert script.calls == 1


def test_old_lease_id_is_refused_even_with_a_reused_worker_id(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    # Given worker w1 held a lease that expired, then w1 (same id, new life) claimed again
    turn = runner.start(agent(Script()), "hi")
    now = store.now()
    first = store.claim(turn.id, "w1", now, 1_000)
    assert first is not None and first.lease is not None
    assert store.claim(turn.id, "w2", now + 0.5, 1_000) is None  # still live
    second = store.claim(turn.id, "w1", now + 2.0, 1_000)
    assert second is not None and second.lease is not None
    old_id, new_id = first.lease.lease_id, second.lease.lease_id
    assert old_id != new_id
    version = store.peek(turn.id).version

    # When the old life renews or releases with its lease id
    renewed = store.renew_lease(turn.id, "w1", old_id, now + 2.1, now + 60)
    released = store.release_lease(turn.id, "w1", old_id)

    # Then both are refused and the current lease is untouched, with no version change
    assert (renewed, released) == (False, False)
    control = store.peek(turn.id)
    assert control.lease == second.lease
    assert control.version == version
    # while the current lease id works
    assert store.renew_lease(turn.id, "w1", new_id, now + 2.1, now + 60) is True
    assert store.peek(turn.id).lease.until == now + 60  # type: ignore[union-attr]
    assert store.release_lease(turn.id, "w1", new_id) is True
    assert store.peek(turn.id).lease is None
    assert store.peek(turn.id).version == version


def test_renew_of_an_expired_lease_is_refused(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    turn = runner.start(agent(Script()), "hi")
    now = store.now()
    snap = store.claim(turn.id, "w1", now, 1_000)
    assert snap is not None and snap.lease is not None

    assert store.renew_lease(turn.id, "w1", snap.lease.lease_id, now + 1.5, now + 5) is False
    assert store.renew_lease(turn.id, "w2", snap.lease.lease_id, now, now + 5) is False


def test_heartbeat_keeps_the_lease_during_a_long_model_call(
    make_runner: Callable[..., AgentRunner], store: InMemoryAgentTurnStore
) -> None:
    # Given a 150 ms lease and a model call that takes about three leases
    lease_seconds = 0.15
    runner = make_runner(AgentExecutionPolicy(lease_seconds=lease_seconds))
    stolen: list[object] = []

    def slow(request: ModelRequest) -> Any:
        deadline = time.monotonic() + 3 * lease_seconds
        while time.monotonic() < deadline:
            time.sleep(0.03)
            # another worker keeps trying to take the turn meanwhile
            stolen.append(store.claim(turn.id, "intruder", store.now(), 1_000))
        return "slow answer"

    script = Script(slow)
    turn = runner.start(agent(script), "think hard")
    held = runner.claim(turn.id, "worker-A")
    assert held is not None

    # When the worker steps it inside its lease
    with runner.holding(held):
        runner.step(held)

    # Then nobody could claim it, and the step's save went through
    assert len(stolen) >= 10
    assert stolen == [None] * len(stolen)
    assert held.status is AgentTurnStatus.COMPLETED
    assert store.load(turn.id).status is AgentTurnStatus.COMPLETED
    assert store.peek(turn.id).lease is None  # released by holding()


def test_direct_step_on_a_turn_leased_by_another_worker_is_refused(
    make_runner: Callable[..., AgentRunner],
) -> None:
    # Given a turn leased by worker B
    runner_a, runner_b = make_runner(), make_runner()
    script = Script(then="should not be asked")
    turn = runner_a.start(agent(script), "hi")
    assert runner_b.claim(turn.id, "worker-B") is not None

    # When runner A restores it and steps it directly
    restored = runner_a.restore(turn.id)
    with pytest.raises(LeaseLostError, match="turn is leased by worker 'worker-B'"):
        runner_a.step(restored)

    # Then the model was never called and nothing was written
    assert script.calls == 0
    assert runner_a.restore(turn.id).status is AgentTurnStatus.READY


def test_direct_run_on_a_stale_copy_is_refused(runner: AgentRunner) -> None:
    script = Script(then="x")
    turn = runner.start(agent(script), "hi")
    assert runner.claim(turn.id, "w") is not None  # bumps the version

    with pytest.raises(ConcurrentModificationError):
        runner.run_until_blocked(turn)
    assert script.calls == 0


def test_claim_of_an_unclaimable_turn_returns_none(runner: AgentRunner) -> None:
    turn = runner.run(agent(Script("done")), "hi")

    assert runner.claim(turn.id, "w") is None


def test_release_of_an_unheld_turn_is_false(runner: AgentRunner) -> None:
    turn = runner.start(agent(Script()), "hi")

    assert runner.release(turn) is False


def test_the_keeper_stops_renewing_a_lease_it_can_no_longer_hold(
    store: InMemoryAgentTurnStore,
) -> None:
    # Given two held leases renewed every 20 ms: one whose turn disappears, one whose
    # store stays unreachable past the lease's end
    from runner_core._engine.leases import HeldLease, LeaseKeeper
    from runner_core.snapshot import LeaseInfo

    calls: list[str] = []

    class Gone(InMemoryAgentTurnStore):
        def renew_lease(self, turn_id: str, *args: Any) -> bool:
            calls.append(turn_id)
            if turn_id == "gone":
                from runner_core import TurnNotFoundError

                raise TurnNotFoundError(turn_id)
            raise ConnectionError("store down")

    flaky = Gone()
    keeper = LeaseKeeper()
    lease = LeaseInfo(owner="w", lease_id="l", until=0.0)
    gone, down = HeldLease(flaky, "gone", lease, 0.06), HeldLease(flaky, "down", lease, 0.06)
    keeper.hold(gone)
    keeper.hold(down)

    # When the keeper has had time for many renewals
    time.sleep(0.5)

    # Then the vanished turn was tried once, the unreachable one until its lease ran out
    assert gone.lost and down.lost
    assert calls.count("gone") == 1
    assert 1 <= calls.count("down") <= 5
    assert keeper._held == {}


def test_a_renewing_commit_moves_the_local_deadline_only_when_the_store_renewed() -> None:
    # Given a held lease, 10 s long, that is half spent
    store = InMemoryAgentTurnStore()
    since = time.monotonic() - 5.0
    held = HeldLease(store, "t1", LeaseInfo(owner="w", lease_id="l", until=0.0), 10.0, since)
    held.sent_at = time.monotonic()
    before = held._deadline  # type: ignore[attr-defined]

    # When a commit's reply names an expiry in the past (the store did not renew)
    held.saved(SaveResult(1, False, lease_until=store.now() - 1.0), renewed=True)
    # Then nothing is gained
    assert held._deadline == before  # type: ignore[attr-defined]

    # When the reply names a renewed expiry, 10 s from now
    held.saved(SaveResult(2, False, lease_until=store.now() + 10.0), renewed=True)
    # Then the lease counts from the commit's send, with the usual margin
    assert held._deadline == pytest.approx(held.sent_at + 8.0, abs=0.05)  # type: ignore[attr-defined]


def test_dropping_a_lease_waits_for_its_renewal_in_flight() -> None:
    # Given a held lease whose renewal is under way in the keeper's thread
    import threading

    from runner_core._engine.leases import LeaseKeeper

    entered, finish = threading.Event(), threading.Event()
    talking: list[str] = []

    class Slow(InMemoryAgentTurnStore):
        def renew_lease(self, turn_id: str, *args: Any) -> bool:
            talking.append("renewing")
            entered.set()
            finish.wait(5)
            talking.append("renewed")
            return True

    keeper = LeaseKeeper()
    held = HeldLease(Slow(), "t1", LeaseInfo(owner="w", lease_id="l", until=0.0), 3.0, 0.0)
    keeper.hold(held)
    assert entered.wait(5)

    # When a releasing thread drops it while the renewal still talks to the store
    dropped = threading.Event()
    dropper = threading.Thread(target=lambda: (keeper.drop(held), dropped.set()))
    dropper.start()

    # Then the drop returns only once the renewal is over (the store may be closed after)
    assert not dropped.wait(0.2)
    finish.set()
    assert dropped.wait(5)
    dropper.join(5)
    assert talking == ["renewing", "renewed"]
    assert keeper._held == {}


def test_a_drop_never_waits_on_another_lease_renewal() -> None:
    # Given two held leases, one of them stuck renewing on an unreachable store
    import threading

    from runner_core._engine.leases import LeaseKeeper

    entered, finish = threading.Event(), threading.Event()

    class Stuck(InMemoryAgentTurnStore):
        def renew_lease(self, turn_id: str, *args: Any) -> bool:
            entered.set()
            finish.wait(5)
            return True

    keeper = LeaseKeeper()
    info = LeaseInfo(owner="w", lease_id="l", until=0.0)
    stuck = HeldLease(Stuck(), "t1", info, 0.6, 0.0)
    other = HeldLease(InMemoryAgentTurnStore(), "t2", info, 3.0, time.monotonic())
    keeper.hold(stuck)
    keeper.hold(other)
    assert entered.wait(5)

    # When the other one is dropped, then the stuck one
    started = time.monotonic()
    keeper.drop(other)
    # Then the other returns at once, the stuck one after at most its lease's length
    assert time.monotonic() - started < 0.3
    keeper.drop(stuck)
    assert 0.4 < time.monotonic() - started < 3.0
    finish.set()


def test_a_lease_under_a_millisecond_is_claimed_as_one(store: InMemoryAgentTurnStore) -> None:
    # Given a policy asking for a lease shorter than the store's unit (whole milliseconds)
    runner = AgentRunner(turn_store=store, policy=AgentExecutionPolicy(lease_seconds=0.0004))
    script = Script(then="done")
    turn = runner.start(agent(script), "hi")

    # When a worker claims the turn, then it holds it for a millisecond: not refused as 0 ms
    before = store.now()
    held = runner.claim(turn.id, "w")
    after = store.now()
    assert held is not None and held.state.lease is not None
    assert before + 0.001 - 1e-6 <= held.state.lease.until <= after + 0.001 + 1e-6
    runner.release(held)
