"""Fleet benchmark: 2 Celery worker processes on one Redis broker.

1. Raw Celery: no-op tasks per second through the same broker and workers.
2. agentworker: steps per second of 10-tool turns (21 steps each) through those workers;
   printed as a ratio to (1). Target >= 0.7.
3. Fan-in: a parent with 100 parallel children; the delay between the last child ending and
   the parent's next step starting. Target <= 50 ms.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

import redis

from agentworker.celery_app import create_app
from agentworker.runtime import make_runner
from agentworker.settings import Settings
from examples.local import Fleet, RedisServer
from runner_core import AgentRunner


def drained(broker: redis.Redis, queue: str) -> bool:
    """No message waiting and none delivered but unacknowledged."""
    return broker.llen(queue) == 0 and broker.hlen("unacked") == 0


def raw_celery(app: object, broker: redis.Redis, n: int, queue: str) -> float:
    """No-op tasks per second."""
    started = time.perf_counter()
    for _ in range(n):
        app.send_task("agentworker.ping", queue=queue)  # type: ignore[attr-defined]
    while not drained(broker, queue):
        time.sleep(0.005)

    return n / (time.perf_counter() - started)


def wait_done(runner: AgentRunner, ids: list[str], timeout: float = 300) -> None:
    """Until every turn has ended."""
    # one light read at a time: the benchmark must not steal the workers' CPU
    pending = list(ids)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        if runner.store.peek(pending[0]).status.is_terminal:
            pending.pop(0)
        else:
            time.sleep(0.005)
    if pending:
        raise RuntimeError(f"{len(pending)} turns did not finish")


def agent_steps(runner: AgentRunner, turns: int) -> float:
    """Steps per second of 10-tool turns."""
    started = time.perf_counter()
    ids = [runner.start("bench-ten-tools", "go").id for _ in range(turns)]
    wait_done(runner, ids)
    elapsed = time.perf_counter() - started
    steps = sum(runner.store.load(t).step_count for t in ids)
    return steps / elapsed


def fan_in_delay(runner: AgentRunner, client: redis.Redis) -> float:
    """Seconds from the last of 100 children ending to the parent's next step."""
    parent = runner.start("bench-fan-out", "go")
    wait_done(runner, [parent.id])
    children = [runner.store.load(c) for c in runner.store.children_of(parent.id)]
    last_child = max(c.updated_at for c in children)
    starts = sorted(float(x) for x in client.lrange(f"bench:steps:{parent.id}", 0, -1))
    after = [t for t in starts if t >= last_child]
    return after[0] - last_child


def main() -> None:
    """Start Redis and two workers, measure, print, stop everything."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--turns", type=int, default=150)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agentworker-bench-"))
    server = RedisServer(workdir / "redis", appendonly=True, fsync="everysec").start()
    env = {
        "AGENTWORKER_REDIS_URL": server.url,
        "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{server.port}/1",
        "AGENTWORKER_NAMESPACE": "bench-" + uuid.uuid4().hex[:6],
        "AGENTWORKER_AGENT_LOADER": "benchmarks.fleet_agents:loader",
        "AGENTWORKER_LEASE_SECONDS": "10",
    }
    os.environ.update(env)
    fleet = Fleet(env, workdir / "logs")
    try:
        for i in range(args.workers):
            fleet.start_worker(f"bench{i + 1}")
        fleet.wait_ready()
        settings = Settings()
        app = create_app(settings)
        runner = make_runner(settings, app)
        broker = redis.Redis(port=server.port, db=1)
        raw_celery(app, broker, 200, settings.step_queue)  # warm up
        agent_steps(runner, 5)
        noop = raw_celery(app, broker, args.tasks, settings.step_queue)
        steps = agent_steps(runner, args.turns)
        delay = fan_in_delay(runner, server.client())
        print(f"{args.workers} worker processes (solo pool), Redis broker and store on loopback")
        print(f"  raw Celery no-op tasks:    {noop:8.0f} tasks/s")
        print(f"  agentworker steps:         {steps:8.0f} steps/s  ({args.turns} 10-tool turns)")
        print(f"  ratio steps / no-op tasks: {steps / noop:8.2f}   (target >= 0.7)")
        print(
            f"  fan-in: last of 100 children -> parent's next step: {delay * 1000:.1f} ms "
            "(target <= 50 ms)"
        )
    finally:
        fleet.stop()
        server.stop()


if __name__ == "__main__":
    main()
