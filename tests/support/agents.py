"""Small agents several suites share."""

from __future__ import annotations

from runner_core import Agent, AiMessage, FunctionModel, ModelRequest, ToolCall, ToolMessage, tool


@tool(requires_approval=True)
def pay(amount: float) -> str:
    """Pay (needs approval)."""
    return f"paid {amount}"


def _pay_then_answer(request: ModelRequest) -> AiMessage:
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    if not results:
        return AiMessage(tool_calls=[ToolCall(id="c1", name="pay", arguments={"amount": 5})])
    return AiMessage("done: " + results[0].content)


def approval_agent() -> Agent:
    return Agent("pay-agent", FunctionModel(_pay_then_answer), tools=[pay])
