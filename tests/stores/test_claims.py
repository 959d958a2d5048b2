"""The claim rule, leases and fencing, on every store."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from runner_core import AgentTurnStatus, AgentTurnStore, Commit, ConcurrentModificationError
from tests.support.commits import save
from tests.support.stores import child_of, snap, waiting_for

S = AgentTurnStatus
LEASE_MS = 30_000


def test_concurrent_claims_have_exactly_one_winner(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    stores = [make_store() for _ in range(8)]
    s = snap()
    save(stores[0], s, -1)
    now = stores[0].now()
    start = threading.Barrier(len(stores))
    wins: list[str] = []

    def claim(i: int) -> None:
        start.wait()
        if stores[i].claim(s.id, f"w{i}", now, LEASE_MS) is not None:
            wins.append(f"w{i}")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    lease = stores[0].peek(s.id).lease
    assert lease is not None and lease.owner == wins[0]
    assert stores[0].peek(s.id).version == 1


def test_a_claim_bumps_the_version_and_fences_a_stale_worker(store: AgentTurnStore) -> None:
    s = snap()
    save(store, s, -1)
    now = store.now()
    a = store.claim(s.id, "worker-a", now, 1_000)
    assert a is not None and a.version == 1 and a.lease is not None
    assert a.lease.until == now + 1.0
    assert store.claim(s.id, "worker-b", now + 0.5, 1_000) is None  # lease is live

    # Given worker A's lease expired and worker B claimed the turn
    b = store.claim(s.id, "worker-b", now + 2, 1_000)
    assert b is not None and b.version == 2 and b.lease is not None
    assert b.lease.lease_id != a.lease.lease_id
    # When A saves what it computed
    a.status = S.RUNNING
    with pytest.raises(ConcurrentModificationError) as err:
        save(store, a, a.version)
    # Then it is refused, and B's save goes through with B's lease kept
    assert (err.value.expected, err.value.actual) == (1, 2)
    assert save(store, b, b.version, lease=("worker-b", b.lease.lease_id)).version == 3
    assert store.peek(s.id).lease == b.lease


def test_a_reused_worker_id_with_an_old_lease_id_is_refused(store: AgentTurnStore) -> None:
    s = snap()
    save(store, s, -1)
    now = store.now()
    first = store.claim(s.id, "w1", now, 1_000)
    assert first is not None and first.lease is not None
    # Given the same worker id claims again after its first lease expired
    second = store.claim(s.id, "w1", now + 5, 1_000)
    assert second is not None and second.lease is not None
    old, new = first.lease.lease_id, second.lease.lease_id
    # Then the old lease id can neither renew nor release
    assert store.renew_lease(s.id, "w1", old, now + 5, now + 60) is False
    assert store.release_lease(s.id, "w1", old) is False
    assert store.peek(s.id).lease == second.lease
    assert store.renew_lease(s.id, "w1", new, now + 5, now + 60) is True


def test_renew_and_release_need_owner_and_lease_id_and_change_no_version(
    store: AgentTurnStore,
) -> None:
    s = snap()
    save(store, s, -1)
    now = store.now()
    held = store.claim(s.id, "w1", now, 1_000)
    assert held is not None and held.lease is not None
    lease_id = held.lease.lease_id
    assert store.renew_lease(s.id, "w2", lease_id, now, now + 60) is False
    assert store.renew_lease(s.id, "w1", "other", now, now + 60) is False
    assert store.renew_lease(s.id, "w1", lease_id, now + 2, now + 60) is False  # expired
    assert store.renew_lease(s.id, "w1", lease_id, now, now + 60) is True
    lease = store.peek(s.id).lease
    assert lease is not None and lease.until == now + 60
    assert store.claim(s.id, "w2", now + 30, 1_000) is None  # the renewal holds
    assert store.release_lease(s.id, "w2", lease_id) is False
    assert store.release_lease(s.id, "w1", lease_id) is True
    assert store.release_lease(s.id, "w1", lease_id) is False
    control = store.peek(s.id)
    assert control.lease is None and control.version == 1
    assert store.claim(s.id, "w2", now, 1_000) is not None


def test_a_save_keeps_the_stored_lease(store: AgentTurnStore) -> None:
    s = snap()
    save(store, s, -1)
    held = store.claim(s.id, "w1", store.now(), LEASE_MS)
    assert held is not None and held.lease is not None
    mine = ("w1", held.lease.lease_id)
    held.lease = None  # a caller cannot drop or forge the lease through a save
    held.status = S.RUNNING
    save(store, held, 1, lease=mine)
    assert store.load(s.id).lease is not None
    assert store.peek(s.id).lease is not None


def test_claimable_states(store: AgentTurnStore) -> None:
    now = store.now()
    ready, running, waiting = snap(), snap(status=S.RUNNING), snap(status=S.WAITING_FOR_USER)
    for s in (ready, running, waiting):
        save(store, s, -1)
    assert store.claim(waiting.id, "w", now, 1_000) is None
    assert store.claim(ready.id, "w", now, 1_000) is not None
    assert store.claim(running.id, "w", now, 1_000) is not None
    # a RUNNING turn whose worker died is claimable once its lease expired
    assert store.claim(running.id, "w2", now + 0.5, 1_000) is None
    assert store.claim(running.id, "w2", now + 1.5, 1_000) is not None
    # a blocked turn with cancellation requested is claimable (to finish it)
    store.request_cancellation(waiting.id)
    assert store.claim(waiting.id, "w", now, 1_000) is not None


def test_due_retries_are_claimable_only_when_due(store: AgentTurnStore) -> None:
    now = store.now()
    s = snap(status=S.RETRY_SCHEDULED, next_runnable_at=now + 10)
    save(store, s, -1)
    assert store.claim(s.id, "w", now, 1_000) is None
    assert store.claim_runnable("w", now, 1_000, 10) == []
    [claimed] = store.claim_runnable("w", now + 11, 1_000, 10)
    assert claimed.id == s.id


def test_a_cancelled_terminal_turn_is_never_reclaimed(store: AgentTurnStore) -> None:
    s = snap()
    save(store, s, -1)
    store.request_cancellation(s.id, "stop")
    held = store.claim(s.id, "w", store.now(), 1_000)
    assert held is not None
    held.status = S.CANCELLED
    assert held.lease is not None
    save(store, held, held.version, lease=("w", held.lease.lease_id))
    store.release_lease(s.id, "w", held.lease.lease_id)
    later = store.now() + 3600
    assert store.claim(s.id, "w", later, 1_000) is None
    assert store.claim_runnable("w", later, 1_000, 10) == []


def test_a_child_is_not_claimable_while_its_parent_holds_a_live_lease(
    store: AgentTurnStore,
) -> None:
    parent = snap()
    save(store, parent, -1)
    now = store.now()
    held = store.claim(parent.id, "w1", now, 10_000)
    assert held is not None and held.lease is not None
    kid = child_of(parent)
    waiting_for(held, kid)
    store.commit(Commit(held, held.version, "r1", ("w1", held.lease.lease_id), children=(kid,)))

    assert store.claim(kid.id, "w2", now, 1_000) is None
    assert store.claim_runnable("w2", now, 1_000, 10) == []
    assert store.claim(kid.id, "w2", now + 11, 1_000) is not None  # parent lease expired
    store.release_lease(kid.id, "w2", store.peek(kid.id).lease.lease_id)  # type: ignore[union-attr]
    store.release_lease(parent.id, "w1", held.lease.lease_id)
    assert store.claim(kid.id, "w2", now, 1_000) is not None


def test_claim_runnable_takes_ready_turns_up_to_the_limit(store: AgentTurnStore) -> None:
    now = store.now()
    ready = [snap() for _ in range(5)]
    for s in ready:
        save(store, s, -1)
    save(store, snap(status=S.WAITING_FOR_APPROVAL), -1)
    save(store, snap(status=S.COMPLETED), -1)
    first = store.claim_runnable("w", now, 1_000, 3)
    rest = store.claim_runnable("w", now, 1_000, 10)
    assert len(first) == 3 and len(rest) == 2
    assert {s.id for s in first + rest} == {s.id for s in ready}
    assert all(s.lease is not None and s.lease.owner == "w" for s in first + rest)
    assert store.claim_runnable("w", now, 1_000, 10) == []
    # leases expired: everything is claimable again
    assert len(store.claim_runnable("w2", now + 2, 1_000, 10)) == 5
