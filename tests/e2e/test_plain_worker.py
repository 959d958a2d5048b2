"""The documented commands as written: a worker without -Q sweeps too; beat never piles up.

``celery -A agentworker worker`` consumes the queues the app declares (steps and sweeps),
so due retries, which only the sweeper wakes, fire without any -Q; with no worker on the
sweep queue, beat keeps at most one sweep waiting in the broker.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
import redis

from agentworker.settings import Settings
from runner_core import AgentTurnStatus
from tests.support.fleet_fixtures import RETRYING, drive, producer
from tests.support.servers import Fleet, RedisServer

pytestmark = pytest.mark.e2e


def test_a_worker_without_q_and_beat_finish_a_mixed_run_with_due_retries(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    # Given one worker started without -Q (prefork, two processes) and beat
    worker = fleet.start_worker("plain", concurrency=2, pool="prefork")
    assert "-Q" not in worker.args and not any(a.startswith("--queues") for a in worker.args)
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()
    # When a mixed run starts: turns whose model fails retryably twice (RETRY_SCHEDULED,
    # woken only by the sweeper), plain tool turns, forms and parents with children
    kinds = ["e2e-flaky"] * 10 + ["e2e-tools"] * 10 + ["e2e-form"] * 5 + ["e2e-parent"] * 5
    ids = {runner.start(k, f"job {i}", options=RETRYING).id: k for i, k in enumerate(kinds)}
    # Then every turn ends, the flaky ones after their two scheduled retries
    final = drive(runner, list(ids), timeout=90)
    assert Counter(s.status for s in final.values()) == {AgentTurnStatus.COMPLETED: 30}
    flaky = [final[t] for t, k in ids.items() if k == "e2e-flaky"]
    assert {s.retry_count for s in flaky} == {2}
    assert "agentworker.sweep" in (fleet.logs / "plain.log").read_text()


def test_beat_without_a_sweep_consumer_leaves_at_most_one_sweep_waiting(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    settings = Settings()
    broker = redis.Redis(port=redis_server.port, db=1)
    # Given a worker that consumes steps only, and beat sweeping every 0.5 s
    fleet.start_worker("steps-only", queues=settings.step_queue)
    fleet.wait_ready()
    fleet.start_beat()
    # When beat runs for 5 s (ten sweep intervals) with nobody on the sweep queue
    time.sleep(5.0)
    beat_log = fleet.logs / "beat.log"
    deadline = time.monotonic() + 15
    while "still wait in" not in beat_log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)  # a slow start: beat has sent its first sweep and found it waiting
    # Then one sweep waits in the broker, not ten, and beat says why it sends none
    assert "still wait in agentworker.sweep" in beat_log.read_text()
    waiting = broker.llen(settings.sweep_queue)
    assert waiting <= 1, waiting
    # And once a worker consumes the sweep queue, sweeps run again and nothing piles up
    fleet.start_worker("sweeper", queues=settings.sweep_queue)
    fleet.wait_ready()
    deadline = time.monotonic() + 20
    log = fleet.logs / "sweeper.log"
    while "agentworker.sweep" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)
    assert log.read_text().count("succeeded") >= 2  # more than the one that waited
    assert broker.llen(settings.sweep_queue) <= 1
