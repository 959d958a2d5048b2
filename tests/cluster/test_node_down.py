"""A master goes away: its trees fail fast with a typed error, the others go on."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from runner_core import StoreUnavailableError
from stores import RedisAgentTurnStore
from tests.support.cluster import LocalCluster
from tests.support.commits import save
from tests.support.stores import snap


def master_of(store: RedisAgentTurnStore, turn_id: str) -> int:
    key = store.keys.header(store.tag_of(turn_id), turn_id)
    return int(store.redis.get_node_from_key(key).port)  # type: ignore[attr-defined]


def test_trees_on_the_other_masters_go_on_when_one_master_is_killed(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path).start()
    try:
        store = RedisAgentTurnStore(cluster.url, namespace="down")
        turns = [snap() for _ in range(30)]
        for s in turns:
            save(store, s, -1)
        dead = cluster.ports[0]
        on_dead = {s.id for s in turns if master_of(store, s.id) == dead}

        # When that master is killed (no replica to take over)
        cluster.processes[0].kill()
        cluster.processes[0].wait()

        # Then loads of its trees raise StoreUnavailableError at once; the others load
        outcomes: Counter[str] = Counter()
        started = time.monotonic()
        for s in turns:
            try:
                store.load(s.id)
                outcomes["loaded" if s.id not in on_dead else "loaded from a dead master"] += 1
            except StoreUnavailableError:
                outcomes["unavailable" if s.id in on_dead else "lost a live one"] += 1
        assert outcomes == {"loaded": 30 - len(on_dead), "unavailable": len(on_dead)}, outcomes
        assert 0 < len(on_dead) < 30
        assert time.monotonic() - started < 10
        store.close()
    finally:
        cluster.stop()


def test_a_cluster_with_no_node_left_names_its_url_redacted(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path).start()
    cluster.stop()
    url = cluster.url.replace("redis+cluster://", "redis+cluster://ops:secret@")
    with pytest.raises(StoreUnavailableError, match=r"ops:\*\*\*@127\.0\.0\.1"):
        RedisAgentTurnStore(url)
