"""A commit's reply is the next step's reading: the lease it leaves, kept or renewed.

A worker's chain keeps its lease through the commit (no claim between steps), a commit
refuses a model's answer over a cancel request its writer has not seen, and a lease that
expired is never renewed by a commit (fencing by lease identity still holds).
"""

from __future__ import annotations

import time
import uuid

import pytest

from runner_core import (
    AgentTurnStatus,
    AgentTurnStore,
    Commit,
    ConcurrentModificationError,
    LeaseLostError,
)
from runner_core.errors import CancelRequestedError
from runner_core.store import LeaseRef, SaveResult
from tests.support.commits import save
from tests.support.stores import snap

S = AgentTurnStatus


def _claimed(store: AgentTurnStore, lease_ms: int = 30_000) -> tuple[str, LeaseRef]:
    turn = snap()
    save(store, turn, -1)
    claimed = store.claim(turn.id, "w1", store.now(), lease_ms)
    assert claimed is not None and claimed.lease is not None
    return turn.id, (claimed.lease.owner, claimed.lease.lease_id)


def _commit(
    store: AgentTurnStore,
    turn_id: str,
    lease: LeaseRef | None,
    *,
    status: AgentTurnStatus = S.RUNNING,
    release: bool = False,
    renew: float | None = None,
    unless_cancelled: bool = False,
) -> SaveResult:
    current = store.load(turn_id)
    current.status = status
    commit = Commit(
        current,
        current.version,
        uuid.uuid4().hex,
        lease,
        release,
        renew_seconds=renew,
        unless_cancelled=unless_cancelled,
    )
    return store.commit(commit)


def test_the_reply_names_the_lease_the_commit_leaves(store: AgentTurnStore) -> None:
    turn_id, lease = _claimed(store)
    stored = store.peek(turn_id).lease
    assert stored is not None

    result = _commit(store, turn_id, lease)

    assert result.lease_released is False
    assert result.lease_until == pytest.approx(stored.until, abs=1e-5)
    assert save(store, snap(), -1).lease_until is None  # a writer without a lease


def test_a_renewing_commit_extends_a_live_lease_from_the_store_clock(
    store: AgentTurnStore,
) -> None:
    turn_id, lease = _claimed(store, lease_ms=5_000)
    before = store.now()

    result = _commit(store, turn_id, lease, renew=60.0)

    stored = store.peek(turn_id).lease
    assert stored is not None and (stored.owner, stored.lease_id) == lease
    assert stored.until >= before + 59.0
    assert result.lease_until == pytest.approx(stored.until, abs=1e-5)
    assert store.claim(turn_id, "w2", store.now(), 30_000) is None  # still leased


def test_a_chained_last_commit_keeps_the_lease_while_the_turn_runs_at_once(
    store: AgentTurnStore,
) -> None:
    turn_id, lease = _claimed(store)

    kept = _commit(store, turn_id, lease, release=True, renew=30.0)

    assert kept.lease_released is False and kept.lease_until is not None
    # the next step writes under the same lease, with no claim in between
    blocked = _commit(store, turn_id, lease, status=S.WAITING_FOR_USER, release=True, renew=30.0)
    assert blocked.lease_released is True and blocked.lease_until is None
    assert store.peek(turn_id).lease is None


def test_a_commit_never_brings_an_expired_lease_back(store: AgentTurnStore) -> None:
    turn_id, lease = _claimed(store, lease_ms=50)
    time.sleep(0.1)

    result = _commit(store, turn_id, lease, renew=30.0)

    control = store.peek(turn_id)
    assert control.live_lease is None  # still expired: the sweeper may hand it on
    assert result.lease_until is not None and result.lease_until <= control.now
    claimed = store.claim(turn_id, "w2", store.now(), 30_000)
    assert claimed is not None
    with pytest.raises(LeaseLostError):  # and the old holder is fenced by the new claim
        _commit(store, turn_id, lease, renew=30.0)


def test_an_answer_over_an_unseen_cancel_is_refused_and_nothing_written(
    store: AgentTurnStore,
) -> None:
    turn_id, lease = _claimed(store)
    stale = store.load(turn_id)  # the writer's reading, from before the cancel
    assert store.request_cancellation(turn_id, "stop")
    version = store.peek(turn_id).version
    stale.status = S.RUNNING

    with pytest.raises(CancelRequestedError):
        store.commit(Commit(stale, version, uuid.uuid4().hex, lease, False, unless_cancelled=True))

    assert store.peek(turn_id).version == version
    # a writer that has seen the cancel (its snapshot carries the flag) writes as before
    current = store.load(turn_id)
    current.status = S.CANCELLED
    done = store.commit(
        Commit(current, version, uuid.uuid4().hex, lease, True, unless_cancelled=True)
    )
    assert done.version == version + 1 and done.cancel_requested


def test_unless_cancelled_writes_when_no_cancel_was_asked(store: AgentTurnStore) -> None:
    turn_id, lease = _claimed(store)
    result = _commit(store, turn_id, lease, unless_cancelled=True)
    assert result.cancel_requested is False


def test_a_refused_commit_renews_no_lease(store: AgentTurnStore) -> None:
    # Given a claimed turn with a short lease, and a child id another writer already created
    turn_id, lease = _claimed(store, lease_ms=5_000)
    taken = snap(parent_turn_id=turn_id, root_turn_id=turn_id)
    save(store, taken, -1)
    before = store.peek(turn_id)
    assert before.lease is not None

    # When the holder commits, renewing, with a new child under that id
    current = store.load(turn_id)
    current.status = S.RUNNING
    child = snap(taken.id, parent_turn_id=turn_id, root_turn_id=turn_id)
    commit = Commit(
        current, current.version, uuid.uuid4().hex, lease, children=(child,), renew_seconds=60.0
    )
    with pytest.raises(ConcurrentModificationError):
        store.commit(commit)

    # Then the refusal wrote nothing: not the turn, and not a renewed lease either
    after = store.peek(turn_id)
    assert after.version == before.version
    assert after.lease is not None and after.lease.until == pytest.approx(
        before.lease.until, abs=1e-3
    )
