"""The step time limit on real ``celery worker`` processes, on the solo, threads and prefork pools.

One fleet per pool (workers and beat on a private redis-server), shared by the module's
tests: a tool past its own timeout, a tool that never returns, and a sync model call that
hangs past the step's deadline and grace (the lease backstop). Then per-process
dependencies on a prefork worker with two children.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from agentworker.settings import Settings
from runner_core import (
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentTurnStatus,
    ToolMessage,
)
from tests.support.fleet_agents import DEPS_GREETING, MODEL_HANG_SECONDS, deps_loader
from tests.support.fleet_fixtures import drive, producer
from tests.support.servers import Fleet, RedisServer

pytestmark = pytest.mark.e2e

LIMIT = 3.0  # AGENTWORKER_STEP_TIME_LIMIT, as the limit was measured
GRACE = Settings(redis_url="redis://127.0.0.1:1/0", step_time_limit=LIMIT).step_grace_seconds
#: How far past the deadline and grace a lease may be seen live (polling, clocks, a renewal).
SLACK = 0.6
#: Workers per pool: a hung call keeps a solo process or one thread busy, so each pool has
#: room for another step meanwhile.
POOLS = {"solo": (2, 1), "threads": (1, 3), "prefork": (1, 2)}


def fleet_env(redis_server: RedisServer, loader: str) -> dict[str, str]:
    """Each fleet its own namespace and queues: the module's fleets live side by side."""
    namespace = "pools-" + uuid.uuid4().hex[:8]
    return {
        "AGENTWORKER_REDIS_URL": redis_server.url,
        "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{redis_server.port}/1",
        "AGENTWORKER_NAMESPACE": namespace,
        "AGENTWORKER_STEP_QUEUE": f"{namespace}.steps",
        "AGENTWORKER_SWEEP_QUEUE": f"{namespace}.sweep",
        "AGENTWORKER_AGENT_LOADER": loader,
        "AGENTWORKER_LEASE_SECONDS": "2",
        "AGENTWORKER_SWEEP_INTERVAL": "0.5",
        "AGENTWORKER_LOST_WAKEUP_SECONDS": "1",
        "AGENTWORKER_STEP_TIME_LIMIT": f"{LIMIT:g}",
        "AGENTWORKER_VISIBILITY_TIMEOUT": "60",
    }


@dataclass
class PoolFleet:
    pool: str
    fleet: Fleet
    env: dict[str, str]
    names: list[str] = field(default_factory=list)

    def runner(self, monkeypatch: pytest.MonkeyPatch) -> AgentRunner:
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)
        return producer()

    def log(self) -> str:
        return "".join(
            (self.fleet.logs / f"{n}.log").read_text(errors="replace") for n in self.names
        )


@pytest.fixture(scope="module", params=list(POOLS))
def pool_fleet(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PoolFleet]:
    pool: str = request.param
    workers, concurrency = POOLS[pool]
    env = fleet_env(redis_server, "tests.support.fleet_agents:pool_loader")
    fleet = Fleet(env, tmp_path_factory.mktemp(f"pool-{pool}") / "logs")
    started = PoolFleet(pool, fleet, env)
    try:
        for i in range(workers):
            name = f"{pool}{i}"
            fleet.start_worker(name, concurrency, pool=pool)
            started.names.append(name)
        fleet.start_beat()
        fleet.wait_ready()
        yield started
    finally:
        fleet.stop()


@dataclass
class LeaseWatch:
    """Every lease seen on one turn: when it was first seen, its latest end, last seen live."""

    first_seen: dict[str, float] = field(default_factory=dict)
    latest_until: dict[str, float] = field(default_factory=dict)
    last_live: dict[str, float] = field(default_factory=dict)

    def longest_hold(self) -> float:
        """The longest a lease was held, from first seen to its latest end (store clock)."""
        return max(
            (max(self.latest_until[k], self.last_live[k]) - self.first_seen[k])
            for k in self.first_seen
        )


def watch(
    runner: AgentRunner, turn_id: str, timeout: float
) -> tuple[AgentTurnSnapshot, LeaseWatch]:
    """Poll the turn's lease every 50 ms until it ends, or for ``timeout`` seconds."""
    seen = LeaseWatch()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        control = runner.store.peek(turn_id)
        lease = control.live_lease
        if lease is not None:
            seen.first_seen.setdefault(lease.lease_id, control.now)
            seen.latest_until[lease.lease_id] = max(
                lease.until, seen.latest_until.get(lease.lease_id, 0.0)
            )
            seen.last_live[lease.lease_id] = control.now
        if control.status.is_terminal:
            break
        time.sleep(0.05)
    return runner.store.load(turn_id), seen


def tool_results(s: AgentTurnSnapshot) -> list[str]:
    return [m.content for m in s.messages if isinstance(m, ToolMessage)]


def test_the_worker_says_at_start_what_enforces_the_limit(pool_fleet: PoolFleet) -> None:
    said = [line for line in pool_fleet.log().splitlines() if f"pool {pool_fleet.pool}:" in line]
    assert said, pool_fleet.log()[-2000:]
    assert f"stop at {LIMIT:g} s" in said[0] and "loses its lease" in said[0]
    if pool_fleet.pool == "prefork":
        assert "SoftTimeLimitExceeded" in said[0] and "kills the child" in said[0]
    else:
        assert "Celery's time limits are not enforced" in said[0]


def test_a_tool_past_its_timeout_is_told_to_the_model_and_the_turn_completes(
    pool_fleet: PoolFleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an 8 s tool with @tool(timeout=1)
    runner = pool_fleet.runner(monkeypatch)
    started = time.monotonic()
    turn = runner.start("e2e-sleepy", "sleep")
    # Then the model hears of the timeout and the turn completes, without waiting 8 s
    final = drive(runner, [turn.id], timeout=30)[turn.id]
    assert final.status is AgentTurnStatus.COMPLETED, (final.status, final.terminal_reason)
    [result] = tool_results(final)
    assert "sleepy" in result and "timed out after 1 s" in result
    assert final.final_output is not None and "timed out" in final.final_output
    assert time.monotonic() - started < 8


def test_async_calls_of_one_response_run_together_on_the_process_loop(
    pool_fleet: PoolFleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an async model asking for four 0.5 s async tool calls in one response
    runner = pool_fleet.runner(monkeypatch)
    options = AgentTurnOptions(policy=AgentExecutionPolicy(max_tool_concurrency=4))
    turn = runner.start("e2e-async-fanout", "fan out", options=options)
    # When a worker of this pool runs it
    final = drive(runner, [turn.id], timeout=30)[turn.id]
    # Then each call returned what it returned (no coroutine rendered), under its own key,
    # and the four ran at once in one process: each began before any ended
    assert final.status is AgentTurnStatus.COMPLETED, (final.status, final.terminal_reason)
    assert final.final_output == "4 results"
    results = [json.loads(r) for r in tool_results(final)]
    assert sorted(r["n"] for r in results) == [0, 1, 2, 3]
    assert {r["key"] for r in results} == {f"{turn.id}:o{n}" for n in range(4)}
    assert len({r["pid"] for r in results}) == 1
    assert max(r["began"] for r in results) < min(r["ended"] for r in results)


def test_a_tool_that_never_returns_holds_no_lease_past_the_step_limit(
    pool_fleet: PoolFleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a tool that sleeps for an hour, with no timeout of its own
    runner = pool_fleet.runner(monkeypatch)
    turn = runner.start("e2e-hang", "hang")
    # When it runs under AGENTWORKER_STEP_TIME_LIMIT
    final, leases = watch(runner, turn.id, timeout=25)
    # Then no lease outlived the step's deadline and grace, and the step deadline cut the
    # call: the model was told, and the turn completed
    assert leases.first_seen, "no lease was ever seen"
    assert leases.longest_hold() <= LIMIT + GRACE + SLACK, leases
    assert final.status is AgentTurnStatus.COMPLETED, (final.status, final.terminal_reason)
    [result] = tool_results(final)
    assert "hang" in result and "timed out" in result


def test_a_hung_model_call_loses_its_lease_and_another_worker_finishes(
    pool_fleet: PoolFleet, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    # Given a sync model call that blocks 12 s (nothing inside the call can stop it)
    runner = pool_fleet.runner(monkeypatch)
    started = time.monotonic()
    turn = runner.start("e2e-hung-model", "hang first")
    # When it runs past the step's deadline and grace
    final, leases = watch(runner, turn.id, timeout=25)
    # Then its lease was cut at the backstop, and another claim finished the turn while the
    # hung call still ran
    assert final.status is AgentTurnStatus.COMPLETED, (final.status, final.terminal_reason)
    assert time.monotonic() - started < MODEL_HANG_SECONDS
    assert leases.longest_hold() <= LIMIT + GRACE + SLACK, leases
    assert final.final_output == "answered after a hang"
    assert f"turn {turn.id}: its step is still running" in pool_fleet.log()
    # and once the hung call ends (prefork: Celery's soft limit ends it), its step is fenced
    fenced = f"turn {turn.id}: fenced, its step ran past the time limit"
    deadline = time.monotonic() + MODEL_HANG_SECONDS + 5
    while fenced not in pool_fleet.log() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert fenced in pool_fleet.log()
    if pool_fleet.pool == "prefork":
        assert "Soft time limit" in pool_fleet.log()
    assert runner.store.load(turn.id).version == final.version  # nothing landed after


# -- per-process dependencies on prefork -------------------------------------------------------
@pytest.fixture(scope="module")
def deps_fleet(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PoolFleet]:
    env = fleet_env(redis_server, "tests.support.fleet_agents:deps_loader")
    fleet = Fleet(env, tmp_path_factory.mktemp("deps") / "logs")
    try:
        fleet.start_worker("forks", 2, pool="prefork")
        fleet.wait_ready()
        yield PoolFleet("prefork", fleet, env, ["forks"])
    finally:
        fleet.stop()


def test_each_prefork_child_builds_its_own_deps_like_an_embedded_run(
    deps_fleet: PoolFleet, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    client = redis_server.client()
    client.delete("e2e:deps-built")
    runner = deps_fleet.runner(monkeypatch)
    # When six turns run on a prefork worker with two children
    ids = [runner.start("e2e-deps", f"who {i}").id for i in range(6)]
    final = drive(runner, ids, timeout=60)
    seen = [json.loads(tool_results(s)[0]) for s in final.values()]
    # Then every turn's tool got its process's deps, built once in each child
    built = [int(pid) for pid in client.lrange("e2e:deps-built", 0, -1)]
    assert len(built) == len(set(built)), built
    assert {d["pid"] for d in seen} == set(built) and len(set(built)) == 2, (seen, built)
    assert {d["greeting"] for d in seen} == {DEPS_GREETING}
    # and an embedded run of the same agent gets the same deps, built in this process
    embedded = AgentRunner(agent_loader=deps_loader()).run("e2e-deps", "who here")
    here = json.loads(tool_results(embedded.state)[0])
    assert here["greeting"] == DEPS_GREETING and here["pid"] not in built
