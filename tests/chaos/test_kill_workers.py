"""Soak: workers are killed with SIGKILL again and again while 60 turns run."""

from __future__ import annotations

import random
import threading

import pytest

from runner_core import AgentTurnStatus, ToolMessage
from tests.support.fleet_agents import PREFIX
from tests.support.fleet_fixtures import drive, producer
from tests.support.servers import Fleet, RedisServer

pytestmark = pytest.mark.chaos


@pytest.mark.timeout(300)  # drive() below allows 240 s
def test_sigkill_storm_loses_and_doubles_nothing(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    # Given three workers and beat
    for i in range(3):
        fleet.start_worker(f"w{i}")
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()
    kinds = ["e2e-charges"] * 30 + ["e2e-parent"] * 15 + ["e2e-tools"] * 15
    ids = {runner.start(kind, f"job {i}").id: kind for i, kind in enumerate(kinds)}

    # When a random worker is killed every 0.7 s (and replaced) until the turns are done
    stop = threading.Event()
    kills = [0]

    def storm() -> None:
        n = 3
        while not stop.wait(0.7):
            victim = random.choice(sorted(fleet.workers))
            fleet.kill_worker(victim)
            fleet.start_worker(f"w{n}")
            kills[0] += 1
            n += 1

    killer = threading.Thread(target=storm, daemon=True)
    killer.start()
    try:
        final = drive(runner, list(ids), timeout=240)
    finally:
        stop.set()
        killer.join(10)

    # Then every turn completed, each call answered exactly once in its history ...
    assert kills[0] >= 3
    assert {s.status for s in final.values()} == {AgentTurnStatus.COMPLETED}
    for s in final.values():
        call_ids = [m.call_id for m in s.messages if isinstance(m, ToolMessage)]
        assert len(call_ids) == len(set(call_ids)), s.id
    # ... and every idempotent side effect was applied once, however often it was tried
    client = redis_server.client()
    effects = [int(client.get(k) or 0) for k in client.keys(PREFIX + "effect:*")]
    attempts = sum(int(client.get(k) or 0) for k in client.keys(PREFIX + "attempt:*"))
    assert len(effects) == 30 * 5 and set(effects) == {1}
    assert attempts >= len(effects)
