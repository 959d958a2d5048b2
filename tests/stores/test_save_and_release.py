"""A worker's last save of a step gives its lease back in the same atomic write."""

from __future__ import annotations

import pytest

from runner_core import AgentTurnStatus, AgentTurnStore, LeaseLostError
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap, waiting_for

S = AgentTurnStatus


def _claimed(store: AgentTurnStore) -> tuple[str, str, str]:
    turn = snap()
    save(store, turn, -1)
    claimed = store.claim(turn.id, "w1", store.now(), 30_000)
    assert claimed is not None and claimed.lease is not None
    return turn.id, claimed.lease.owner, claimed.lease.lease_id


def test_a_save_can_release_the_lease_atomically(store: AgentTurnStore) -> None:
    turn_id, owner, lease_id = _claimed(store)
    current = store.load(turn_id)
    current.status = S.RUNNING

    result = save(store, current, current.version, release=(owner, lease_id))

    assert result.lease_released is True and result.version == current.version + 1
    assert store.peek(turn_id).lease is None
    assert store.release_lease(turn_id, owner, lease_id) is False  # nothing left to give back
    again = store.claim(turn_id, "w2", store.now(), 30_000)  # RUNNING, lease free: claimable
    assert again is not None and again.lease is not None and again.lease.owner == "w2"


def test_a_save_without_release_keeps_the_lease(store: AgentTurnStore) -> None:
    turn_id, owner, lease_id = _claimed(store)
    current = store.load(turn_id)
    result = save(store, current, current.version, lease=(owner, lease_id))
    assert result.lease_released is False
    lease = store.peek(turn_id).lease
    assert lease is not None and (lease.owner, lease.lease_id) == (owner, lease_id)


def test_a_wrong_lease_id_releases_nothing(store: AgentTurnStore) -> None:
    turn_id, owner, lease_id = _claimed(store)
    current = store.load(turn_id)
    with pytest.raises(LeaseLostError):
        save(store, current, current.version, release=(owner, "not-the-lease"))
    lease = store.peek(turn_id).lease
    assert lease is not None and lease.lease_id == lease_id
    assert store.peek(turn_id).version == current.version  # and nothing was written


def test_a_terminal_save_with_release_is_never_claimable_again(store: AgentTurnStore) -> None:
    turn_id, owner, lease_id = _claimed(store)
    current = store.load(turn_id)
    current.status = S.COMPLETED
    assert save(store, current, current.version, release=(owner, lease_id)).lease_released
    assert store.claim(turn_id, "w2", store.now(), 30_000) is None
    assert store.claim_runnable("w2", store.now(), 30_000, 10) == []


def test_a_tree_save_can_release_the_parents_lease(store: AgentTurnStore) -> None:
    turn_id, owner, lease_id = _claimed(store)
    parent = store.load(turn_id)
    kids = [child_of(parent), child_of(parent)]
    waiting_for(parent, *kids)

    result = save_tree(store, parent, parent.version, kids, release=(owner, lease_id))

    assert result.lease_released is True
    assert store.peek(turn_id).lease is None
    # the children are claimable at once: their parent holds no lease any more
    claimed = store.claim_runnable("w2", store.now(), 30_000, 10)
    assert sorted(c.id for c in claimed) == sorted(k.id for k in kids)
