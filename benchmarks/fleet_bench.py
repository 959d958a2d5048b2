"""Fleet benchmark: Celery worker processes (solo pool) on one Redis broker and store.

Measured side by side in one run (the machine's noise hits both sides alike):

1. Raw Celery: no-op tasks per second through the same broker and workers.
2. agentworker: steps per second of 10-tool turns (21 steps each) through those workers,
   with the default step chain (a task goes on with its turn's next steps for up to
   ``AGENTWORKER_STEP_CHAIN_SECONDS``); printed as a ratio to (1). Target >= 1.3. Then
   both again on workers restarted with one step per message (a chain of 0 s), target
   >= 0.7; both ratios are printed against ``baseline.json`` too.
3. Scaling: steps per second with 1, then 2 worker processes. Target >= 1.7x. Raw Celery's
   own scaling in the same run is printed beside it: on a small machine the store, the
   broker and the producer share the cores with the workers and cap both. Then the same
   with one step per message, and with tools that wait 5 ms (as calls to other services
   do), which the cores do not cap.
4. Fan-in: a parent with 100 parallel children; the delay between the last child ending and
   the parent's next step starting. Target <= 50 ms.
5. Worker RSS over many one-step turns (``--rss-turns``, 10,000 by default): the resident
   set of each worker after a warm-up and at the end. Target: flat within +-10 %.
6. Per step: Redis commands sent by clients to the store and to the broker (MONITOR; the
   store and the broker are separate servers here), against one no-op task. The producer's
   starts and the benchmark's polling count too.
7. Per step and per no-op task: CPU of the workers (with their children), the store's
   redis-server and the broker (INFO cpu; /proc for processes). The producer is not counted.
8. The ratio of (1) and (2) again with a RabbitMQ broker (a private node, prefork workers),
   and the CPU per step of (7) there, when rabbitmq-server is installed (``--no-rabbitmq``
   skips it).

Throughput figures are the best of ``--rounds`` alternating measurements.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from agentworker.fleet.app import create_app
from agentworker.settings import Settings
from agentworker.wiring import make_runner
from benchmarks import baseline
from runner_core import AgentRunner
from tests.support.servers import RABBITMQ, Fleet, RabbitMQServer, RedisServer


def drained(broker: redis.Redis, queue: str) -> bool:
    """No message waiting and none delivered but unacknowledged."""
    return broker.llen(queue) == 0 and broker.hlen("unacked") == 0


def raw_celery(app: object, broker: redis.Redis | Callable[[], bool], n: int, queue: str) -> float:
    """No-op tasks per second (``broker``: the Redis broker, or a "drained?" callable)."""
    is_drained = broker if callable(broker) else lambda: drained(broker, queue)
    started = time.perf_counter()
    for _ in range(n):
        app.send_task("agentworker.ping", queue=queue)  # type: ignore[attr-defined]
    while not is_drained():
        time.sleep(0.005)
    return n / (time.perf_counter() - started)


def wait_done(runner: AgentRunner, ids: list[str], timeout: float = 600) -> None:
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


def agent_steps(runner: AgentRunner, turns: int, agent: str = "bench-ten-tools") -> float:
    """Steps per second of 10-tool turns."""
    started = time.perf_counter()
    ids = [runner.start(agent, "go").id for _ in range(turns)]
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


def rss_kib(pid: int) -> int:
    """Resident set size of a process, in KiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its live descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            total += (int(stats[current][11]) + int(stats[current][12])) / tick
        todo.extend(children.get(current, []))
    return total


def redis_cpu(client: redis.Redis) -> float:
    """CPU seconds a redis-server has used (INFO cpu, main thread and children)."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def cpu_per_unit(
    meters: dict[str, Callable[[], float]], units: int, work: Callable[[], object]
) -> dict[str, float]:
    """Microseconds of CPU per unit of ``work``, per meter (a CPU-seconds reader)."""
    before = {name: read() for name, read in meters.items()}
    work()
    return {name: (read() - before[name]) / units * 1e6 for name, read in meters.items()}


def worker_rss(runner: AgentRunner, pids: list[int], turns: int) -> list[tuple[int, int]]:
    """Each worker's RSS after a warm-up of ``turns // 10`` one-step turns and at the end."""
    warm = max(1, turns // 10)
    batch = 500
    done = 0
    baseline: list[int] = []
    while done < turns:
        n = min(batch, turns - done)
        ids = [runner.start("bench-leaf", "go").id for _ in range(n)]
        wait_done(runner, ids)
        done += n
        if not baseline and done >= warm:
            baseline = [rss_kib(p) for p in pids]
    return list(zip(baseline, [rss_kib(p) for p in pids], strict=True))


class Monitor:
    """Counts the commands clients send to one server (MONITOR; Lua's own calls left out)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Monitor:
        self._ready = threading.Event()
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.2)
        self._stop.set()
        self.client.ping()  # wakes the monitor to see the flag
        self._thread.join(5)

    def _run(self) -> None:
        with self.client.monitor() as m:  # type: ignore[no-untyped-call]
            self._ready.set()
            for command in m.listen():
                if self._stop.is_set():
                    return
                if command.get("client_type") != "lua":
                    self.count += 1


def per_unit(
    servers: dict[str, redis.Redis], units: int, work: Callable[[], object]
) -> dict[str, float]:
    """Client commands per unit of ``work`` on each server."""
    monitors = {name: Monitor(c) for name, c in servers.items()}
    for m in monitors.values():
        m.__enter__()
    try:
        work()
    finally:
        for m in monitors.values():
            m.__exit__()
    return {name: m.count / units for name, m in monitors.items()}


def best_of(rounds: int, *measures: Callable[[], float]) -> list[float]:
    """Alternate the measures ``rounds`` times; the best figure of each."""
    best = [0.0] * len(measures)
    for _ in range(rounds):
        for i, measure in enumerate(measures):
            best[i] = max(best[i], measure())
    return best


def rabbitmq_ratio(args: argparse.Namespace, workdir: Path, store: redis.Redis) -> str:
    """Raw no-op tasks/s and steps/s with a RabbitMQ broker (same store, same workers).

    Then the CPU each side spends per step and per no-op task (workers, store, node).
    """
    if not Path(RABBITMQ).exists():
        return "  RabbitMQ broker: skipped (rabbitmq-server is not installed)"
    rabbit = RabbitMQServer(workdir / "rabbitmq").start()
    env = {**os.environ, "AGENTWORKER_BROKER_URL": rabbit.url}
    env = {k: v for k, v in env.items() if k.startswith("AGENTWORKER_")}
    os.environ.update(env)
    fleet = Fleet(env, workdir / "logs-rabbitmq")
    try:
        settings = Settings()
        app = create_app(settings)
        runner = make_runner(settings, app)
        queue = settings.step_queue
        conn = app.connection_for_write()
        channel = conn.channel()

        def is_drained() -> bool:
            return int(channel.queue_declare(queue, passive=True).message_count) == 0

        for i in range(args.workers):
            # prefork (one child each): with the solo pool, Celery over py-amqp takes
            # messages in bursts with 0.2-2 s stalls between them (~2 tasks/s)
            fleet.start_worker(f"rabbit{i + 1}", pool="prefork")
        fleet.wait_ready()
        raw_celery(app, is_drained, 200, queue)  # warm up
        agent_steps(runner, 5)
        noop, steps = best_of(
            args.rounds,
            lambda: raw_celery(app, is_drained, args.tasks, queue),
            lambda: agent_steps(runner, args.turns),
        )
        node = rabbit.process
        assert node is not None
        meters = {
            "workers": lambda: sum(tree_cpu(p.pid) for p in fleet.workers.values()),
            "store": lambda: redis_cpu(store),
            "RabbitMQ": lambda: tree_cpu(node.pid),
        }
        cpu_step = cpu_per_unit(meters, 21 * args.turns, lambda: agent_steps(runner, args.turns))
        cpu_task = cpu_per_unit(
            meters, args.tasks, lambda: raw_celery(app, is_drained, args.tasks, queue)
        )
        fleet.stop()
        # the same with one step per message
        fleet = Fleet({**env, "AGENTWORKER_STEP_CHAIN_SECONDS": "0"}, workdir / "logs-rabbit1")
        for i in range(args.workers):
            fleet.start_worker(f"rabbit-single{i + 1}", pool="prefork")
        fleet.wait_ready()
        agent_steps(runner, 5)
        noop_s, steps_s = best_of(
            args.rounds,
            lambda: raw_celery(app, is_drained, args.tasks, queue),
            lambda: agent_steps(runner, args.turns),
        )
        conn.release()
        return (
            f"  RabbitMQ broker, {args.workers} prefork workers of 1 process: "
            f"raw {noop:.0f} tasks/s, steps {steps:.0f} steps/s, "
            f"ratio {steps / noop:.2f}   (target >= 0.7)\n"
            f"  RabbitMQ, one step per message: raw {noop_s:.0f} tasks/s, "
            f"steps {steps_s:.0f} steps/s, ratio {steps_s / noop_s:.2f}\n"
            f"  CPU per step (RabbitMQ): {cpu_line(cpu_step)}  "
            f"(a no-op task: {cpu_line(cpu_task)})"
        )
    finally:
        fleet.stop()
        rabbit.stop()


def cpu_line(figures: dict[str, float]) -> str:
    """``workers 410 µs, store 95 µs, ...``."""
    return ", ".join(f"{name} {value:.0f} µs" for name, value in figures.items())


def main() -> None:
    """Start Redis and workers, measure, print, stop everything."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--turns", type=int, default=150)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rss-turns", type=int, default=10_000)
    parser.add_argument("--no-rabbitmq", action="store_true", help="skip the RabbitMQ run")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agentworker-bench-"))
    store = RedisServer(workdir / "redis", appendonly=True, fsync="everysec").start()
    broker_server = RedisServer(workdir / "broker", appendonly=False).start()
    env = {
        "AGENTWORKER_REDIS_URL": store.url,
        "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{broker_server.port}/1",
        "AGENTWORKER_NAMESPACE": "bench-" + uuid.uuid4().hex[:6],
        "AGENTWORKER_AGENT_LOADER": "benchmarks.fleet_agents:loader",
        "AGENTWORKER_LEASE_SECONDS": "10",
    }
    os.environ.update(env)
    fleet = Fleet(env, workdir / "logs")
    try:
        settings = Settings()
        app = create_app(settings)
        runner = make_runner(settings, app)
        broker = redis.Redis(port=broker_server.port, db=1)
        queue = settings.step_queue

        def noop() -> float:
            return raw_celery(app, broker, args.tasks, queue)

        def steps() -> float:
            return agent_steps(runner, args.turns)

        def waiting_steps() -> float:
            return agent_steps(runner, 20, "bench-ten-waits")

        # 1 worker: raw Celery and steps for the scaling figures
        fleet.start_worker("bench1")
        fleet.wait_ready()
        raw_celery(app, broker, 200, queue)  # warm up
        agent_steps(runner, 5)
        noop_1, steps_1, waits_1 = best_of(args.rounds, noop, steps, waiting_steps)
        for i in range(1, args.workers):
            fleet.start_worker(f"bench{i + 1}")
        fleet.wait_ready()
        agent_steps(runner, 5)
        noop_n, steps_n, waits_n = best_of(args.rounds, noop, steps, waiting_steps)
        delay = fan_in_delay(runner, store.client())
        servers = {"store": store.client(), "broker": broker_server.client()}
        per_step = per_unit(servers, 21 * 20, lambda: agent_steps(runner, 20))
        per_task = per_unit(servers, 1000, lambda: raw_celery(app, broker, 1000, queue))
        meters = {
            "workers": lambda: sum(tree_cpu(p.pid) for p in fleet.workers.values()),
            "store": lambda: redis_cpu(store.client()),
            "broker Redis": lambda: redis_cpu(broker),
        }
        cpu_step = cpu_per_unit(meters, 21 * args.turns, steps)
        cpu_task = cpu_per_unit(meters, args.tasks, noop)
        pids = [p.pid for p in fleet.workers.values()]
        rss = worker_rss(runner, pids, args.rss_turns)
        workers = list(fleet.workers)
        fleet.stop()
        # the same workers with one step per message: what chaining adds
        single = Fleet({**env, "AGENTWORKER_STEP_CHAIN_SECONDS": "0"}, workdir / "logs-single")
        fleet = single
        single.start_worker("single1")
        single.wait_ready()
        agent_steps(runner, 5)
        [steps_s1] = best_of(args.rounds, steps)
        for i in range(1, args.workers):
            single.start_worker(f"single{i + 1}")
        single.wait_ready()
        agent_steps(runner, 5)
        noop_s, steps_s = best_of(args.rounds, noop, steps)
        single_cpu = cpu_per_unit(
            {**meters, "workers": lambda: sum(tree_cpu(p.pid) for p in single.workers.values())},
            21 * args.turns,
            steps,
        )
        single.stop()
        n = args.workers
        print(f"{n} worker processes (solo pool), Redis broker and store on loopback")
        print(f"  raw Celery no-op tasks:    {noop_n:8.0f} tasks/s")
        print(f"  agentworker steps:         {steps_n:8.0f} steps/s  ({args.turns} 10-tool turns)")
        print(f"  ratio steps / no-op tasks: {steps_n / noop_n:8.2f}   (target >= 1.3)")
        print(
            f"  one step per message (AGENTWORKER_STEP_CHAIN_SECONDS=0): raw {noop_s:.0f} "
            f"tasks/s, steps {steps_s:.0f} steps/s, ratio {steps_s / noop_s:.2f}"
        )
        print(
            f"  scaling 1 -> {n} workers:    {steps_1:8.0f} -> {steps_n:.0f} steps/s "
            f"= x{steps_n / steps_1:.2f}   (target >= x1.7 for 2); raw Celery in the same "
            f"run: {noop_1:.0f} -> {noop_n:.0f} tasks/s = x{noop_n / noop_1:.2f}"
        )
        print(
            f"  scaling 1 -> {n} workers, one step per message: {steps_s1:.0f} -> "
            f"{steps_s:.0f} steps/s = x{steps_s / steps_s1:.2f}"
        )
        print(
            f"  scaling 1 -> {n} workers, tools that wait 5 ms (I/O, not CPU): {waits_1:.0f} -> "
            f"{waits_n:.0f} steps/s = x{waits_n / waits_1:.2f}"
        )
        print(
            f"  fan-in: last of 100 children -> parent's next step: {delay * 1000:.1f} ms "
            "(target <= 50 ms)"
        )
        print(
            f"  client commands per step: store {per_step['store']:.1f}, "
            f"broker {per_step['broker']:.1f}  (a no-op task: broker {per_task['broker']:.1f})"
        )
        print(f"  CPU per step: {cpu_line(cpu_step)}  (a no-op task: {cpu_line(cpu_task)})")
        print(f"  CPU per step, one step per message: {cpu_line(single_cpu)}")
        print("  side by side, against benchmarks/baseline.json:")
        print(baseline.line("fleet_chained_per_noop", steps_n / noop_n, "x"))
        print(baseline.line("fleet_one_step_per_noop", steps_s / noop_s, "x"))
        if not args.no_rabbitmq:
            print(rabbitmq_ratio(args, workdir, store.client()))
        for name, (warm, end) in zip(workers, rss, strict=True):
            print(
                f"  {name} RSS over {args.rss_turns} one-step turns: {warm / 1024:.1f} MiB "
                f"after {args.rss_turns // 10} -> {end / 1024:.1f} MiB at the end "
                f"({(end - warm) / warm:+.1%}, target within +-10 %)"
            )
    finally:
        fleet.stop()
        store.stop()
        broker_server.stop()


if __name__ == "__main__":
    main()
