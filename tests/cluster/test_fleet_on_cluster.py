"""A fleet on a Redis Cluster: two workers and beat, the broker a separate Redis.

kombu's Redis transport does not speak Cluster, so the broker is a standalone Redis (or
RabbitMQ); the turns, events and chat memories live in the cluster.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner_core import AgentTurnStatus
from tests.support.cluster import LocalCluster
from tests.support.fleet_agents import PREFIX
from tests.support.fleet_fixtures import RETRYING, drive, producer
from tests.support.servers import Fleet, RedisServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster_env(
    redis_cluster: LocalCluster, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    env = {
        "AGENTWORKER_REDIS_URL": redis_cluster.url,
        "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{redis_server.port}/1",
        "AGENTWORKER_NAMESPACE": "cl-" + uuid.uuid4().hex[:8],
        "AGENTWORKER_AGENT_LOADER": "tests.support.fleet_agents:loader",
        "AGENTWORKER_LEASE_SECONDS": "2",
        "AGENTWORKER_SWEEP_INTERVAL": "0.5",
        "AGENTWORKER_LOST_WAKEUP_SECONDS": "2",
        "AGENTWORKER_STEP_TIME_LIMIT": "30",
        "AGENTWORKER_VISIBILITY_TIMEOUT": "60",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def fleet(
    cluster_env: dict[str, str], tmp_path: Path, redis_cluster: LocalCluster
) -> Iterator[Fleet]:
    redis_cluster.flush()
    f = Fleet(cluster_env, tmp_path / "logs")
    try:
        yield f
    finally:
        f.stop()


def executions(cluster: LocalCluster) -> dict[str, int]:
    """Idempotency key -> runs of a recorded tool, from every master."""
    runs: dict[str, int] = {}
    for port in cluster.ports:
        node = cluster.node(port)
        for key in node.keys(PREFIX + "exec:*"):
            runs[key.decode()[len(PREFIX) + 5 :]] = int(node.get(key) or 0)
    return runs


def test_fifty_mixed_turns_on_a_cluster(fleet: Fleet, redis_cluster: LocalCluster) -> None:
    # Given two workers and beat on the cluster
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()
    kinds = ["e2e-tools"] * 15 + ["e2e-approval"] * 10 + ["e2e-form"] * 8 + ["e2e-flaky"] * 7
    kinds += ["e2e-parent"] * 10

    # When 50 turns are started and the humans answer
    ids = {
        runner.start(kind, f"job {i}", options=RETRYING).id: kind for i, kind in enumerate(kinds)
    }
    final = drive(runner, list(ids), timeout=120)

    # Then every turn completed, children included, and no side effect ran twice
    statuses = Counter(s.status for s in final.values())
    assert statuses == {AgentTurnStatus.COMPLETED: 50}, statuses
    parents = [t for t, kind in ids.items() if kind == "e2e-parent"]
    assert all(len(runner.store.children_of(t)) == 3 for t in parents)
    runs = executions(redis_cluster)
    assert len(runs) == 15 * 2 + 10 + 8 + 10 * 3
    assert set(runs.values()) == {1}
    # and the trees spread over the masters
    per_master = [redis_cluster.node(p).dbsize() for p in redis_cluster.ports]
    print(f"keys per master after 50 turns: {per_master}")
    assert all(per_master)


def test_beat_runs_housekeeping_and_ended_turns_go_after_the_retention(
    fleet: Fleet, cluster_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a fleet whose beat sends housekeeping every half second, retention 2 s
    for key, value in (
        ("AGENTWORKER_HOUSEKEEPING_INTERVAL", "0.5"),
        ("AGENTWORKER_RETENTION_SECONDS", "2"),
    ):
        fleet.env[key] = value
        monkeypatch.setenv(key, value)
    fleet.start_worker("w1")
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()

    # When ten turns run to their end
    ids = [runner.start("e2e-tools", f"job {i}").id for i in range(10)]
    ended: set[str] = set()
    deadline = time.monotonic() + 60
    while len(ended) < len(ids) and time.monotonic() < deadline:
        ended |= {t.turn_id for t in runner.store.list_turns(status=AgentTurnStatus.COMPLETED)}
        time.sleep(0.05)
    assert ended == set(ids)

    # Then housekeeping deletes them once the retention has passed
    while runner.store.list_turns() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert runner.store.list_turns() == []
    assert "agentworker.housekeeping" in (fleet.logs / "w1.log").read_text()
