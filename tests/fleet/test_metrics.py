"""Metrics recorded by step_once, sweep_once and the metrics middleware (default registry)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import REGISTRY  # noqa: E402

from agentworker.fleet.stepping import step_once, sweep_once  # noqa: E402
from agentworker.ops import metrics  # noqa: E402
from runner_core import (  # noqa: E402
    Agent,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
)
from runner_core.models import ModelResponse, Usage  # noqa: E402
from runner_core.telemetry import model_name  # noqa: E402
from tests.support.observed import CHILD, MODEL, POLICY, ROOT, agents, memory_fail_once  # noqa: E402


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def drain(runner: AgentRunner, queue: list[str]) -> list[str]:
    """Step every dispatched turn, as workers would; returns the outcomes."""
    outcomes = []
    while queue:
        outcomes.append(step_once(runner, queue.pop(0), "w1"))
    return outcomes


def test_a_turn_on_workers_is_counted_timed_and_its_tokens_summed() -> None:
    # Given a runner as a worker builds it (metrics middleware) and a queue of wake-ups
    store = InMemoryAgentTurnStore()
    runner = AgentRunner(
        store,
        InMemoryAgentLoader(agents(memory_fail_once())),
        middleware=metrics.middleware(),
    )
    queue: list[str] = []
    runner.dispatcher = queue.append
    before = {
        "completed": value("agentworker_steps_total", outcome="COMPLETED"),
        "ended": value("agentworker_turns_ended_total", agent=ROOT, status="COMPLETED"),
        "tokens": value("agentworker_tokens_total", agent=ROOT, model=MODEL, direction="input"),
        "lookups": value("agentworker_tool_call_duration_seconds_count", agent=ROOT, tool="lookup"),
        "errors": value(
            "agentworker_model_call_errors_total", agent=ROOT, model=MODEL, error="ModelError"
        ),
        "latency": value("agentworker_wakeup_latency_seconds_count"),
        "not_runnable": value("agentworker_steps_total", outcome="not-runnable"),
        "due": value("agentworker_sweep_woken_total", kind="due"),
        "sweeps": value("agentworker_sweep_duration_seconds_count"),
    }

    # When the scenario runs: approval, a retry woken by a sweep, two children
    turn = runner.start(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
    drain(runner, queue)
    runner.submit_resume(turn.id, AgentResumeCommand.approve_tool("pay-1"))
    drain(runner, queue)
    assert runner.restore(turn.id).status is AgentTurnStatus.RETRY_SCHEDULED
    time.sleep(0.1)
    sweep_once(runner, lost_after=60.0)
    outcomes = drain(runner, queue)
    assert runner.restore(turn.id).status is AgentTurnStatus.COMPLETED
    step_once(runner, turn.id, "w1")  # a duplicate wake-up after the end

    # Then steps, turns, tokens, tool and model calls, wake-ups and sweeps are counted
    assert outcomes.count("COMPLETED") == 3  # two children and the root
    assert value("agentworker_steps_total", outcome="COMPLETED") - before["completed"] == 3
    assert value("agentworker_steps_total", outcome="not-runnable") - before["not_runnable"] == 1
    assert (
        value("agentworker_turns_ended_total", agent=ROOT, status="COMPLETED") - before["ended"]
        == 1
    )
    assert value("agentworker_turns_ended_total", agent=CHILD, status="COMPLETED") >= 2
    tokens = value("agentworker_tokens_total", agent=ROOT, model=MODEL, direction="input")
    assert tokens - before["tokens"] == 10 * 4  # four successful model calls of the root
    lookups = value("agentworker_tool_call_duration_seconds_count", agent=ROOT, tool="lookup")
    assert lookups - before["lookups"] == 2
    errors = value(
        "agentworker_model_call_errors_total", agent=ROOT, model=MODEL, error="ModelError"
    )
    assert errors - before["errors"] == 1
    assert value("agentworker_wakeup_latency_seconds_count") - before["latency"] >= 8
    assert value("agentworker_sweep_woken_total", kind="due") - before["due"] == 1
    assert value("agentworker_sweep_duration_seconds_count") - before["sweeps"] == 1
    assert value("agentworker_step_duration_seconds_count", agent=ROOT) > 0


def test_fenced_steps_are_counted_by_reason() -> None:
    store = InMemoryAgentTurnStore()
    runner = AgentRunner(store, InMemoryAgentLoader(agents(memory_fail_once())))
    turn = runner.start(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
    before = value("agentworker_fenced_steps_total", reason="lease_lost")

    # Given a worker whose lease is taken over in the middle of its step
    original = runner.step

    def stolen(t: object, *, release: bool = False) -> object:
        assert t.held_lease is not None  # type: ignore[attr-defined]
        t.held_lease.lost = True  # type: ignore[attr-defined]
        return original(t, release=release)  # type: ignore[arg-type]

    runner.step = stolen  # type: ignore[method-assign]
    assert step_once(runner, turn.id, "w1") == "fenced"
    assert value("agentworker_fenced_steps_total", reason="lease_lost") - before == 1


def test_turn_counts_come_from_the_memory_store() -> None:
    store = InMemoryAgentTurnStore()
    runner = AgentRunner(store, InMemoryAgentLoader(agents(memory_fail_once())))
    runner.start(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
    waiting = runner.run(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
    assert waiting.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    collector = metrics.TurnCountCollector(store)
    [family] = list(collector.collect())
    counts = {s.labels["state"]: s.value for s in family.samples}
    assert counts == {
        "live": 2,
        "runnable": 1,
        "leased": 0,
        "waiting_for_children": 0,
        "quarantined": 0,
    }


def test_the_exposition_names_every_metric_with_its_labels() -> None:
    metrics.step_done("COMPLETED", None, 0.01)
    metrics.webhook_delivered("delivered")
    metrics.queue_depth("agentworker.steps", 3)
    text, content_type = metrics.exposition(metrics.registry(InMemoryAgentTurnStore()))
    body = text.decode()
    assert content_type.startswith("text/plain")
    for name in metric_names():
        assert f"# TYPE {name} " in body, name
    assert 'agentworker_queue_depth{queue="agentworker.steps"} 3.0' in body
    assert 'agentworker_turns{state="live"} 0.0' in body


def metric_names() -> list[str]:
    """Every metric family name this package exposes (docs/observability.md lists them)."""
    m = metrics.metrics()
    assert m is not None
    families = [family for metric in vars(m).values() for family in metric.describe()]
    names = [f.name + ("_total" if f.type == "counter" else "") for f in families]
    return [*names, "agentworker_turns"]


@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_turn_counts_from_the_redis_indexes(tmp_path: Path, kind: str) -> None:
    from stores import RedisAgentTurnStore
    from stores.redis.counts import turn_counts
    from tests.support.cluster import LocalCluster
    from tests.support.servers import RedisServer

    server = RedisServer(tmp_path).start() if kind == "redis" else LocalCluster(tmp_path).start()
    try:
        store = RedisAgentTurnStore(server.url, namespace="counts")
        runner = AgentRunner(store, InMemoryAgentLoader(agents(memory_fail_once())))
        runner.start(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
        waiting = runner.run(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
        assert waiting.status is AgentTurnStatus.WAITING_FOR_APPROVAL
        assert turn_counts(store) == {
            "live": 2,
            "runnable": 1,
            "leased": 0,
            "waiting_for_children": 0,
            "quarantined": 0,
        }
        assert metrics.store_turn_counts(store) == turn_counts(store)
        store.close()
    finally:
        server.stop()


def test_webhook_delivery_attempts_are_counted_by_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentworker.notify.webhooks
    from agentworker.wiring import create_app

    class Outbox:
        def deliver(self, message_id: str) -> str:
            return "retry" if message_id == "m2" else "delivered"

    monkeypatch.setattr(agentworker.notify.webhooks, "outbox_of", lambda *a, **k: Outbox())
    monkeypatch.setenv("AGENTWORKER_REDIS_URL", "redis://127.0.0.1:1/0")  # never connected
    task = create_app().tasks["agentworker.deliver_webhook"]
    before = value("agentworker_webhook_deliveries_total", outcome="delivered")
    retries = value("agentworker_webhook_deliveries_total", outcome="retry")
    assert [task.run("m1"), task.run("m2"), task.run("m3")] == ["delivered", "retry", "delivered"]
    assert value("agentworker_webhook_deliveries_total", outcome="delivered") - before == 2
    assert value("agentworker_webhook_deliveries_total", outcome="retry") - retries == 1


def test_sync_tool_threads_abandoned_are_counted_after_each_step() -> None:
    from runner_core._engine import aio

    store = InMemoryAgentTurnStore()
    runner = AgentRunner(store, InMemoryAgentLoader(agents(memory_fail_once())))
    queue: list[str] = []
    runner.dispatcher = queue.append
    step_once(runner, runner.start(ROOT, "go").id, "w1")  # what was abandoned before: counted
    before = value("agentworker_abandoned_tool_threads_total")
    # When a timeout abandons two threads in this process, then a step ends
    aio.ABANDONED_THREADS.add(2)
    step_once(runner, runner.start(ROOT, "again").id, "w1")
    step_once(runner, runner.start(ROOT, "once more").id, "w1")
    # Then the two are counted, once
    assert value("agentworker_abandoned_tool_threads_total") - before == 2


def test_a_lease_cut_at_the_backstop_is_counted() -> None:
    import threading

    from runner_core import Agent, AiMessage, FunctionModel, ModelRequest
    from runner_core.worker import on_lease_cut

    release = threading.Event()

    def hangs(request: ModelRequest) -> AiMessage:
        release.wait(10)
        return AiMessage("late")

    on_lease_cut(metrics.lease_cut)  # as make_runner does
    runner = AgentRunner(
        InMemoryAgentTurnStore(),
        InMemoryAgentLoader([Agent("hangs", FunctionModel(hangs))]),
        step_time_limit=0.1,
    )
    before = value("agentworker_leases_cut_total")
    fenced_before = value("agentworker_fenced_steps_total", reason="lease_cut")
    turn = runner.start("hangs", "go")
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(step_once(runner, turn.id, "w1")))
    worker.start()
    deadline = time.monotonic() + 5
    while value("agentworker_leases_cut_total") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    release.set()
    worker.join(5)
    assert value("agentworker_leases_cut_total") - before == 1
    assert outcome == ["fenced"]
    assert value("agentworker_fenced_steps_total", reason="lease_cut") - fenced_before == 1


def test_cached_input_and_reasoning_tokens_have_their_own_counters() -> None:
    usage = Usage(input_tokens=100, output_tokens=60, cached_input_tokens=80, reasoning_tokens=50)
    agent = Agent("parts", FunctionModel(lambda r: ModelResponse(AiMessage("hi"), usage)))
    runner = AgentRunner(
        InMemoryAgentTurnStore(), InMemoryAgentLoader([agent]), middleware=metrics.middleware()
    )
    model = model_name(agent.model, {})
    names = ("agentworker_cached_input_tokens_total", "agentworker_reasoning_tokens_total")
    before = [value(name, agent="parts", model=model) for name in names]

    runner.run("parts", "go")

    after = [value(name, agent="parts", model=model) for name in names]
    assert [a - b for a, b in zip(after, before, strict=True)] == [80, 50]
    output = value("agentworker_tokens_total", agent="parts", model=model, direction="output")
    assert output >= 60  # the output direction still holds the reasoning part
