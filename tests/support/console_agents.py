"""Agents the console's browser tests run on a real fleet (AGENTWORKER_AGENT_LOADER).

An order-support turn with tools, one that fails, one that waits for a retry, a slow one
to watch live, a tree, one waiting for approval; and ``busy`` children that make many
events, for the page of a large tree.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from runner_core import (
    Agent,
    AgentPlanningPolicy,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    Usage,
    tool,
)

INSTRUCTIONS = "You are the order desk. Be brief."
#: Calls per response and responses per ``busy`` child (two committed events per call).
BUSY_CALLS, BUSY_ROUNDS = 50, 5


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """The order's status."""
    return {"order_id": order_id, "status": "shipped", "carrier": "DHL"}


@tool
def refund_quote(order_id: str, amount: float) -> str:
    """What a refund would pay."""
    return f"refund of {amount:.2f} for {order_id} possible"


@tool
def pause(seconds: float) -> str:
    """Waits, then says so."""
    time.sleep(seconds)
    return f"paused {seconds}"


@tool(requires_approval=True)
def cancel_order(order_id: str) -> str:
    """Cancels an order (asks first)."""
    return f"{order_id} cancelled"


@tool
def tick(n: int) -> int:
    """Returns its argument."""
    return n


def _results(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


def _support(request: ModelRequest) -> ModelResponse:
    done = len(_results(request))
    usage = Usage(input_tokens=1200 + done, output_tokens=40, cached_input_tokens=800)
    if done == 0:
        call = ToolCall(id="look", name="lookup_order", arguments={"order_id": "A-17"})
        return ModelResponse(AiMessage("Let me look.", tool_calls=(call,)), usage)
    if done == 1:
        args = {"order_id": "A-17", "amount": 19.5}
        call = ToolCall(id="quote", name="refund_quote", arguments=args)
        return ModelResponse(AiMessage(tool_calls=(call,)), usage)
    return ModelResponse(
        AiMessage("Order A-17 shipped with DHL; a refund of 19.50 is possible."), usage
    )


def _fails(request: ModelRequest) -> AiMessage:
    raise ModelError("the card was declined by the bank")


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["AGENTWORKER_REDIS_URL"])


def _retries(request: ModelRequest) -> AiMessage:
    """Overloaded the first time (counted in Redis), then answers."""
    first = request.messages[1] if request.messages[0].role == "system" else request.messages[0]
    if _redis().incr("console:retry:" + first.id) == 1:
        raise ModelError("overloaded, come back later", retryable=True, retry_after=600)
    return AiMessage("answered on the second attempt")


def _slow(request: ModelRequest) -> AiMessage:
    done = len(_results(request))
    if done < 3:
        call = ToolCall(id=f"p{done}", name="pause", arguments={"seconds": 1.0})
        return AiMessage(tool_calls=(call,))
    return AiMessage("slow work done")


def _planner(request: ModelRequest) -> AiMessage:
    results = _results(request)
    if not results:
        count = 20 if "busy" in str(request.messages[-1].model_dump()) else 2
        agent = "console-busy" if count == 20 else "console-support"
        tasks = [{"id": f"t{i}", "description": f"part {i}", "agent": agent} for i in range(count)]
        arguments = {"goal": "all parts", "tasks": tasks}
        return AiMessage(
            tool_calls=(ToolCall(id="plan", name="create_task_plan", arguments=arguments),)
        )
    return AiMessage("all parts done")


def _busy(request: ModelRequest) -> AiMessage:
    done = len(_results(request))
    if done >= BUSY_CALLS * BUSY_ROUNDS:
        return AiMessage("busy done")
    calls = tuple(
        ToolCall(id=f"k{done + i}", name="tick", arguments={"n": done + i})
        for i in range(BUSY_CALLS)
    )
    return AiMessage(tool_calls=calls)


def _approval(request: ModelRequest) -> AiMessage:
    results = _results(request)
    if not results:
        call = ToolCall(id="cx", name="cancel_order", arguments={"order_id": "A-17"})
        return AiMessage(tool_calls=(call,))
    return AiMessage("done: " + results[0].content)


def agents() -> list[Agent]:
    """Every agent of the console's tests."""
    planning = AgentPlanningPolicy(max_tasks=25)
    return [
        Agent(
            "console-support",
            FunctionModel(_support),
            instructions=INSTRUCTIONS,
            tools=[lookup_order, refund_quote],
            model_settings={"model": "desk-model"},
        ),
        Agent("console-fails", FunctionModel(_fails)),
        Agent("console-retry", FunctionModel(_retries)),
        Agent("console-slow", FunctionModel(_slow), tools=[pause]),
        Agent("console-approval", FunctionModel(_approval), tools=[cancel_order]),
        Agent(
            "console-tree",
            FunctionModel(_planner),
            sub_agents=["console-support", "console-busy"],
            planning=planning,
        ),
        Agent("console-busy", FunctionModel(_busy), tools=[tick], max_iterations=20),
    ]


def loader() -> InMemoryAgentLoader:
    """The loader the workers and the test's producer import."""
    return InMemoryAgentLoader(agents())
