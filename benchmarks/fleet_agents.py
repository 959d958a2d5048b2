"""Agents for the fleet benchmark (workers import ``benchmarks.fleet_agents:loader``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import redis

from runner_core import (
    Agent,
    AgentPlanningPolicy,
    AgentStepResult,
    AgentTurn,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    Middleware,
    ModelRequest,
    ToolCall,
    tool,
)

TOOL_CALLS = 10
CHILDREN = 100
IO_SECONDS = 0.005


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def wait_io(a: int) -> int:
    """Wait 5 ms, as a call to another service does."""
    time.sleep(IO_SECONDS)
    return a


def _ten_tools(request: ModelRequest) -> AiMessage:
    done = sum(1 for m in request.messages if m.role == "tool")
    if done < TOOL_CALLS:
        return AiMessage(
            tool_calls=[ToolCall(id=f"c{done}", name="add", arguments={"a": done, "b": 1})]
        )
    return AiMessage("done")


def _ten_waits(request: ModelRequest) -> AiMessage:
    done = sum(1 for m in request.messages if m.role == "tool")
    if done < TOOL_CALLS:
        return AiMessage(tool_calls=[ToolCall(id=f"c{done}", name="wait_io", arguments={"a": 1})])
    return AiMessage("done")


def _fan_out(request: ModelRequest) -> AiMessage:
    if not any(m.role == "tool" for m in request.messages):
        tasks = [
            {"id": f"t{i}", "description": "x", "agent": "bench-leaf"} for i in range(CHILDREN)
        ]
        return AiMessage(
            tool_calls=[
                ToolCall(
                    id="plan",
                    name="create_task_plan",
                    arguments={"goal": "fan out", "tasks": tasks},
                )
            ]
        )
    return AiMessage("all children done")


class StepClock(Middleware):
    """Records when each step of the parent starts (in Redis, for the benchmark to read)."""

    def wrap_step(
        self, turn: AgentTurn, call_next: Callable[[], AgentStepResult]
    ) -> AgentStepResult:
        """Record the start time, then step."""
        client = redis.Redis.from_url(os.environ["AGENTWORKER_REDIS_URL"])
        client.rpush(f"bench:steps:{turn.id}", repr(time.time()))
        return call_next()


def loader() -> InMemoryAgentLoader:
    """The benchmark agents."""
    return InMemoryAgentLoader(
        [
            Agent("bench-ten-tools", FunctionModel(_ten_tools), tools=[add]),
            Agent("bench-ten-waits", FunctionModel(_ten_waits), tools=[wait_io]),
            Agent(
                "bench-fan-out",
                FunctionModel(_fan_out),
                sub_agents=["bench-leaf"],
                planning=AgentPlanningPolicy(max_tasks=CHILDREN),
                middleware=[StepClock()],
            ),
            Agent("bench-leaf", FunctionModel(lambda r: AiMessage("leaf done"))),
        ]
    )
