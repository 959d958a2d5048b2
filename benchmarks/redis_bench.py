"""Benchmark: the 10-tool turn of step_bench on the Redis store.

Starts its own redis-server (AOF on, appendfsync everysec, as in production) on a free
loopback port and prints, with 10, 100 and 400 messages of attached history: µs per step,
Redis round trips per step (a counting connection: one per command or pipeline sent),
bytes sent to Redis per step, and bytes appended to the AOF per step; each for whole turns
and for the steps alone (without creating the turn, which stores its history once); and
the server's own time in scripts per step (INFO commandstats, the steps alone).
Sizes are interleaved over many short rounds and the best round counts, as other
processes on the machine make single rounds noisy. In every round, right after the steps
with 10 messages and on the same server and client: one trivial EVALSHA round trip
(``return 1`` on one key), the floor of any step that commits through a script; the
step's ratio to it (target <= 3x) is the best step over the best floor.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from benchmarks import baseline
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

    def __init__(self, client: redis.Redis, history: int, stats: redis.Redis) -> None:
        #: A client that is not counted, for the server's own statistics.
        self.stats = stats
        self.store = RedisAgentTurnStore(client, namespace=f"bench{history}")
        self.runner = AgentRunner(turn_store=self.store)
        self.agent = Agent("bench", FunctionModel(_model), instructions="add", tools=[add])
        self.attached = _history(history)
        self.runner.run(self.agent, "warm up", history=self.attached)

    def round(self, turns: int, directory: Path) -> dict[str, float]:
        """Run ``turns`` turns; per-step figures with and without the turns' creation."""
        gc.collect()
        created = stepped = 0.0
        totals = dict.fromkeys(("rt", "sent", "aof", "rt_steps", "sent_steps", "aof_steps"), 0)
        steps = server = 0
        for _ in range(turns):
            t0, before = time.perf_counter(), self._meters(directory)
            turn = self.runner.start(self.agent, "go", history=self.attached)
            created += time.perf_counter() - t0
            self.stats.config_resetstat()
            t1, middle = time.perf_counter(), self._meters(directory)
            self.runner.run_until_blocked(turn)
            t2, after = time.perf_counter(), self._meters(directory)
            stepped += t2 - t1
            server += self.stats.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0)
            for name, start, mid, end in zip(
                ("rt", "sent", "aof"), before, middle, after, strict=True
            ):
                totals[name] += end - start
                totals[f"{name}_steps"] += end - mid
            steps += turn.step_count
        assert turn.final_output == "done" and turn.tool_call_count == TOOL_CALLS
        result = {name: value / steps for name, value in totals.items()}
        result["us"] = (created + stepped) / steps * 1e6
        result["us_steps"] = stepped / steps * 1e6
        result["server_us_steps"] = server / steps
        return result

    @staticmethod
    def _meters(directory: Path) -> tuple[int, int, int]:
        return Counter.round_trips, Counter.bytes_sent, aof_bytes(directory)


def measure(port: int, directory: Path, turns: int, rounds: int) -> dict[int, dict[str, float]]:
    """Best round (by µs/step) per history size; sizes interleaved so noise hits all alike.

    Every round also times the trivial round trip right after the smallest history's
    steps, on the same client, so both are sampled over the same stretch of a machine
    whose speed drifts: ``floor_us`` is the best of those.
    """
    pool = redis.ConnectionPool(host="127.0.0.1", port=port, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    stats = redis.Redis(host="127.0.0.1", port=port)
    workloads = {h: Workload(client, h, stats) for h in HISTORIES}
    script = client.register_script("return 1")
    best: dict[int, dict[str, float]] = {}
    floor = float("inf")
    for _ in range(rounds):
        for history, workload in workloads.items():
            result = workload.round(turns, directory)
            if history == HISTORIES[0]:
                floor = min(floor, trivial_round_trip(script, calls=400, batches=2))
            if history not in best or result["us"] < best[history]["us"]:
                best[history] = result
        client.flushdb()
    best[HISTORIES[0]]["floor_us"] = floor
    return best


def trivial_round_trip(script: Any, calls: int = 2000, batches: int = 5) -> float:
    """µs of one EVALSHA of a script that returns at once (``return 1``), best batch."""
    script(keys=["bench:trivial"])
    best = float("inf")
    for _ in range(batches):
        started = time.perf_counter()
        for _ in range(calls):
            script(keys=["bench:trivial"])
        best = min(best, (time.perf_counter() - started) / calls * 1e6)
    return best


def ratios(turns: int, rounds: int) -> dict[str, float]:
    """The Redis step figures and the trivial round trip, side by side on one server."""
    with tempfile.TemporaryDirectory(prefix="redis-bench-") as tmp:
        directory = Path(tmp)
        process, port = start_server(directory)
        try:
            results = measure(port, directory, turns, rounds)
        finally:
            process.terminate()
            process.wait(10)
    return figures_of(results)


def figures_of(results: dict[int, dict[str, float]]) -> dict[str, float]:
    """The named figures ``baseline.json`` records, from the steps alone."""
    small, large = results[HISTORIES[0]], results[HISTORIES[-1]]
    return {
        "redis_step_us": small["us_steps"],
        "redis_trivial_round_trip_us": small["floor_us"],
        "redis_step_per_round_trip": small["us_steps"] / small["floor_us"],
        "redis_round_trips_per_step": small["rt_steps"],
        "redis_bytes_per_step": small["sent_steps"],
        "redis_script_server_us_per_step": small["server_us_steps"],
        "redis_history_400_per_10": large["us_steps"] / small["us_steps"],
    }


def main() -> None:
    """Print the figures and the comparison."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=20, help="turns per round")
    parser.add_argument("--rounds", type=int, default=12, help="rounds; the best counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-bench-") as tmp:
        directory = Path(tmp)
        process, port = start_server(directory)
        try:
            results = measure(port, directory, args.turns, args.rounds)
        finally:
            process.terminate()
            process.wait(10)
    report(results)
    print("side by side (history 10, steps alone), against benchmarks/baseline.json:")
    units = (("_us", " µs"), ("bytes", " B"), ("round_trips", ""), ("_per_", "x"))
    for name, value in figures_of(results).items():
        unit = next((u for key, u in units if key in name), "")
        print(baseline.line(name, value, unit))


def report(results: dict[int, dict[str, float]]) -> None:
    """Print one line per history size, then targets and peers."""
    print(
        f"10-tool turn ({TOOL_CALLS + 1} model calls, {TOOL_CALLS} tool calls, 21 steps), "
        "FunctionModel, RedisAgentTurnStore, local redis-server (AOF everysec)"
    )
    first = results[HISTORIES[0]]
    for history, r in results.items():
        print(
            f"  history {history:>3}: {r['us']:5.0f} µs/step ({r['us_steps']:3.0f} steps alone)"
            f"  {r['rt']:.2f} round trips/step ({r['rt_steps']:.2f})"
            f"  KB sent/step {r['sent'] / 1024:4.1f} ({r['sent_steps'] / 1024:3.1f})"
            f"  KB AOF/step {r['aof'] / 1024:4.1f} ({r['aof_steps'] / 1024:3.1f})"
            f"  script µs/step on the server {r['server_us_steps']:3.0f}"
            f"  {r['us'] / first['us']:.2f}x ({r['us_steps'] / first['us_steps']:.2f}x) of "
            f"{HISTORIES[0]}"
        )
    print(
        "  (a turn's figures include creating it, which stores its attached history once; "
        "'steps alone' leaves creation out)"
    )
    print("targets: <= 1.2 round trips/step, <= 2,000 bytes/step, 400 messages <= 1.2x of 10")
    print(f"peers: {PEERS}")


if __name__ == "__main__":
    main()
