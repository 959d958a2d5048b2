"""Housekeeping on a schedule keeps a sweep's cost flat; it migrates the old layout.

On the single server and on the cluster. A sweep here is the sweeper's worst case: the
due-index backfill and the repair scan (each walks every tag that may hold live turns)
run in it, as they do every 10 minutes per process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agentworker.fleet.app import celery_config
from agentworker.fleet.housekeeping import housekeep
from agentworker.fleet.stepping import sweep_once
from agentworker.settings import Settings
from runner_core import AgentRunner, AgentTurnStatus, InMemoryAgentLoader, TurnNotFoundError
from stores import RedisAgentTurnStore
from tests.support.cluster import LocalCluster
from tests.support.commits import save
from tests.support.servers import RedisServer
from tests.support.stores import child_of, commands_served, snap

ENDED = 2000


@pytest.fixture(params=["redis", "cluster"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        return cluster.url
    server: RedisServer = request.getfixturevalue("redis_server")
    server.client().flushdb()
    return server.url


@pytest.fixture
def store(url: str, namespace: str) -> Iterator[RedisAgentTurnStore]:
    s = RedisAgentTurnStore(url, namespace=namespace)
    yield s
    s.close()


def end_turns(store: RedisAgentTurnStore, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        s = snap()
        save(store, s, -1)
        s.status = AgentTurnStatus.COMPLETED
        save(store, s, 0)
        ids.append(s.id)
    return ids


def sweep_commands(store: RedisAgentTurnStore) -> int:
    """Commands Redis ran for one sweep with its backfill and repair scan."""
    runner = AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader(), dispatcher=print)
    store.sweeper.backfilled_at = -1e18
    before = sum(commands_served(store.redis).values())
    sweep_once(runner, lost_after=10.0, repair=True)
    return sum(commands_served(store.redis).values()) - before


def test_a_sweeps_cost_stays_flat_once_ended_turns_are_pruned(
    store: RedisAgentTurnStore,
) -> None:
    # Given a few ended turns, then 2,000
    end_turns(store, 20)
    few = sweep_commands(store)
    end_turns(store, ENDED - 20)
    many = sweep_commands(store)

    # When housekeeping runs (turns kept: retention a week; their tags have nothing live)
    report = housekeep(store, retention_seconds=7 * 24 * 3600, grace_seconds=0)
    pruned = sweep_commands(store)

    # Then the sweep costs what it cost with 20 ended turns, the turns are still there
    print(f"commands per sweep: 20 ended {few}, {ENDED} ended {many}, after pruning {pruned}")
    assert many > few + ENDED  # before: the sweep walks every tree that ever ran
    assert report.pruned == ENDED and report.expired == 0
    assert pruned <= few, (few, many, pruned)
    assert len(store.list_turns(limit=ENDED + 1)) == ENDED

    # and once retention has passed, the turns and every index entry go
    report = housekeep(store, retention_seconds=1e-6, grace_seconds=0)
    assert report.expired == ENDED and report.pruned == ENDED  # the retained entries
    assert store.list_turns() == []
    assert sweep_commands(store) <= few


def test_two_housekeepers_at_once_delete_each_turn_once(url: str, namespace: str) -> None:
    stores = [RedisAgentTurnStore(url, namespace=namespace) for _ in range(2)]
    ids = end_turns(stores[0], 300)
    reports = []

    def run(s: RedisAgentTurnStore) -> None:
        reports.append(housekeep(s, retention_seconds=1e-6, grace_seconds=0, batch=50))

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(reports) == 2
    assert sum(r.expired for r in reports) == len(ids)
    assert sum(r.pruned for r in reports) == 2 * len(ids)  # partitions and retained
    assert stores[1].list_turns() == []
    keys = stores[0].keys
    assert stores[0].redis.exists(*keys.all_partitions(), *keys.all_retained()) == 0
    for s in stores:
        s.close()


def test_turns_indexed_by_the_single_keys_of_earlier_releases_are_found_and_migrated(
    store: RedisAgentTurnStore,
) -> None:
    # Given turns whose tags sit in the single partition sets (the layout before buckets)
    live = [snap() for _ in range(30)]
    for s in live:
        save(store, s, -1)
    k = store.keys
    for tag in [store.tag_of(s.id) for s in live]:
        for bucket, legacy in ((k.partitions(tag), k.legacy_partitions),
                               (k.retained(tag), k.legacy_retained)):  # fmt: skip
            score = store.redis.zscore(bucket, tag)
            store.redis.zrem(bucket, tag)
            store.redis.zadd(legacy, {tag: float(score or 0)})

    # Then the store still finds them
    assert {t.turn_id for t in store.list_turns(limit=100)} == {s.id for s in live}
    assert len(store.scanner.partition_tags()) == 30

    # When housekeeping migrates them, they are in their buckets and the old keys are gone
    assert housekeep(store, retention_seconds=0).migrated == 60
    assert store.redis.exists(k.legacy_partitions, k.legacy_retained) == 0
    assert {t.turn_id for t in store.list_turns(limit=100)} == {s.id for s in live}
    assert housekeep(store, retention_seconds=0).migrated == 0


def test_beat_sends_housekeeping_to_the_sweep_queue_and_drops_a_late_one() -> None:
    settings = Settings(housekeeping_interval=120)
    config = celery_config(settings)
    entry = config["beat_schedule"]["agentworker-housekeeping"]
    assert entry["task"] == "agentworker.housekeeping" and entry["schedule"] == 120
    assert entry["options"] == {"queue": settings.sweep_queue, "expires": 120}
    assert config["task_routes"]["agentworker.housekeeping"] == {"queue": settings.sweep_queue}


def test_turns_refused_at_the_front_never_stall_retention(store: RedisAgentTurnStore) -> None:
    # Given the oldest ended turns are parents whose children still run (refused: a live
    # child), more of them than one batch, and after them turns that may go
    held_back = []
    for _ in range(5):
        root = snap(status=AgentTurnStatus.RUNNING)
        save(store, root, -1)
        save(store, child_of(root), -1)
        root.status = AgentTurnStatus.FAILED
        save(store, root, 0)
        held_back.append(root.id)
    free = end_turns(store, 5)
    time.sleep(0.01)

    # When housekeeping runs in batches smaller than what is refused
    report = housekeep(store, retention_seconds=0.001, batch=3)

    # Then every turn that may go went, and the refused ones stayed
    assert report.expired == 5
    for turn_id in free:
        with pytest.raises(TurnNotFoundError):
            store.load(turn_id)
    assert all(store.load(t).status is AgentTurnStatus.FAILED for t in held_back)
