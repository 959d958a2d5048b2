"""Script calls grouped per master survive a stale slot map and empty script caches."""

from __future__ import annotations

import time
from pathlib import Path

from stores import RedisAgentTurnStore
from tests.support.cluster import LocalCluster
from tests.support.commits import save
from tests.support.stores import snap


def node_id(cluster: LocalCluster, port: int) -> str:
    return str(cluster.node(port).execute_command("CLUSTER", "MYID").decode())  # type: ignore[no-untyped-call]


def test_a_slot_moved_after_the_map_was_read_is_followed(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path).start()
    try:
        stale = RedisAgentTurnStore(cluster.url, namespace="mv")  # reads the slot map now
        moved, stays = snap(), snap()
        key = stale.keys.header(stale.keys.root_tag(moved.id, None), moved.id)
        slot = stale.redis.keyslot(key)  # type: ignore[attr-defined]
        source = stale.redis.get_node_from_key(key).port  # type: ignore[attr-defined]
        target = next(p for p in cluster.ports if p != source)

        # Given the (empty) slot of one turn's tree moved to another master
        target_id = node_id(cluster, target)
        for port in [target, source, *cluster.ports]:
            cluster.node(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)  # type: ignore[no-untyped-call]
        fresh = RedisAgentTurnStore(cluster.url, namespace="mv")
        for s in (moved, stays):
            save(fresh, s, -1)
        assert cluster.node(target).exists(key) == 1

        # When the store with the old map marks both turns in one grouped call
        stale.unmark_queued(stays.id)
        stale.mark_queued([moved.id, stays.id])

        # Then the call its old master turned away (MOVED) was sent again and applied
        for s in (moved, stays):
            tag = fresh.tag_of(s.id)
            assert fresh.redis.hget(fresh.keys.header(tag, s.id), "q"), s.id
        stale.close()
        fresh.close()
    finally:
        cluster.stop()


def test_grouped_calls_reload_scripts_a_master_lost(redis_cluster: LocalCluster) -> None:
    store = RedisAgentTurnStore(redis_cluster.url, namespace=f"ns{time.time_ns()}")
    turns = [snap() for _ in range(12)]
    for s in turns:
        save(store, s, -1)
    for port in redis_cluster.ports:  # as after a restart or a failover to a replica
        redis_cluster.node(port).script_flush()
    store.mark_queued([s.id for s in turns])
    assert all(store.redis.hget(store.keys.header(store.tag_of(s.id), s.id), "q") for s in turns)
    store.close()
