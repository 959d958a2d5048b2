"""Events in causal order: a step's start reaches listeners before what happens inside it."""

from __future__ import annotations

import time

from runner_core import (
    AgentEvent,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    ModelError,
    RetryPolicy,
    tool,
)
from runner_core.events import AgentEventType
from tests.support.scripts import EventLog, Script, agent, ask, call

E = AgentEventType
STARTS = (E.TURN_STARTED, E.TURN_RESUMED, E.STEP_STARTED)


def _steps(events: list[AgentEvent]) -> list[list[AgentEvent]]:
    """The events of each step, from its STEP_STARTED to its STEP_COMPLETED."""
    steps: list[list[AgentEvent]] = []
    current: list[AgentEvent] | None = None
    for event in events:
        if event.type is E.STEP_STARTED:
            current = [event]
            steps.append(current)
        elif current is not None:
            current.append(event)
            if event.type is E.STEP_COMPLETED:
                current = None
    return steps


def _assert_causal(events: list[AgentEvent]) -> None:
    inner = {E.MODEL_STARTED, E.MODEL_COMPLETED, E.TOOL_STARTED, E.TOOL_COMPLETED}
    seen_step = False
    for event in events:
        if event.type is E.STEP_STARTED:
            seen_step = True
        if event.type in inner:
            assert seen_step, [e.type for e in events]
        if event.type is E.STEP_COMPLETED:
            seen_step = False


def test_the_turn_and_step_start_before_the_model_call(
    runner: AgentRunner, events: EventLog
) -> None:
    turn = runner.run(agent(Script("hello")), "hi")

    types = events.types(turn.id)
    assert types[:3] == [E.SNAPSHOT_SAVED, E.TURN_STARTED, E.STEP_STARTED]
    assert types.index(E.STEP_STARTED) < types.index(E.MODEL_STARTED)
    started, step = events.of(E.TURN_STARTED)[0], events.of(E.STEP_STARTED)[0]
    model = events.of(E.MODEL_STARTED)[0]
    # provisional like the call they announce: the same attempt, delivered at once
    assert started.provisional and step.provisional
    assert started.attempt == step.attempt == model.attempt is not None
    assert started.data["status"] == "RUNNING" and step.data["step_count"] == 1


def test_every_step_starts_before_its_inner_events(runner: AgentRunner, events: EventLog) -> None:
    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    turn = runner.run(agent(Script(ask(call("noop")), "done"), noop), "go")

    mine = [e for e in events.events if e.turn_id == turn.id]
    _assert_causal(mine)
    steps = _steps(mine)
    assert [s[1].type for s in steps] == [E.MODEL_STARTED, E.TOOL_STARTED, E.MODEL_STARTED]
    assert all(s[-1].type is E.STEP_COMPLETED for s in steps)


def test_a_retry_resumes_at_the_head_of_its_step(runner: AgentRunner, events: EventLog) -> None:
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=1, initial_delay=0.01))
    script = Script(ModelError("busy", retryable=True), then="ok")

    turn = runner.run(agent(script), "go", options=AgentTurnOptions(policy=policy))
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    time.sleep(0.05)  # the retry is due
    runner.step(turn)

    assert turn.status is AgentTurnStatus.COMPLETED
    types = events.types(turn.id)
    resumed = types.index(E.TURN_RESUMED)
    assert types[resumed + 1 : resumed + 3] == [E.STEP_STARTED, E.MODEL_STARTED]
    assert types.count(E.TURN_RESUMED) == 1
    _assert_causal([e for e in events.events if e.turn_id == turn.id])


def test_a_resume_command_resumes_once_after_its_save(
    runner: AgentRunner, events: EventLog
) -> None:
    @tool(requires_approval=True)
    def refund() -> str:
        """Refund."""
        return "ok"

    turn = runner.run(agent(Script(ask(call("refund")), "done"), refund), "go")
    before = len(events.events)
    turn = runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))

    assert turn.status is AgentTurnStatus.COMPLETED
    types = [e.type for e in events.events[before:] if e.turn_id == turn.id]
    assert types.count(E.TURN_RESUMED) == 1
    assert types[:3] == [E.SNAPSHOT_SAVED, E.TURN_RESUMED, E.STEP_STARTED]
    [resumed] = [e for e in events.events[before:] if e.type is E.TURN_RESUMED]
    assert not resumed.provisional  # the resume command's own commit recorded it
    _assert_causal([e for e in events.events if e.turn_id == turn.id])


def test_a_plain_answer_in_the_documented_order(runner: AgentRunner, events: EventLog) -> None:
    turn = runner.run(agent(Script("hello")), "hi")

    # the order the seed names for a plain answer, every event as a listener gets it
    assert events.types(turn.id) == [
        E.SNAPSHOT_SAVED,
        E.TURN_STARTED,
        E.STEP_STARTED,
        E.MODEL_STARTED,
        E.MODEL_COMPLETED,
        E.SNAPSHOT_SAVED,
        E.STEP_COMPLETED,
        E.TURN_COMPLETED,
    ]
