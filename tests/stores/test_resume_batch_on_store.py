"""Answering a suspension of several tool calls, part by part, on every store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from runner_core import (
    AgentEventType,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnStatus,
    AgentTurnStore,
    InMemoryAgentLoader,
    InvalidResumeError,
)
from tests.support.approvals import waiting_on_two
from tests.support.scripts import tool_messages

S = AgentTurnStatus


@pytest.fixture
def make_runner(make_store: Callable[[], AgentTurnStore]) -> Callable[[], AgentRunner]:
    """Runners on separate store clients (separate processes in real life), one loader."""
    loader = InMemoryAgentLoader()
    return lambda: AgentRunner(turn_store=make_store(), agent_loader=loader)


def test_partial_answers_from_two_runners(make_runner: Callable[[], AgentRunner]) -> None:
    # Given a turn waiting on r1 and r2, suspended by runner A
    ledger: list[str] = []
    first = make_runner()
    turn = waiting_on_two(first, ledger)
    waiting = first.store.load(turn.id)

    # When runner B approves r1: stored, still waiting on r2, a wake-up would be useless
    second = make_runner()
    partial = second.submit_resume(turn.id, AgentResumeCommand.approve_tools(["r1"]))
    stored = first.store.load(turn.id)
    assert partial.status is S.WAITING_FOR_APPROVAL
    assert (stored.status, stored.suspension) == (S.WAITING_FOR_APPROVAL, waiting.suspension)
    assert stored.approved_call_ids == ["r1"] and stored.version == waiting.version + 1
    assert first.store.wakeups(first.store.now(), 0.0).lost == []

    # And a refused answer (r1 again) changes nothing stored
    with pytest.raises(InvalidResumeError, match="'r1' is already approved"):
        first.resume(turn.id, AgentResumeCommand.reject_tools({"r1": "no", "r2": "no"}))
    assert first.store.load(turn.id).model_dump() == stored.model_dump()

    # When runner A rejects r2, the turn runs to the end with both answers
    done = first.resume(turn.id, AgentResumeCommand.reject_tools({"r2": "too large"}))
    assert done.status is S.COMPLETED and ledger == ["1001"]
    assert [m.call_id for m in tool_messages(done.messages)] == ["r1", "r2"]
    log = first.store.load(turn.id).resume_log
    assert [(e["kind"], e["call_ids"]) for e in log] == [
        ("APPROVE_TOOLS", ["r1"]),
        ("REJECT_TOOLS", ["r2"]),
    ]


def test_the_partial_answer_is_a_committed_event(make_runner: Callable[[], AgentRunner]) -> None:
    runner = make_runner()
    turn = waiting_on_two(runner, [])

    runner.resume(turn.id, AgentResumeCommand.reject_tool("r2", "no"))

    events = runner.store.read_events(turn.root_turn_id, 100, newest=True)
    recorded = [e for e in events if e.type is AgentEventType.TOOL_APPROVAL_RECORDED]
    assert [e.data["waiting"] for e in recorded] == [["r1"]]
    assert not any(
        e.type is AgentEventType.TURN_RESUMED and e.sequence > recorded[0].sequence for e in events
    )


def test_an_awaited_partial_answer_wakes_nothing(
    make_runner: Callable[[], AgentRunner],
) -> None:
    # Given a turn waiting on r1 and r2, and a runner whose dispatcher records wake-ups
    ledger: list[str] = []
    runner = make_runner()
    turn = waiting_on_two(runner, ledger)
    woken: list[str] = []
    runner.dispatcher = woken.append
    resumed: list[AgentEventType] = []
    runner.add_event_listener(lambda e: resumed.append(e.type))

    # When r1 is approved from an event loop: stored, still waiting, nobody woken
    command = AgentResumeCommand.approve_tools(["r1"])
    partial = asyncio.run(runner.asubmit_resume(turn.id, command))
    assert partial.status is S.WAITING_FOR_APPROVAL
    assert runner.store.load(turn.id).approved_call_ids == ["r1"]
    assert woken == [] and AgentEventType.TURN_RESUMED not in resumed
    assert AgentEventType.TOOL_APPROVAL_RECORDED in resumed

    # And the last answer resumes it and sends the one wake-up
    last = asyncio.run(runner.asubmit_resume(turn.id, AgentResumeCommand.approve_tools(["r2"])))
    assert last.status is S.RUNNING and woken == [turn.id]
    assert AgentEventType.TURN_RESUMED in resumed
