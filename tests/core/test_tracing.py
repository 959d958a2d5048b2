"""Spans of a turn (runner_core._engine.tracing) with the SDK's in-memory exporter, in-process."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from runner_core import (  # noqa: E402
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    InMemoryAgentLoader,
    telemetry,
)
from runner_core._engine import tracing  # noqa: E402
from tests.support.observed import (  # noqa: E402
    MODEL,
    POLICY,
    ROOT,
    agents,
    collecting_spans,
    memory_fail_once,
)


@pytest.fixture()
def spans() -> Iterator[InMemorySpanExporter]:
    """The session's SDK provider and in-memory exporter, collecting during the test."""
    with collecting_spans() as exporter:
        yield exporter


def run_scenario() -> str:
    """The scenario of tests/observed_agents.py in one process; returns the root turn id."""
    runner = AgentRunner(agent_loader=InMemoryAgentLoader(agents(memory_fail_once())))
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("producer"):
        turn = runner.run(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    turn = runner.resume(turn.id, AgentResumeCommand.approve_tool("pay-1"))
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    time.sleep(0.1)
    turn = runner.restore(turn.id)
    runner.step(turn)
    runner.run_until_blocked(turn)
    turn = runner.restore(turn.id)
    assert turn.status is AgentTurnStatus.COMPLETED, turn.terminal_reason
    return turn.id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_one_trace_with_steps_model_and_tool_calls_and_children(
    spans: InMemorySpanExporter,
) -> None:
    # Given the scenario run in-process under a producer span
    root_id = run_scenario()
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}

    def parent(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None, span.name
        return by_id[span.parent.span_id]

    # Then every span is in the producer's trace
    producer = next(s for s in finished if s.name == "producer")
    assert {s.context.trace_id for s in finished} == {producer.context.trace_id}

    # and the root's invoke_agent span is the producer's child; every root step is its child
    invoke = [s for s in finished if s.name == f"invoke_agent {ROOT}"]
    assert len(invoke) == 1 and parent(invoke[0]) is producer
    steps = [s for s in finished if s.name == f"step {ROOT}"]
    assert all(parent(s) is invoke[0] for s in steps)
    assert all(attrs(s)["agentworker.turn.id"] == root_id for s in steps)
    ends = [attrs(s)["agentworker.turn.status"] for s in steps]
    assert "WAITING_FOR_APPROVAL" in ends and "RETRY_SCHEDULED" in ends
    assert "WAITING_FOR_CHILD" in ends and ends[-1] == "COMPLETED"

    # and the two lookups ran in one step, as execute_tool spans with the call ids
    lookups = [s for s in finished if s.name == "execute_tool lookup"]
    assert {attrs(s)["gen_ai.tool.call.id"] for s in lookups} == {"look-a", "look-b"}
    assert parent(lookups[0]) is parent(lookups[1])
    assert attrs(lookups[0])["gen_ai.operation.name"] == "execute_tool"
    assert attrs(lookups[0])["gen_ai.tool.name"] == "lookup"
    pay = [s for s in finished if s.name == "execute_tool pay"]
    assert len(pay) == 1 and parent(pay[0]).name == f"step {ROOT}"

    # and model calls are chat spans with the model, usage and finish reasons
    chats = [s for s in finished if s.name == f"chat {MODEL}"]
    ok = [s for s in chats if s.status.is_ok]
    failed = [s for s in chats if not s.status.is_ok]
    assert len(failed) == 1 and attrs(failed[0])["error.type"] == "ModelError"
    assert attrs(parent(failed[0]))["agentworker.turn.status"] == "RETRY_SCHEDULED"
    first = ok[0]
    assert attrs(first)["gen_ai.operation.name"] == "chat"
    assert attrs(first)["gen_ai.request.model"] == MODEL
    assert attrs(first)["gen_ai.usage.input_tokens"] == 10
    assert attrs(first)["gen_ai.usage.output_tokens"] == 3
    assert attrs(first)["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert "gen_ai.input.messages" not in attrs(first)  # contents are opt-in

    # and each child nests under the root's planning step (the one that started them)
    children = [s for s in finished if s.name == "invoke_agent obs-child"]
    assert len(children) == 2
    planning = parent(children[0])
    assert parent(children[1]) is planning
    assert attrs(planning)["agentworker.turn.status"] == "WAITING_FOR_CHILD"
    child_steps = [s for s in finished if s.name == "step obs-child"]
    assert len(child_steps) == 2
    assert {parent(s).context.span_id for s in child_steps} == {c.context.span_id for c in children}

    # and commits are events on the step spans
    assert any(e.name == "commit" for s in steps for e in s.events)


def test_contents_are_recorded_when_asked(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tracing.CAPTURE_CONTENT, "true")
    run_scenario()
    chat = next(s for s in spans.get_finished_spans() if s.name == f"chat {MODEL}")
    assert '"go"' in attrs(chat)["gen_ai.input.messages"]
    tool_span = next(s for s in spans.get_finished_spans() if s.name == "execute_tool lookup")
    assert attrs(tool_span)["gen_ai.tool.call.result"].startswith("value of")


def test_a_step_links_to_the_span_current_when_it_began(spans: InMemorySpanExporter) -> None:
    # Given a turn created in one trace, stepped under a span of another (a wake-up's)
    runner = AgentRunner(agent_loader=InMemoryAgentLoader(agents(memory_fail_once())))
    turn = runner.start(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span(
        "wake-up", context=trace.set_span_in_context(trace.INVALID_SPAN)
    ) as wake:
        runner.step(runner.restore(turn.id))
    step = next(s for s in spans.get_finished_spans() if s.name == f"step {ROOT}")
    # Then the step continues the turn's trace and links to the wake-up's span
    assert step.context.trace_id != wake.get_span_context().trace_id
    assert [link.context.span_id for link in step.links] == [wake.get_span_context().span_id]
    assert telemetry.trace_id(turn) == format(step.context.trace_id, "032x")


NO_SDK = """
from runner_core import AgentRunner, AgentTurnOptions, AgentResumeCommand, InMemoryAgentLoader
from runner_core import telemetry
from runner_core._engine import tracing
from tests.support.observed import POLICY, ROOT, agents, memory_fail_once
runner = AgentRunner(agent_loader=InMemoryAgentLoader(agents(memory_fail_once())))
turn = runner.run(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
turn = runner.resume(turn.id, AgentResumeCommand.approve_tool("pay-1"))
assert not tracing.enabled()
assert telemetry.TRACEPARENT not in turn.metadata, dict(turn.metadata)
assert turn.status.value == "RETRY_SCHEDULED", turn.status
print("ok")
"""


def test_without_an_sdk_nothing_is_traced_and_nothing_fails() -> None:
    out = subprocess.run([sys.executable, "-c", NO_SDK], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok" and not out.stderr


def test_a_traceparent_in_the_metadata_is_the_parent_when_no_span_is_current(
    spans: InMemorySpanExporter,
) -> None:
    runner = AgentRunner(agent_loader=InMemoryAgentLoader(agents(memory_fail_once())))
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    options = AgentTurnOptions(policy=POLICY, metadata={"traceparent": given})
    turn = runner.run(ROOT, "go", options=options)
    invoke = next(s for s in spans.get_finished_spans() if s.name == f"invoke_agent {ROOT}")
    assert format(invoke.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert invoke.parent is not None and format(invoke.parent.span_id, "016x") == "b7ad6b7169203331"
    assert turn.metadata["traceparent"] != given  # now the invoke_agent span's own context
    assert telemetry.trace_id(turn) == "0af7651916cd43dd8448eb211c80319c"


def test_without_the_opentelemetry_package_nothing_fails() -> None:
    # a None entry in sys.modules makes every import of the package fail
    code = "import sys; sys.modules['opentelemetry'] = None\n" + NO_SDK
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok" and not out.stderr
