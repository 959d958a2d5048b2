"""Committed model and tool events carry when the call started and how long it took."""

from __future__ import annotations

import time

from runner_core import AgentEventType, AgentRunner, ToolError, Usage, tool
from tests.support.scripts import EventLog, Script, agent, ask, call

E = AgentEventType


@tool
def slow() -> str:
    """Takes a moment."""
    time.sleep(0.05)
    return "ok"


@tool
def broken() -> str:
    """Always refuses."""
    raise ToolError("no stock")


def test_model_completed_has_start_duration_model_and_every_token_count(
    runner: AgentRunner, events: EventLog
) -> None:
    usage = Usage(input_tokens=10, output_tokens=5, cached_input_tokens=4, reasoning_tokens=2)
    before = time.time()
    runner.run(agent(Script(ask(call("slow"), usage=usage), "done"), slow), "go")

    data = events.of(E.MODEL_COMPLETED)[0].data
    assert before - 1 <= data["started_at"] <= time.time()
    assert data["duration_ms"] >= 0
    assert (data["cached_input_tokens"], data["reasoning_tokens"]) == (4, 2)
    assert data["model"] == "Script"


def test_tool_events_have_start_and_duration(runner: AgentRunner, events: EventLog) -> None:
    script = Script(ask(call("slow", "a"), call("broken", "b")), "done")
    runner.run(agent(script, slow, broken), "go")

    done = events.of(E.TOOL_COMPLETED)[0].data
    failed = events.of(E.TOOL_FAILED)[0].data
    assert done["duration_ms"] >= 50
    assert failed["started_at"] >= done["started_at"]
    assert "duration_ms" in failed
    assert all(not e.provisional for e in events.of(E.TOOL_COMPLETED))
