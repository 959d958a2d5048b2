"""The Redis store's scans for the sweeper and operators, and retention."""

from __future__ import annotations

import pytest

from runner_core import AgentTurnStatus, TurnNotFoundError
from stores import RedisAgentTurnStore
from stores.redis import scanner
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap, waiting_for

pytestmark = pytest.mark.redis
S = AgentTurnStatus


def test_due_turn_ids_are_the_retries_whose_time_has_come(
    redis_store: RedisAgentTurnStore,
) -> None:
    now = redis_store.now()
    soon = snap(status=S.RETRY_SCHEDULED, next_runnable_at=now + 10)
    later = snap(status=S.RETRY_SCHEDULED, next_runnable_at=now + 20)
    for s in (soon, later, snap(), snap(status=S.WAITING_FOR_USER)):
        save(redis_store, s, -1)
    assert redis_store.due_turn_ids(now) == []
    assert redis_store.due_turn_ids(now + 15) == [soon.id]
    assert redis_store.due_turn_ids(now + 25) == [soon.id, later.id]
    assert redis_store.due_turn_ids(now + 25, limit=1) == [soon.id]


def test_stale_turn_ids_are_lost_wake_ups_and_expired_leases(
    redis_store: RedisAgentTurnStore,
) -> None:
    now = redis_store.now()
    ready, leased, blocked = snap(), snap(), snap(status=S.WAITING_FOR_APPROVAL)
    for s in (ready, leased, blocked):
        save(redis_store, s, -1)
    held = redis_store.claim(leased.id, "w", now, 5_000)
    assert held is not None
    assert redis_store.stale_turn_ids(now, 30) == []  # fresh: their wake-up may be in flight
    assert redis_store.stale_turn_ids(now + 31, 30) == [ready.id]  # the lease is still live
    assert redis_store.stale_turn_ids(now + 36, 30) == [ready.id, leased.id]  # it expired


def test_list_turns_by_status_and_by_tree(redis_store: RedisAgentTurnStore) -> None:
    root = snap()
    save(redis_store, root, -1)
    kids = [child_of(root) for _ in range(2)]
    waiting_for(root, *kids)
    save_tree(redis_store, root, 0, kids)
    done = snap(status=S.COMPLETED)
    save(redis_store, done, -1)

    tree = redis_store.list_turns(root_turn_id=root.id)
    assert {t.turn_id for t in tree} == {root.id, *(k.id for k in kids)}
    assert {t.turn_id for t in redis_store.list_turns(S.READY)} == {k.id for k in kids}
    [waiting] = redis_store.list_turns(S.WAITING_FOR_CHILD)
    assert (waiting.turn_id, waiting.version, waiting.parent_turn_id) == (root.id, 1, None)
    assert [t.turn_id for t in redis_store.list_turns(S.COMPLETED)] == [done.id]
    assert len(redis_store.list_turns()) == 4
    assert len(redis_store.list_turns(limit=2)) == 2
    assert redis_store.list_turns(root_turn_id="unknown") == []


def test_listing_is_newest_first_across_more_trees_than_one_scan_batch(
    redis_store: RedisAgentTurnStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanner, "CLOCK_SLACK", 0.0)  # one process, one clock: no slack needed
    # Given more trees than one scan batch, created one after another, and then a child in
    # the oldest tree: the newest turn of all
    roots = []
    for _ in range(450):
        root = snap()
        save(redis_store, root, -1)
        roots.append(root)
    oldest = roots[0]
    kid = child_of(oldest)
    waiting_for(oldest, kid)
    save_tree(redis_store, oldest, 0, [kid])

    # When the newest 20 are listed, all of them or by status
    newest = [kid.id] + [r.id for r in reversed(roots)][:19]
    assert [t.turn_id for t in redis_store.list_turns(limit=20)] == newest
    assert [t.turn_id for t in redis_store.list_turns(S.READY, limit=5)] == newest[:5]
    [waiting] = redis_store.list_turns(S.WAITING_FOR_CHILD, limit=5)
    assert waiting.turn_id == oldest.id


def test_retention_never_expires_what_a_waiting_parent_references(
    redis_store: RedisAgentTurnStore,
) -> None:
    root = snap()
    save(redis_store, root, -1)
    a, b = child_of(root), child_of(root)
    waiting_for(root, a, b)
    save_tree(redis_store, root, 0, [a, b])
    a.status = S.COMPLETED
    save(redis_store, a, 0)
    old = snap(status=S.COMPLETED)
    save(redis_store, old, -1)

    # Given everything ended "long ago" (a cutoff a second ahead: the script stamps the end
    # with its node's TIME, the store's clock is an estimate that may lag it by a fraction
    # of a millisecond): the free-standing turn and the child whose result already sits in
    # its parent go; nothing the parent waits on does
    assert redis_store.expire_terminal(older_than_seconds=-1) == 2
    with pytest.raises(TurnNotFoundError):
        redis_store.load(old.id)
    assert redis_store.redis.exists(redis_store.keys.turn_index(old.id)) == 0
    assert a.id in redis_store.load(root.id).child_results
    assert redis_store.load(b.id).status is S.READY  # its parent still waits on it

    # When the parent has heard of both children and ended, the whole tree can go
    b.status = S.FAILED
    save(redis_store, b, 0)
    root.version, root.status, root.suspension = 1, S.COMPLETED, None
    save(redis_store, root, 1)
    assert redis_store.expire_terminal(older_than_seconds=-1) == 2
    assert redis_store.list_turns() == []
    assert redis_store.expire_terminal(older_than_seconds=3600) == 0

    # and the empty partitions are pruned
    assert redis_store.prune_partitions(grace_seconds=0) == 4
    keys = redis_store.keys
    assert redis_store.redis.exists(*keys.all_partitions(), *keys.all_retained()) == 0
    assert sorted(redis_store.redis.keys(f"{keys.namespace}:*")) == []


def test_retention_keeps_recent_turns_and_a_parent_with_a_live_child(
    redis_store: RedisAgentTurnStore,
) -> None:
    root = snap(status=S.RUNNING)
    save(redis_store, root, -1)
    kid = child_of(root)
    save(redis_store, kid, -1)
    root.status = S.FAILED
    save(redis_store, root, 0)
    assert redis_store.expire_terminal(older_than_seconds=0) == 0  # kid is live
    assert redis_store.expire_terminal() == 0  # default retention: a week
    assert redis_store.children_of(root.id) == [kid.id]


def test_a_candidate_another_run_deleted_first_is_not_counted_as_refused(
    redis_store: RedisAgentTurnStore,
) -> None:
    # Given one tree's ended turns, read as candidates by one housekeeping run
    root = snap(status=S.COMPLETED)
    save(redis_store, root, -1)
    children = [child_of(root, status=S.COMPLETED) for _ in range(6)]
    save_tree(redis_store, root, 0, children)
    cutoff = redis_store.now() + 1
    candidates = redis_store.scanner.expirable(cutoff, limit=4)
    assert len(candidates) == 4
    # When another run deletes them before the first one gets to them
    other = RedisAgentTurnStore(redis_store.url, namespace=redis_store.keys.namespace)
    assert other.expire_terminal(older_than_seconds=-1, limit=4) == 4
    done, refused = redis_store.scanner.expire(candidates)
    # Then they are neither deleted nor refused by the first run: a later batch of it
    # must not step over the tree's next candidates on their account
    assert done == [] and refused == set()
    skip: dict[str, int] = {}
    assert redis_store.expire_terminal(older_than_seconds=-1, limit=10, skip=skip) == 3
    assert skip == {}
    other.close()
