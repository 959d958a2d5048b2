"""One suspension for every call of a response that needs approval."""

from __future__ import annotations

import time
from typing import Any

from runner_core import (
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurnStatus,
    AgentTurnStore,
    InMemoryAgentLoader,
    SuspensionType,
    tool,
)
from tests.support.scripts import EventLog, Script, agent, ask, call, content, tool_messages
from tests.support.toolruns import Ledger, resolve_approvals

S = AgentTurnStatus
E = AgentEventType


def tools(ledger: Ledger, seconds: float = 0.0) -> list[Any]:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund (a person approves)."""
        call_id = AgentToolContext.current().call_id
        ledger.start(call_id)
        time.sleep(seconds)
        ledger.end(call_id)
        return f"refunded {amount}"

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        ledger.start(AgentToolContext.current().call_id)
        return f"order {order}"

    return [refund, lookup]


def runner_on(store: AgentTurnStore, concurrency: int = 1) -> tuple[AgentRunner, EventLog]:
    runner = AgentRunner(
        turn_store=store,
        agent_loader=InMemoryAgentLoader(),
        policy=AgentExecutionPolicy(max_tool_concurrency=concurrency),
    )
    events = EventLog()
    runner.add_event_listener(events)
    return runner, events


RESPONSE = [
    call("refund", "r1", amount=5),
    call("lookup", "l1", order="o-1"),
    call("refund", "r2", amount=7),
]


def test_two_approvals_in_one_response_suspend_once_listing_both(store: AgentTurnStore) -> None:
    # Given a response with two calls needing approval around one that does not
    ledger = Ledger()
    runner, events = runner_on(store)

    # When the turn runs
    turn = runner.run(agent(Script(ask(*RESPONSE), then="done"), *tools(ledger)), "go")

    # Then the free call ran first, and the turn waits once for both approvals
    assert ledger.runs == ["l1"]
    assert turn.status is S.WAITING_FOR_APPROVAL
    s = turn.suspension
    assert s is not None and s.type is SuspensionType.TOOL_APPROVAL
    assert s.correlation_id == "r1" and s.message == "approve refund?"
    assert s.metadata == {
        "tool": "refund",
        "arguments": {"amount": 5},
        "calls": [
            {"call_id": "r1", "tool": "refund", "arguments": {"amount": 5}},
            {"call_id": "r2", "tool": "refund", "arguments": {"amount": 7}},
        ],
    }
    assert [c.id for c in turn.state.pending_tool_calls] == ["r1", "r2"]
    [requested] = events.of(E.TOOL_APPROVAL_REQUESTED)
    assert requested.data["correlation_id"] == "r1"
    assert [c["call_id"] for c in requested.data["calls"]] == ["r1", "r2"]
    assert len(events.of(E.TURN_SUSPENDED)) == 1
    assert store.load(turn.id).suspension == s


def test_approve_one_reject_one_completes_with_both_answers(store: AgentTurnStore) -> None:
    ledger = Ledger()
    runner, _ = runner_on(store)
    script = Script(ask(*RESPONSE), then="done")
    turn = runner.run(agent(script, *tools(ledger)), "go")

    resolve_approvals(store, turn.id, approved=["r2"], rejected={"r1": "too much"})
    done = runner.run_until_blocked(runner.restore(turn.id))

    assert done.status is S.COMPLETED
    assert ledger.runs == ["l1", "r2"]
    answers = {m.call_id: m for m in tool_messages(done.messages)}
    assert answers["r2"].content == "refunded 7"
    assert content(answers["r1"])["type"] == "tool_rejected"
    assert content(answers["r1"])["message"] == "too much"
    assert script.calls == 2
    assert done.state.approved_call_ids == [] and done.state.rejected_calls == {}


def test_a_partial_answer_keeps_the_turn_waiting_and_runs_nothing(
    store: AgentTurnStore,
) -> None:
    # Given the turn waits on r1 and r2
    ledger = Ledger()
    runner, events = runner_on(store)
    turn = runner.run(agent(Script(ask(*RESPONSE), then="done"), *tools(ledger)), "go")

    # When only the first is approved (the single-call command)
    again = runner.resume(turn.id, AgentResumeCommand.approve_tool("r1"))

    # Then the turn still waits with the same list, and r1 has not run
    assert ledger.runs == ["l1"]
    assert again.status is S.WAITING_FOR_APPROVAL
    s = again.suspension
    assert s is not None and s.correlation_id == "r1"
    assert [c["call_id"] for c in s.metadata["calls"]] == ["r1", "r2"]

    # And once r2 is rejected, r1 runs and the turn completes with both answers
    done = runner.resume(turn.id, AgentResumeCommand.reject_tool("r2", "no"))
    assert done.status is S.COMPLETED
    assert ledger.runs == ["l1", "r1"]
    answered = {m.call_id for m in tool_messages(done.messages)}
    assert {"r1", "r2"} <= answered
    assert len(events.of(E.TOOL_APPROVAL_REQUESTED)) == 1


def test_a_still_unresolved_call_keeps_the_turn_waiting(store: AgentTurnStore) -> None:
    ledger = Ledger()
    runner, _ = runner_on(store)
    turn = runner.run(agent(Script(ask(*RESPONSE), then="done"), *tools(ledger)), "go")

    resolve_approvals(store, turn.id, rejected={"r2": "no"})
    again = runner.run_until_blocked(runner.restore(turn.id))

    assert again.status is S.WAITING_FOR_APPROVAL
    assert again.suspension is not None and again.suspension.correlation_id == "r1"
    assert [c["call_id"] for c in again.suspension.metadata["calls"]] == ["r1"]
    assert ledger.runs == ["l1"]


def test_approved_calls_run_concurrently_after_the_resume(store: AgentTurnStore) -> None:
    ledger = Ledger()
    runner, _ = runner_on(store, concurrency=2)
    turn = runner.run(agent(Script(ask(*RESPONSE), then="done"), *tools(ledger, 0.2)), "go")

    resolve_approvals(store, turn.id, approved=["r1", "r2"])
    done = runner.run_until_blocked(runner.restore(turn.id))

    assert done.status is S.COMPLETED
    assert sorted(ledger.runs) == ["l1", "r1", "r2"] and ledger.overlap("r1", "r2")
