"""Workers consume both queues by default; beat keeps at most one sweep waiting.

The scheduler runs against a private redis-server (store and broker), as beat would.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from agentworker.fleet.beat import SWEEP_TASK, SweepScheduler, gate_for, sweep_started
from agentworker.settings import Settings
from agentworker.wiring import create_app
from tests.support.cluster import LocalCluster
from tests.support.servers import RedisServer, free_port

pytestmark = [
    pytest.mark.redis,
    # Each create_app registers the tasks again as shared tasks; harmless here.
]

INTERVAL = 0.1  # the pending mark lives 5 intervals: 0.5 s


@pytest.fixture()
def settings(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Settings:
    server.client().flushall()
    monkeypatch.setenv("AGENTWORKER_REDIS_URL", server.url)
    monkeypatch.setenv("AGENTWORKER_BROKER_URL", f"redis://127.0.0.1:{server.port}/1")
    monkeypatch.setenv("AGENTWORKER_NAMESPACE", "beat-test")
    monkeypatch.setenv("AGENTWORKER_SWEEP_INTERVAL", str(INTERVAL))
    return Settings()


@pytest.fixture()
def scheduler(settings: Settings, tmp_path: Path) -> Iterator[SweepScheduler]:
    app = create_app(settings)
    s = SweepScheduler(app, schedule_filename=str(tmp_path / "schedule"))
    yield s
    s.close()
    app.close()


def sweep_entry(s: SweepScheduler) -> Any:
    return next(e for e in s.schedule.values() if e.task == SWEEP_TASK)


def broker_len(server: RedisServer, queue: str) -> int:
    return int(redis.Redis(port=server.port, db=1).llen(queue))


def consume_one(server: RedisServer, queue: str) -> None:
    """Take the oldest message off the broker's list, as a worker would."""
    assert redis.Redis(port=server.port, db=1).rpop(queue) is not None


def test_a_worker_without_q_consumes_the_step_and_sweep_queues() -> None:
    app = create_app(Settings(step_queue="s.steps", sweep_queue="s.sweeps"))
    # The queues a worker consumes when -Q does not select (celery worker without flags)
    assert set(app.amqp.queues) == {"s.steps", "s.sweeps"}
    for name, queue in app.amqp.queues.items():
        assert queue.routing_key == name and queue.exchange.name == name
    # -Q still selects one of them
    app.amqp.queues.select(["s.sweeps"])
    assert set(app.amqp.queues.consume_from) == {"s.sweeps"}


def test_the_app_uses_the_sweep_scheduler() -> None:
    app = create_app(Settings())
    assert app.conf.beat_scheduler == "agentworker.fleet.beat:SweepScheduler"
    options = app.conf.beat_schedule["agentworker-sweep"]["options"]
    assert "expires" not in options  # a waiting sweep is never dropped unrun


def test_no_sweep_is_sent_while_the_previous_one_has_not_started(
    scheduler: SweepScheduler, settings: Settings, server: RedisServer
) -> None:
    entry = sweep_entry(scheduler)
    queue = settings.sweep_queue
    # Given beat sent a sweep
    scheduler.apply_entry(entry, producer=scheduler.producer)
    assert broker_len(server, queue) == 1
    assert server.client().pttl("beat-test:sweep:pending") > 0
    # When the schedule fires again before it started: nothing new is sent
    for _ in range(5):
        scheduler.apply_entry(entry, producer=scheduler.producer)
    assert broker_len(server, queue) == 1
    # When a worker takes it and the task starts, the next one goes out
    consume_one(server, queue)
    sweep_started(lambda: gate_for(settings))
    scheduler.apply_entry(entry, producer=scheduler.producer)
    assert broker_len(server, queue) == 1


def test_an_expired_mark_sends_again_only_once_the_queue_is_empty(
    scheduler: SweepScheduler, settings: Settings, server: RedisServer
) -> None:
    entry = sweep_entry(scheduler)
    queue = settings.sweep_queue
    scheduler.apply_entry(entry, producer=scheduler.producer)
    # Given the mark expired while the sweep still waits (nobody consumes the queue)
    time.sleep(INTERVAL * 5 + 0.1)
    assert not server.client().exists("beat-test:sweep:pending")
    # Then beat asks the broker and sends nothing (it re-arms the mark instead)
    scheduler.apply_entry(entry, producer=scheduler.producer)
    assert broker_len(server, queue) == 1
    assert server.client().exists("beat-test:sweep:pending")
    # When the message is lost (taken, never started) and the mark expires: sent again
    consume_one(server, queue)
    scheduler.apply_entry(entry, producer=scheduler.producer)
    assert broker_len(server, queue) == 0  # the mark still lives
    time.sleep(INTERVAL * 5 + 0.1)
    scheduler.apply_entry(entry, producer=scheduler.producer)
    assert broker_len(server, queue) == 1


def test_other_entries_are_sent_as_usual(
    scheduler: SweepScheduler, settings: Settings, server: RedisServer
) -> None:
    scheduler.app.conf.beat_schedule = {
        "ping": {"task": "agentworker.ping", "schedule": 60, "options": {"queue": "q.ping"}}
    }
    scheduler.merge_inplace(scheduler.app.conf.beat_schedule)
    ping = scheduler.schedule["ping"]
    for _ in range(3):
        scheduler.apply_entry(ping, producer=scheduler.producer)
    assert broker_len(server, "q.ping") == 3


def test_an_unreachable_store_sends_no_sweep(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: RedisServer
) -> None:
    monkeypatch.setenv("AGENTWORKER_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    app: Celery = create_app(Settings())
    s = SweepScheduler(app, schedule_filename=str(tmp_path / "schedule"))
    try:
        s.apply_entry(sweep_entry(s), producer=s.producer)
        assert broker_len(server, settings.sweep_queue) == 0
    finally:
        s.close()


def test_beat_starts_while_no_cluster_node_answers_and_sweeps_once_the_cluster_is_up(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: RedisServer
) -> None:
    # Given a store URL of a Redis Cluster none of whose nodes is up yet
    cluster = LocalCluster(tmp_path / "cluster")
    monkeypatch.setenv("AGENTWORKER_REDIS_URL", cluster.url)
    app: Celery = create_app(Settings())
    # When beat starts: it starts, and sends no sweep while the cluster is down
    s = SweepScheduler(app, schedule_filename=str(tmp_path / "schedule"))
    try:
        s.apply_entry(sweep_entry(s), producer=s.producer)
        assert broker_len(server, settings.sweep_queue) == 0
        # Then once the cluster is up, the next tick sends the sweep
        cluster.start()
        s.apply_entry(sweep_entry(s), producer=s.producer)
        assert broker_len(server, settings.sweep_queue) == 1
    finally:
        s.close()
        cluster.stop()
