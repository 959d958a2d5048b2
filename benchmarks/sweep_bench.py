"""Sweep benchmark: one sweep over 10,000 and 100,000 blocked turn trees.

Each tree is a root turn waiting for approval (nothing for the sweeper to do), plus 10
due retries. Printed side by side in one run: one sweep through the due index (what the
sweeper does now) and one full partition scan (what every sweep did before: a script call
per live tree). From the per-tree cost of the full scan, the live-tree count at which a
1 s sweep would saturate.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import redis

from benchmarks.redis_bench import start_server
from runner_core import AgentTurnSnapshot, AgentTurnStatus, UserMessage
from stores import RedisAgentTurnStore
from tests.support.commits import save

S = AgentTurnStatus


def blocked(n: int, store: RedisAgentTurnStore, now: float) -> None:
    """``n`` trees waiting for approval, written in pipelined batches of commits."""
    batch: list[AgentTurnSnapshot] = []
    for i in range(n):
        turn_id = f"b{i:07d}-{now:.0f}"
        batch.append(
            AgentTurnSnapshot(
                id=turn_id,
                agent_id="bench",
                agent_version="1",
                root_turn_id=turn_id,
                status=S.WAITING_FOR_APPROVAL,
                messages=[UserMessage("hi")],
                created_at=now,
                updated_at=now,
            )
        )
        if len(batch) == 500 or i == n - 1:
            for s in batch:
                save(store, s, -1)
            batch.clear()


def commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def add_due(store: RedisAgentTurnStore, n: int) -> None:
    """``n`` retries that are due now."""
    now = store.now()
    for _ in range(n):
        due = AgentTurnSnapshot(
            id=f"due-{time.perf_counter_ns()}",
            agent_id="bench",
            agent_version="1",
            root_turn_id="x",
            status=S.RETRY_SCHEDULED,
            next_runnable_at=now - 1,
            messages=[UserMessage("hi")],
            created_at=now,
            updated_at=now,
        )
        due = due.model_copy(update={"root_turn_id": due.id})
        save(store, due, -1)


def per_due(store: RedisAgentTurnStore, client: redis.Redis, n: int) -> tuple[float, float]:
    """Microseconds and commands per due turn of a sweep finding ``n`` (and marking them
    queued), over the cost of a sweep that finds 10. The wake-up's publish is not counted.
    """
    costs = []
    for count in (10, n):
        client.flushall()
        add_due(store, count)
        store.wakeups(store.now(), 10.0)  # backfill
        c0, t0 = commands(client), time.perf_counter()
        found = store.wakeups(store.now() - 0.5, 10.0, limit=count)
        store.mark_queued(found.due)
        t1, c1 = time.perf_counter(), commands(client)
        assert len(found.due) == count, (len(found.due), count)
        costs.append(((t1 - t0) * 1e6, c1 - c0))
    (t_small, c_small), (t_big, c_big) = costs
    return (t_big - t_small) / (n - 10), (c_big - c_small) / (n - 10)


def measure(store: RedisAgentTurnStore, client: redis.Redis) -> dict[str, float]:
    add_due(store, 10)
    store.wakeups(store.now(), 10.0)  # a process's first sweep backfills the index
    c0, t0 = commands(client), time.perf_counter()
    found = store.wakeups(store.now() - 0.5, 10.0)
    t1, c1 = time.perf_counter(), commands(client)
    assert len(found.due) >= 10, found
    store.mark_queued(found.due)
    tags = store.scanner.partition_tags()
    c2, t2 = commands(client), time.perf_counter()
    store.scanner.visit(tags, store.now(), 100)
    t3, c3 = time.perf_counter(), commands(client)
    return {
        "sweep_ms": (t1 - t0) * 1000,
        "sweep_cmds": c1 - c0,
        "full_ms": (t3 - t2) * 1000,
        "full_cmds": c3 - c2,
        "trees": len(tags),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        process, port = start_server(Path(directory))
        try:
            client = redis.Redis(port=port)
            print("one sweep over N blocked turn trees (+10 due retries), local redis-server")
            for n in (int(x) for x in args.sizes.split(",")):
                client.flushall()
                store = RedisAgentTurnStore(f"redis://127.0.0.1:{port}/0", namespace="sweep")
                started = time.perf_counter()
                memory = int(client.info("memory")["used_memory"])
                blocked(n, store, store.now())
                made = time.perf_counter() - started
                per_tree_bytes = (int(client.info("memory")["used_memory"]) - memory) / n
                r = measure(store, client)
                per_tree = r["full_ms"] / 1000 / max(1, r["trees"])
                print(
                    f"  {n:>7,} trees (stored in {made:.0f} s): sweep {r['sweep_ms']:7.1f} ms"
                    f" {r['sweep_cmds']:>6.0f} commands | full scan (before) "
                    f"{r['full_ms']:8.1f} ms {r['full_cmds']:>8.0f} commands"
                )
                print(
                    f"           a 1 s full-scan sweep saturates at ~{1 / per_tree:,.0f} live"
                    " trees; the indexed sweep does not grow with them"
                )
                print(
                    f"           Redis memory: {per_tree_bytes:,.0f} bytes per blocked tree"
                    " (one root turn, one message, its events and index entries)"
                )
                store.close()
            store = RedisAgentTurnStore(f"redis://127.0.0.1:{port}/0", namespace="sweep")
            micros, cmds = per_due(store, client, 1000)
            print(
                f"  per due turn (a sweep finding 1,000 against one finding 10): {micros:.0f} µs,"
                f" {cmds:.2f} commands, plus its wake-up's publish (at most 1,000 per sweep)"
            )
            store.close()
        finally:
            process.kill()


if __name__ == "__main__":
    main()
