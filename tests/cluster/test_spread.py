"""No hot single key: the global writes of root creations spread over the masters."""

from __future__ import annotations

from stores import RedisAgentTurnStore
from tests.support.cluster import LocalCluster
from tests.support.commits import save
from tests.support.stores import commands_served, snap


def test_root_creations_spread_their_global_writes_over_the_masters(
    redis_cluster: LocalCluster, namespace: str
) -> None:
    store = RedisAgentTurnStore(redis_cluster.url, namespace=namespace)
    before = commands_served(store.redis)

    # Given 600 root turns, each in its own tree (its own tag)
    for _ in range(600):
        save(store, snap(), -1)

    # Then the partition buckets they were added to live on every master, none with most
    entries: dict[int, int] = {}
    for port in redis_cluster.ports:
        node = redis_cluster.node(port)
        keys = node.keys(f"{namespace}:partitions:*") + node.keys(f"{namespace}:retained:*")
        entries[port] = sum(int(node.zcard(k)) for k in keys)
    print(f"partition-set entries per master: {entries}")
    assert sum(entries.values()) == 2 * 600
    assert all(entries.values()), entries
    assert max(entries.values()) < 0.6 * 2 * 600, entries
    # and no single key of the old layout was written
    assert store.redis.exists(store.keys.legacy_partitions, store.keys.legacy_retained) == 0

    # and every master served a share of the creations' commands
    after = commands_served(store.redis)
    served = {node: after[node] - before[node] for node in after}
    print(f"commands per master for 600 creations: {served}")
    assert min(served.values()) > 0.15 * sum(served.values()), served
    assert store.list_turns(limit=1000).__len__() == 600
    store.close()
