"""Approvals (require, reject, deny) and forms (request_user_input)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner_core import (
    AgentEventType,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurnPhase,
    AgentTurnStatus,
    ApprovalDecision,
    InMemoryAgentTurnStore,
    SuspensionType,
    ToolCall,
    tool,
)
from tests.support.scripts import EventLog, Script, agent, ask, call, content, tool_messages


def refund_tool(ledger: list[str]) -> Any:
    @tool(requires_approval=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order (needs approval)."""
        ledger.append(AgentToolContext.current().idempotency_key)
        return f"refunded {amount} on {order_id}"

    return refund


def test_approval_from_a_second_runner_runs_the_side_effect_once(
    store: InMemoryAgentTurnStore, make_runner: Callable[..., AgentRunner]
) -> None:
    # Given runner A ran a turn until the refund waits for approval
    ledger: list[str] = []
    script = Script(ask(call("refund", "r1", order_id="1001", amount=20.0)), "Refunded.")
    runner_a = make_runner()
    turn = runner_a.run(agent(script, refund_tool(ledger)), "refund 1001")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert turn.phase is AgentTurnPhase.TOOLS
    suspension = turn.suspension
    assert suspension is not None
    assert (suspension.type, suspension.correlation_id) == (SuspensionType.TOOL_APPROVAL, "r1")
    assert suspension.metadata == {
        "tool": "refund",
        "arguments": {"order_id": "1001", "amount": 20.0},
        "calls": [
            {"call_id": "r1", "tool": "refund", "arguments": {"order_id": "1001", "amount": 20.0}}
        ],
    }
    assert ledger == []

    # When runner B (same store and loader, another process in real life) approves
    runner_b = make_runner()
    done = runner_b.resume(turn.id, AgentResumeCommand.approve_tool("r1").with_metadata(by="u-7"))

    # Then the turn completes and the refund ran exactly once, with the stable key
    assert done.status is AgentTurnStatus.COMPLETED
    assert done.final_output == "Refunded."
    assert ledger == [f"{turn.id}:r1"]
    assert done.tool_call_count == 1
    assert script.calls == 2
    [log] = done.state.resume_log
    assert (log["kind"], log["correlation_id"], log["metadata"]) == (
        "APPROVE_TOOL",
        "r1",
        {"by": "u-7"},
    )
    assert done.state.approved_call_ids == []
    # and runner A's stale object cannot step it again
    assert runner_a.restore(turn.id).status is AgentTurnStatus.COMPLETED


def test_approval_events(runner: AgentRunner, events: EventLog) -> None:
    ledger: list[str] = []
    script = Script(ask(call("refund", "r1", order_id="1", amount=1.0)))

    turn = runner.run(agent(script, refund_tool(ledger)), "refund")

    [requested] = events.of(AgentEventType.TOOL_APPROVAL_REQUESTED)
    assert requested.data["correlation_id"] == "r1"
    assert requested.data["tool"] == "refund"
    assert events.types(turn.id)[-3:] == [
        AgentEventType.STEP_COMPLETED,
        AgentEventType.TOOL_APPROVAL_REQUESTED,
        AgentEventType.TURN_SUSPENDED,
    ]


def test_reject_tool_tells_the_model_and_never_runs_it(runner: AgentRunner) -> None:
    ledger: list[str] = []
    script = Script(ask(call("refund", "r1", order_id="1001", amount=20.0)), "OK, no refund.")
    turn = runner.run(agent(script, refund_tool(ledger)), "refund 1001")

    done = runner.resume(turn.id, AgentResumeCommand.reject_tool("r1", reason="too large"))

    assert done.status is AgentTurnStatus.COMPLETED
    assert done.final_output == "OK, no refund."
    assert ledger == []
    [answer] = tool_messages(done.messages)
    assert answer.is_error and answer.call_id == "r1"
    assert content(answer) == {
        "error": True,
        "type": "tool_rejected",
        "message": "too large",
        "tool": "refund",
    }
    assert script.requests[1].messages[-1] == answer
    assert done.tool_call_count == 0
    assert done.state.rejected_calls == {}


def test_deny_policy_answers_without_asking_anyone(runner: AgentRunner, events: EventLog) -> None:
    ran: list[str] = []
    asked: list[ToolCall] = []

    def policy(turn: Any, tool_call: ToolCall) -> ApprovalDecision:
        asked.append(tool_call)
        return ApprovalDecision.DENY

    @tool(requires_approval=policy)
    def wipe(table: str) -> str:
        """Drop a table."""
        ran.append(table)
        return "dropped"

    script = Script(ask(call("wipe", table="orders")), "I may not do that.")

    turn = runner.run(agent(script, wipe), "wipe orders")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert ran == []
    assert [c.arguments for c in asked] == [{"table": "orders"}]
    [answer] = tool_messages(turn.messages)
    body = content(answer)
    assert (body["type"], body["tool"]) == ("tool_denied", "wipe")
    assert answer.is_error
    assert AgentEventType.TURN_SUSPENDED not in events.types()


def test_policy_can_allow_or_require_per_call(runner: AgentRunner) -> None:
    ran: list[float] = []

    def large_needs_approval(turn: Any, tool_call: ToolCall) -> ApprovalDecision:
        big = tool_call.arguments["amount"] > 100
        return ApprovalDecision.REQUIRE if big else ApprovalDecision.ALLOW

    @tool(requires_approval=large_needs_approval)
    def pay(amount: float) -> str:
        """Pay."""
        ran.append(amount)
        return "paid"

    script = Script(ask(call("pay", "p1", amount=5.0)), ask(call("pay", "p2", amount=500.0)))
    turn = runner.run(agent(script, pay), "pay")

    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert turn.suspension is not None and turn.suspension.correlation_id == "p2"
    assert ran == [5.0]


def test_form_request_suspends_and_reruns_the_tool_with_the_data(
    runner: AgentRunner, events: EventLog
) -> None:
    # Given a tool that needs a shipping address from the user
    received: list[Any] = []
    schema = {"type": "object", "properties": {"street": {"type": "string"}}}

    @tool
    def ship(order_id: str) -> str:
        """Ship an order."""
        ctx = AgentToolContext.current()
        received.append(ctx.submitted_input)
        address = ctx.request_user_input("Where to?", schema=schema)
        return f"{order_id} ships to {address['street']}"

    script = Script(ask(call("ship", "s1", order_id="1001")), "On its way.")

    # When the turn runs, it waits for the user
    turn = runner.run(agent(script, ship), "ship 1001")
    assert turn.status is AgentTurnStatus.WAITING_FOR_USER
    suspension = turn.suspension
    assert suspension is not None
    assert (suspension.type, suspension.correlation_id, suspension.message) == (
        SuspensionType.USER_INPUT,
        "s1",
        "Where to?",
    )
    assert suspension.metadata == {"tool": "ship", "schema": schema}
    assert [c.id for c in turn.pending_tool_calls] == ["s1"]
    [requested] = events.of(AgentEventType.TOOL_INPUT_REQUESTED)
    assert requested.data["schema"] == schema

    # Then the submitted form re-runs the tool, which reads it
    done = runner.resume(turn.id, AgentResumeCommand.user_input({"street": "Main 1"}, "s1"))
    assert done.status is AgentTurnStatus.COMPLETED
    assert received == [None, {"street": "Main 1"}]
    [answer] = tool_messages(done.messages)
    assert answer.content == "1001 ships to Main 1"
    assert done.tool_call_count == 1
    assert done.state.submitted_inputs == {}


def test_user_input_without_call_id_fits_the_waiting_call(runner: AgentRunner) -> None:
    @tool
    def confirm() -> str:
        """Ask yes/no."""
        return str(AgentToolContext.current().request_user_input("sure?"))

    turn = runner.run(agent(Script(ask(call("confirm")), "fine"), confirm), "go")

    done = runner.resume(turn.id, AgentResumeCommand.user_input("yes"))

    assert done.status is AgentTurnStatus.COMPLETED
    assert [m.content for m in tool_messages(done.messages)] == ["yes"]


def test_two_approvals_of_one_response_wait_for_both_answers(runner: AgentRunner) -> None:
    ledger: list[str] = []
    script = Script(
        ask(
            call("refund", "r1", order_id="1", amount=1.0),
            call("refund", "r2", order_id="2", amount=2.0),
        ),
        "both refunded",
    )
    turn = runner.run(agent(script, refund_tool(ledger)), "refund both")

    turn = runner.resume(turn.id, AgentResumeCommand.approve_tool("r1"))
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert turn.suspension is not None and turn.suspension.correlation_id == "r1"
    assert [c["call_id"] for c in turn.suspension.metadata["calls"]] == ["r1", "r2"]
    assert ledger == []  # nothing runs until every call of the response is answered

    turn = runner.resume(turn.id, AgentResumeCommand.approve_tool("r2"))
    assert turn.status is AgentTurnStatus.COMPLETED
    assert ledger == [f"{turn.id}:r1", f"{turn.id}:r2"]
