"""Benchmark: the 10-tool turn of step_bench on the Redis store.

Starts its own redis-server (AOF on, appendfsync everysec, as in production) on a free
loopback port and prints, with 10, 100 and 400 messages of attached history: µs per step,
Redis round trips per step (a counting connection: one per command or pipeline sent),
bytes sent to Redis per step, and bytes appended to the AOF per step.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from benchmarks.step_bench import TOOL_CALLS, _history, _model, add
from runner_core import Agent, AgentRunner, FunctionModel
from stores import RedisAgentTurnStore

HISTORIES = (10, 100, 400)
PEERS = (
    "LangGraph + SQLite checkpointer on this turn: ~1,060 µs/step, grows ~4x from 10 to "
    "400 messages, ~187 KB written per checkpoint at 400 messages"
)


class Counter:
    """Round trips and bytes sent through counting connections."""

    round_trips = 0
    bytes_sent = 0


class CountingConnection(redis.Connection):
    """Counts every send (a command or a whole pipeline) and its bytes."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        Counter.round_trips += 1
        items = [command] if isinstance(command, bytes | str) else command
        Counter.bytes_sent += sum(len(item) for item in items)
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A redis-server with AOF (everysec, no auto-rewrite) on a free port."""
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed; skipping the Redis benchmark")
    port = _free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir"]
    args += [str(directory), "--appendonly", "yes", "--appendfsync", "everysec"]
    args += ["--auto-aof-rewrite-percentage", "0"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    client = redis.Redis(port=port)
    for _ in range(500):
        try:
            client.ping()
            return process, port
        except redis.ConnectionError:
            time.sleep(0.01)
    sys.exit("redis-server did not start")


def aof_bytes(directory: Path) -> int:
    """Bytes in the AOF files (Redis 7: appendonlydir/*.aof)."""
    return sum(p.stat().st_size for p in directory.rglob("*.aof*"))


class Workload:
    """The 10-tool turn with ``history`` attached messages, on one store."""

    def __init__(self, client: redis.Redis, history: int) -> None:
        self.store = RedisAgentTurnStore(client, namespace=f"bench{history}")
        self.runner = AgentRunner(turn_store=self.store)
        self.agent = Agent("bench", FunctionModel(_model), instructions="add", tools=[add])
        self.attached = _history(history)
        self.runner.run(self.agent, "warm up", history=self.attached)

    def round(self, turns: int, directory: Path) -> dict[str, float]:
        """Run ``turns`` turns; per-step figures with and without the turns' creation."""
        gc.collect()
        created = stepped = 0.0
        rt_created = rt_stepped = steps = 0
        Counter.bytes_sent = 0
        aof_before = aof_bytes(directory)
        for _ in range(turns):
            rt0, t0 = Counter.round_trips, time.perf_counter()
            turn = self.runner.start(self.agent, "go", history=self.attached)
            rt1, t1 = Counter.round_trips, time.perf_counter()
            self.runner.run_until_blocked(turn)
            stepped += time.perf_counter() - t1
            created += t1 - t0
            rt_created += rt1 - rt0
            rt_stepped += Counter.round_trips - rt1
            steps += turn.step_count
        assert turn.final_output == "done" and turn.tool_call_count == TOOL_CALLS
        return {
            "us": (created + stepped) / steps * 1e6,
            "us_steps": stepped / steps * 1e6,
            "rt": (rt_created + rt_stepped) / steps,
            "rt_steps": rt_stepped / steps,
            "sent": Counter.bytes_sent / steps,
            "aof": (aof_bytes(directory) - aof_before) / steps,
        }


def measure(port: int, directory: Path, turns: int, rounds: int) -> dict[int, dict[str, float]]:
    """Best round (by µs/step) per history size; sizes interleaved so noise hits all alike."""
    pool = redis.ConnectionPool(host="127.0.0.1", port=port, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    workloads = {h: Workload(client, h) for h in HISTORIES}
    best: dict[int, dict[str, float]] = {}
    for _ in range(rounds):
        for history, workload in workloads.items():
            result = workload.round(turns, directory)
            if history not in best or result["us"] < best[history]["us"]:
                best[history] = result
        client.flushdb()
    return best


def main() -> None:
    """Print the figures and the comparison."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=20, help="turns per round")
    parser.add_argument("--rounds", type=int, default=12, help="rounds; the best counts")
    parser.add_argument(
        "--pin", action="store_true", help="pin client and server to CPU 0 (no cross-CPU wake-ups)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-bench-") as tmp:
        directory = Path(tmp)
        process, port = start_server(directory)
        if args.pin:
            os.sched_setaffinity(process.pid, {0})
            os.sched_setaffinity(0, {0})
        try:
            results = measure(port, directory, args.turns, args.rounds)
        finally:
            process.terminate()
            process.wait(10)
    report(results, args.pin)


def report(results: dict[int, dict[str, float]], pinned: bool) -> None:
    """Print one line per history size, then targets and peers."""
    where = "pinned to one CPU" if pinned else "not pinned"
    print(
        f"10-tool turn ({TOOL_CALLS + 1} model calls, {TOOL_CALLS} tool calls, 21 steps), "
        f"FunctionModel, RedisAgentTurnStore, local redis-server (AOF everysec), {where}"
    )
    first = results[HISTORIES[0]]
    for history, r in results.items():
        print(
            f"  history {history:>3}: {r['us']:5.0f} µs/step ({r['us_steps']:3.0f} steps alone)"
            f"  {r['rt']:.2f} round trips/step ({r['rt_steps']:.2f})"
            f"  {r['sent'] / 1024:4.1f} KB sent/step  {r['aof'] / 1024:4.1f} KB AOF/step"
            f"  {r['us'] / first['us']:.2f}x ({r['us_steps'] / first['us_steps']:.2f}x) of "
            f"{HISTORIES[0]}"
        )
    print(
        "  (a turn's figures include creating it, which stores its attached history once; "
        "'steps alone' leaves creation out)"
    )
    print("targets: <= 3 round trips/step, <= 250 µs/step, 400 messages <= 1.2x of 10")
    print(f"peers: {PEERS}")


if __name__ == "__main__":
    main()
