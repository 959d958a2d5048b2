"""The order-support example: agents, tools and an offline demo model.

Used by ``make demo``, the fleet demo and tests. The demo model is deterministic: it looks
at the conversation so far and makes the next move a real model would make.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from runner_core import (
    Agent,
    AgentPlanningPolicy,
    AgentToolContext,
    AiMessage,
    ChatModel,
    FunctionModel,
    InMemoryAgentLoader,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolError,
    ToolMessage,
    Usage,
    tool,
)

ORDERS: dict[str, dict[str, Any]] = {
    "1001": {
        "id": "1001",
        "item": "espresso machine",
        "price": 249.0,
        "status": "delivered",
        "note": "customer reports a cracked water tank",
    },
    "1002": {"id": "1002", "item": "coffee grinder", "price": 89.0, "status": "shipped"},
}


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by id."""
    order = ORDERS.get(order_id)
    if order is None:
        raise ToolError(f"no order {order_id}")
    return order


@tool(requires_approval=True)
def refund(order_id: str, amount: float, reason: str) -> dict[str, Any]:
    """Refund an amount on an order (a human must approve)."""
    # The idempotency key is stable across retries and workers: a payment API dedupes on it.
    key = AgentToolContext.current().idempotency_key
    refund_id = "R-" + hashlib.sha256(key.encode()).hexdigest()[:10]
    return {
        "order_id": order_id,
        "refunded": amount,
        "reason": reason,
        "refund_id": refund_id,
    }


@tool
def ship_replacement(order_id: str) -> dict[str, Any]:
    """Ship a replacement item; asks the customer for the delivery address."""
    ctx = AgentToolContext.current()
    address = ctx.request_user_input(
        "Where should the replacement go?",
        schema={
            "type": "object",
            "required": ["street", "city"],
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string"},
                "zip": {"type": "string"},
            },
        },
    )
    ctx.report_progress("label printed", 0.5)
    return {"order_id": order_id, "shipment": "S-" + order_id, "to": address}


def _tokens(request: ModelRequest) -> int:
    return sum(len(json.dumps(m.model_dump(mode="json"))) for m in request.messages) // 4


def _tool_results(request: ModelRequest) -> dict[str, str]:
    return {m.name: m.content for m in request.messages if isinstance(m, ToolMessage)}


def support_model(request: ModelRequest) -> ModelResponse:
    """The offline order-support model: look up, refund, replace, delegate a report, answer."""
    done = _tool_results(request)
    if "lookup_order" not in done:
        calls = [ToolCall(id="call_lookup", name="lookup_order", arguments={"order_id": "1001"})]
    elif "refund" not in done:
        calls = [
            ToolCall(
                id="call_refund",
                name="refund",
                arguments={"order_id": "1001", "amount": 249.0, "reason": "cracked water tank"},
            ),
        ]
    elif "ship_replacement" not in done:
        # after the refund: a call that needs no approval would otherwise run (and ask for
        # the address) before the refund's approval, the calls of one response not waiting
        calls = [ToolCall(id="call_ship", name="ship_replacement", arguments={"order_id": "1001"})]
    elif "create_task_plan" not in done:
        calls = [
            ToolCall(
                id="call_plan",
                name="create_task_plan",
                arguments={
                    "goal": "Close the loop on damaged order 1001",
                    "tasks": [
                        {
                            "id": "report",
                            "agent": "report-writer",
                            "description": "Write a short incident report for the quality team "
                            "about order 1001 (cracked water tank, refunded, replaced).",
                            "expected_output": "three sentences",
                        }
                    ],
                },
            )
        ]
    else:
        plan = json.loads(done["create_task_plan"])
        report = plan["tasks"][0].get("result", "")
        text = (
            "Sorry about the cracked tank! I refunded 249.00 for order 1001 and a replacement "
            f"is on its way. The quality team has the incident report: {report}"
        )
        return ModelResponse(
            AiMessage(text), Usage(input_tokens=_tokens(request), output_tokens=60)
        )
    return ModelResponse(
        AiMessage(tool_calls=calls),
        Usage(input_tokens=_tokens(request), output_tokens=25 * len(calls)),
    )


def report_model(request: ModelRequest) -> ModelResponse:
    """The offline report writer."""
    text = (
        "Order 1001 (espresso machine) arrived with a cracked water tank. "
        "The customer was refunded in full and a replacement shipped. "
        "Recommend checking the packaging of this model with the carrier."
    )
    return ModelResponse(AiMessage(text), Usage(input_tokens=_tokens(request), output_tokens=45))


def make_model(offline: ChatModel) -> ChatModel:
    """The OpenAI-compatible adapter when the environment points at a server, else ``offline``."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        from runner_core.models import OpenAIChatModel

        return OpenAIChatModel()
    return offline


def order_agents() -> list[Agent]:
    """The order-support agent and the report writer it delegates to."""
    support = Agent(
        "order-support",
        make_model(FunctionModel(support_model)),
        instructions="You are a support agent for a coffee-gear shop. Look orders up before "
        "acting; refunds need approval; delegate the incident report.",
        tools=[lookup_order, refund, ship_replacement],
        sub_agents=["report-writer"],
        planning=AgentPlanningPolicy(max_tasks=3),
    )
    writer = Agent(
        "report-writer",
        make_model(FunctionModel(report_model)),
        instructions="You write short incident reports.",
    )
    return [support, writer]


def order_loader() -> InMemoryAgentLoader:
    """A loader holding the example agents (``AGENTWORKER_AGENT_LOADER`` can point here)."""
    return InMemoryAgentLoader(order_agents())
