"""A turn that waits on two tool approvals at once, for the resume, HTTP and console suites.

The step engine suspends once for every call of a response that needs approval, listing
them in ``suspension.metadata["calls"]``; ``unlisted`` rewrites such a turn (one commit) as
a snapshot stored before suspensions listed their calls.
"""

from __future__ import annotations

from typing import Any

from runner_core import (
    Agent,
    AgentRunner,
    AgentTurn,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    ModelRequest,
    ToolCall,
    ToolMessage,
    tool,
)

#: The two calls of the model's first response, both of a tool that needs approval.
CALLS = (
    ToolCall(id="r1", name="refund", arguments={"order_id": "1001", "amount": 20.0}),
    ToolCall(id="r2", name="refund", arguments={"order_id": "1002", "amount": 35.0}),
)


def refunds_agent(
    ledger: list[str], agent_id: str = "refunds", calls: tuple[ToolCall, ...] = CALLS
) -> Agent:
    """Asks for ``calls`` in one response, then answers ``Done.``; ``ledger`` gets order ids."""

    @tool(requires_approval=True)
    def refund(order_id: str, amount: float) -> str:
        """Refund an order (needs approval)."""
        ledger.append(order_id)
        return f"refunded {amount} on {order_id}"

    def answer(request: ModelRequest) -> AiMessage:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AiMessage("Done.")
        return AiMessage(tool_calls=list(calls))

    return Agent(agent_id, FunctionModel(answer), tools=[refund])


def listed_calls() -> list[dict[str, Any]]:
    """``suspension.metadata["calls"]`` of a turn waiting on both refunds."""
    return [{"call_id": c.id, "tool": c.name, "arguments": c.arguments} for c in CALLS]


def unlisted(runner: AgentRunner, turn: AgentTurn) -> AgentTurn:
    """``turn`` as a snapshot stored before suspensions listed their calls (no ``calls``)."""
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    suspension = turn.state.suspension
    assert suspension is not None
    metadata = {k: v for k, v in suspension.metadata.items() if k != "calls"}
    turn.state.suspension = suspension.model_copy(update={"metadata": metadata})
    runner.kernel.commit(turn)
    return runner.restore(turn.id)


def listing_both(turn: AgentTurn) -> AgentTurn:
    """``turn``, checked to wait for approval of both refunds in one suspension."""
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert turn.state.suspension is not None
    assert turn.state.suspension.metadata.get("calls") == listed_calls()
    return turn


def waiting_on_two(runner: AgentRunner, ledger: list[str], agent_id: str = "refunds") -> AgentTurn:
    """Run the refunds agent until it waits on both calls (one suspension listing them)."""
    return listing_both(runner.run(refunds_agent(ledger, agent_id), "refund orders 1001 and 1002"))
