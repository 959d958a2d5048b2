"""Events: canonical order, data, immutability, sequence numbers, listener isolation."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runner_core import (
    AgentEvent,
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    ConcurrentModificationError,
    InMemoryAgentTurnStore,
    LeaseLostError,
    ModelError,
    RetryPolicy,
    Usage,
    tool,
)
from tests.support.scripts import EventLog, Script, agent, ask, call

E = AgentEventType


def committed(log: EventLog, turn_id: str) -> list[AgentEventType]:
    return [e.type for e in log.events if e.turn_id == turn_id and not e.provisional]


def test_canonical_order_for_a_plain_answer(runner: AgentRunner, events: EventLog) -> None:
    turn = runner.run(agent(Script("hello")), "hi")

    # committed events in the canonical order, numbered 1..n by their commits
    assert committed(events, turn.id) == [
        E.SNAPSHOT_SAVED,
        E.MODEL_COMPLETED,
        E.SNAPSHOT_SAVED,
        E.STEP_COMPLETED,
        E.TURN_COMPLETED,
    ]
    assert [e.sequence for e in events.events if not e.provisional] == list(range(1, 6))
    # the step's start and the live MODEL_STARTED went out at once, before the step's commit
    assert events.types(turn.id)[:4] == [
        E.SNAPSHOT_SAVED,
        E.TURN_STARTED,
        E.STEP_STARTED,
        E.MODEL_STARTED,
    ]
    [started] = events.of(E.MODEL_STARTED)
    assert started.provisional and started.attempt and started.sequence == 1
    final = events.events[-1]
    assert final.data["final_output"] == "hello"
    assert final.data["status"] == "COMPLETED"


def test_order_for_a_tool_turn(runner: AgentRunner, events: EventLog) -> None:
    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    turn = runner.run(agent(Script(ask(call("noop")), "done"), noop), "go")

    assert events.types(turn.id) == [
        E.SNAPSHOT_SAVED,
        E.TURN_STARTED,  # provisional: the start of the attempt, at once
        E.STEP_STARTED,  # provisional
        E.MODEL_STARTED,  # provisional: live, as the call begins
        E.MODEL_COMPLETED,
        E.SNAPSHOT_SAVED,  # the decision, phase TOOLS
        E.STEP_COMPLETED,
        E.STEP_STARTED,  # provisional
        E.TOOL_STARTED,  # provisional
        E.TOOL_COMPLETED,
        E.SNAPSHOT_SAVED,  # the tool result
        E.STEP_COMPLETED,
        E.STEP_STARTED,  # provisional
        E.MODEL_STARTED,  # provisional
        E.MODEL_COMPLETED,
        E.SNAPSHOT_SAVED,
        E.STEP_COMPLETED,
        E.TURN_COMPLETED,
    ]
    [started] = events.of(E.TOOL_STARTED)
    assert (started.data["call_id"], started.data["tool"], started.data["phase"]) == (
        "c1",
        "noop",
        "TOOLS",
    )
    [done] = events.of(E.TOOL_COMPLETED)
    assert (done.data["content"], done.data["is_error"]) == ("ok", False)


def test_suspension_event_follows_step_completed(runner: AgentRunner, events: EventLog) -> None:
    @tool(requires_approval=True)
    def refund() -> str:
        """Refund."""
        return "ok"

    turn = runner.run(agent(Script(ask(call("refund"))), refund), "go")

    types = events.types(turn.id)
    assert types[-4:] == [
        E.SNAPSHOT_SAVED,
        E.STEP_COMPLETED,
        E.TOOL_APPROVAL_REQUESTED,
        E.TURN_SUSPENDED,
    ]
    suspended = events.events[-1]
    assert suspended.data["status"] == "WAITING_FOR_APPROVAL"
    assert suspended.data["correlation_id"] == "c1"


def test_retry_event_follows_step_completed(runner: AgentRunner, events: EventLog) -> None:
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=1, initial_delay=0.01))
    script = Script(ModelError("busy", retryable=True), then="ok")

    turn = runner.run(agent(script), "go", options=AgentTurnOptions(policy=policy))

    assert events.types(turn.id)[-3:] == [E.SNAPSHOT_SAVED, E.STEP_COMPLETED, E.RETRY_SCHEDULED]
    retry = events.events[-1]
    assert retry.data["status"] == "RETRY_SCHEDULED"
    assert retry.data["next_runnable_at"] == turn.next_runnable_at

    events.events.clear()
    runner.resume(turn.id, AgentResumeCommand.continue_turn())
    assert committed(events, turn.id)[:3] == [E.SNAPSHOT_SAVED, E.TURN_RESUMED, E.MODEL_COMPLETED]
    assert events.types(turn.id)[:3] == [E.SNAPSHOT_SAVED, E.TURN_RESUMED, E.STEP_STARTED]
    assert events.types(turn.id)[-1] is E.TURN_COMPLETED


@pytest.mark.parametrize(
    ("reply", "terminal"),
    [
        ("ok", E.TURN_COMPLETED),
        (ModelError("no", retryable=False), E.TURN_FAILED),
    ],
)
def test_terminal_event_comes_last(
    runner: AgentRunner, events: EventLog, reply: object, terminal: AgentEventType
) -> None:
    turn = runner.run(agent(Script(reply)), "go")  # type: ignore[arg-type]

    types = events.types(turn.id)
    assert types[-1] is terminal
    assert types.count(terminal) == 1


def test_event_data_has_status_phase_step_count_and_is_immutable(
    runner: AgentRunner, events: EventLog
) -> None:
    turn = runner.run(agent(Script("hello")), "hi")

    for event in events.events:
        assert {"status", "phase", "step_count"} <= set(event.data)
        assert event.turn_id == turn.id
        assert event.root_turn_id == turn.id and event.parent_turn_id is None
        assert (event.agent_id, event.agent_version) == ("support", "1")
    started = events.of(E.MODEL_STARTED)[0]
    assert (started.data["status"], started.data["phase"], started.data["step_count"]) == (
        "RUNNING",
        "MODEL",
        1,
    )
    with pytest.raises(TypeError):
        started.data["status"] = "COMPLETED"  # type: ignore[index]
    with pytest.raises(AttributeError):
        started.type = E.TURN_FAILED  # type: ignore[misc]
    assert len({e.event_id for e in events.events}) == len(events.events)


def test_sequence_numbers_increase_within_a_turn(
    make_runner: Callable[..., AgentRunner],
) -> None:
    # Given a turn that suspends in runner A and is resumed by runner B
    @tool(requires_approval=True)
    def refund() -> str:
        """Refund."""
        return "ok"

    a, b = make_runner(), make_runner()
    log = EventLog()
    a.add_event_listener(log)
    b.add_event_listener(log)
    script = Script(ask(call("refund", "r1")), ask(call("refund", "r2")), "done")
    turn = a.run(agent(script, refund), "go")
    turn = b.resume(turn.id, AgentResumeCommand.approve_tool("r1"))
    turn = a.resume(turn.id, AgentResumeCommand.approve_tool("r2"))
    assert turn.status is AgentTurnStatus.COMPLETED

    # Then committed events are numbered 1, 2, 3, ... across both runners
    sequences = [e.sequence for e in log.events if not e.provisional]
    assert len(sequences) > 20
    assert sequences == list(range(1, len(sequences) + 1))
    # and a provisional event carries the number of the committed event before it
    for before, event in zip(log.events, log.events[1:], strict=False):
        if event.provisional:
            assert event.sequence == before.sequence


def test_listener_that_raises_does_not_break_the_run(runner: AgentRunner) -> None:
    # Given a failing listener between two good ones
    before, after = EventLog(), EventLog()
    failures: list[AgentEventType] = []

    def broken(event: AgentEvent) -> None:
        failures.append(event.type)
        raise RuntimeError("listener bug")

    runner.add_event_listener(before)
    runner.add_event_listener(broken)
    runner.add_event_listener(after)

    # When a turn runs
    turn = runner.run(agent(Script("hello")), "hi")

    # Then it completes and every listener saw every event
    assert turn.status is AgentTurnStatus.COMPLETED
    assert len(before.events) == 8
    assert before.types() == after.types() == failures


def test_removed_listener_gets_nothing(runner: AgentRunner) -> None:
    log = EventLog()
    runner.add_event_listener(log)
    runner.remove_event_listener(log)
    runner.remove_event_listener(log)  # absent: no error

    runner.run(agent(Script("hello")), "hi")

    assert log.events == []


def test_snapshot_saved_carries_the_new_version(runner: AgentRunner, events: EventLog) -> None:
    turn = runner.run(agent(Script("hello")), "hi")

    assert [e.data["version"] for e in events.of(E.SNAPSHOT_SAVED)] == [0, 1]
    assert turn.version == 1


def test_model_completed_reports_usage_and_tool_names(
    runner: AgentRunner, events: EventLog
) -> None:
    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    first = ask(call("noop"), usage=Usage(input_tokens=3, output_tokens=4))
    runner.run(agent(Script(first, "done"), noop), "go")

    completed = events.of(E.MODEL_COMPLETED)[0]
    assert (completed.data["input_tokens"], completed.data["output_tokens"]) == (3, 4)
    assert completed.data["tool_calls"] == ["noop"]


@pytest.mark.parametrize("refusal", ["stale version", "lost lease"])
def test_a_refused_commit_drops_the_events_waiting_for_it(
    runner: AgentRunner, store: InMemoryAgentTurnStore, events: EventLog, refusal: str
) -> None:
    # Given a turn whose next commit will be refused
    turn = runner.start(agent(Script("hello")), "hi")
    if refusal == "stale version":
        runner.save_snapshot(runner.restore(turn.id))  # another writer moved it on
    else:
        held = runner.claim(turn.id, "worker-A")
        assert held is not None and held.held_lease is not None
        store.claim(turn.id, "worker-B", store.now() + 60.0, 30_000)
        assert held.held_lease.renew() is False
        turn = held
    heard = len(events.events)

    # When events wait on both sides of its save and the commit is refused
    runner.kernel.emit(turn, E.TURN_RESUMED, command="before")
    runner.kernel.emit(turn, E.TURN_RESUMED, after_save=True, command="after")
    assert turn.pending_events and turn.pending_after_save
    with pytest.raises((ConcurrentModificationError, LeaseLostError)):
        runner.kernel.commit(turn)

    # Then both queues are empty and nobody heard them
    assert turn.pending_events == [] and turn.pending_after_save == []
    assert events.events[heard:] == []
    if refusal == "stale version":
        # and once the copy is current again, its next commit writes only its own event
        turn.state.version = store.load(turn.id).version
        runner.kernel.commit(turn)
        assert [e.type for e in events.events[heard:]] == [E.SNAPSHOT_SAVED]


def test_a_numbered_copy_keeps_every_other_field() -> None:
    # every field but the sequence, whatever fields an event has now (built field by field)
    from dataclasses import fields

    values = {f.name: f"<{f.name}>" for f in fields(AgentEvent)}
    values.update(provisional=True, sequence=3, occurred_at=1.5, type=E.TOOL_PROGRESS)
    event = AgentEvent(**values)  # type: ignore[arg-type]

    numbered = event.sequenced(7)

    assert numbered.sequence == 7 and event.sequence == 3
    assert {**values, "sequence": 7} == {f.name: getattr(numbered, f.name) for f in fields(event)}
