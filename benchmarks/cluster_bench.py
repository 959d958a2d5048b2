"""Benchmark: the Redis store on one server and on a local 3-master Redis Cluster.

Starts a redis-server and a cluster (``tests/support/cluster.py``) on free loopback ports,
both without persistence, and prints for each: µs and round trips per step of the 10-tool
turn of ``redis_bench`` (history 10; a round trip is one command or pipeline sent on a
connection), and one sweep that finds 1,000 lost wake-ups in 1,000 trees (ms, commands
the servers ran). Best of a few rounds; other processes on the machine make single rounds
noisy.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from redis.connection import Connection

from benchmarks.step_bench import _history, _model, add
from runner_core import Agent, AgentRunner, AgentTurnSnapshot, FunctionModel, UserMessage
from stores import RedisAgentTurnStore
from stores.redis.connection import is_cluster
from tests.support.cluster import LocalCluster
from tests.support.commits import save
from tests.support.servers import RedisServer

ROUNDS = 5
TREES = 1000


class Sent:
    """Round trips through every connection of this process."""

    count = 0


def _counting() -> None:
    original = Connection.send_packed_command

    def send(self: Connection, command: Any, check_health: bool = True) -> None:
        Sent.count += 1
        original(self, command, check_health)  # type: ignore[no-untyped-call]

    Connection.send_packed_command = send  # type: ignore[method-assign, assignment]


def ready_root(n: int) -> AgentTurnSnapshot:
    """A READY root turn in its own tree."""
    now, turn_id = time.time(), f"ready-{n}-{time.perf_counter_ns()}"
    return AgentTurnSnapshot(
        id=turn_id,
        agent_id="bench",
        agent_version="1",
        root_turn_id=turn_id,
        messages=[UserMessage("hi")],
        created_at=now,
        updated_at=now,
    )


def commands(client: Any) -> int:
    """Commands every master has run (INFO commandstats, INFO itself left out)."""
    nodes = [n.redis_connection for n in client.get_primaries()] if is_cluster(client) else [client]
    total = 0
    for node in nodes:
        stats = node.info("commandstats")
        total += sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    return total


def steps(url: str) -> tuple[float, float]:
    """Best (µs per step, round trips per step) of the 10-tool turn."""
    store = RedisAgentTurnStore(url, namespace="bench-steps")
    runner = AgentRunner(turn_store=store)
    agent = Agent("bench", FunctionModel(_model), instructions="add", tools=[add])
    attached = _history(10)
    runner.run(agent, "warm up", history=attached)
    best = (float("inf"), 0.0)
    for _ in range(ROUNDS):
        sent, started, n = Sent.count, time.perf_counter(), 0
        for _ in range(20):
            turn = runner.start(agent, "go", history=attached)
            runner.run_until_blocked(turn)
            n += turn.step_count
        us = (time.perf_counter() - started) / n * 1e6
        best = min(best, (us, (Sent.count - sent) / n))
    store.close()
    return best


def sweep(url: str) -> tuple[float, int]:
    """Best (ms, commands) of a sweep that finds TREES lost wake-ups."""
    store = RedisAgentTurnStore(url, namespace="bench-sweep")
    for n in range(TREES):
        save(store, ready_root(n), -1)
    store.wakeups(store.now(), 10.0)  # a process's first sweep also backfills
    time.sleep(0.01)
    best = (float("inf"), 0)
    for _ in range(ROUNDS):
        before = commands(store.redis)
        started = time.perf_counter()
        found = store.wakeups(store.now(), 0.0, limit=TREES)
        ms = (time.perf_counter() - started) * 1000
        assert len(found.lost) == TREES
        best = min(best, (ms, commands(store.redis) - before))
    store.close()
    return best


def main() -> None:
    """Print the figures of both shapes."""
    _counting()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "single", appendonly=False).start()
        cluster = LocalCluster(Path(tmp) / "cluster").start()
        try:
            print("Redis store, single server vs local 3-master cluster (loopback, no AOF)")
            for name, url in (("single server", server.url), ("3-master cluster", cluster.url)):
                us, trips = steps(url)
                ms, commands = sweep(url)
                print(
                    f"  {name:<17} {us:5.0f} µs/step  {trips:.2f} round trips/step   "
                    f"sweep finding {TREES} lost wake-ups: {ms:4.0f} ms, {commands} commands"
                )
        finally:
            server.stop()
            cluster.stop()


if __name__ == "__main__":
    main()
