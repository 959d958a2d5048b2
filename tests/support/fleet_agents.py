"""Agents for the end-to-end tests; workers load them via AGENTWORKER_AGENT_LOADER.

Side effects are recorded in Redis (the test's own server) so the test process can check
that no tool ran twice for one idempotency key, whichever worker ran it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from typing import Any

import redis
from celery.exceptions import SoftTimeLimitExceeded

from runner_core import (
    Agent,
    AgentPlanningPolicy,
    AgentToolContext,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    Middleware,
    ModelError,
    ModelRequest,
    ToolCall,
    ToolMessage,
    tool,
)
from tests.support.approvals import refunds_agent

PREFIX = "e2e:"


def _redis() -> redis.Redis:
    from stores.redis.connection import make_client  # a cluster client for redis+cluster://

    return make_client(os.environ["AGENTWORKER_REDIS_URL"])


def executions(client: redis.Redis) -> dict[str, int]:
    """Idempotency key -> how many times a recorded tool ran with it."""
    keys = client.keys(PREFIX + "exec:*")
    return {k.decode()[len(PREFIX) + 5 :]: int(client.get(k) or 0) for k in keys}


def _record() -> None:
    _redis().incr(PREFIX + "exec:" + AgentToolContext.current().idempotency_key)


@tool
def record(tag: str) -> str:
    """Record a side effect."""
    _record()
    return f"recorded {tag}"


@tool
def slow_record(tag: str, seconds: float) -> str:
    """Record a side effect after a while (a worker can be killed meanwhile)."""
    _redis().set(PREFIX + "slow-started:" + AgentToolContext.current().turn_id, "1")
    time.sleep(seconds)
    _record()
    return f"recorded {tag}"


_CHARGE = """
redis.call('INCR', KEYS[1])
if redis.call('SET', KEYS[2], '1', 'NX') then redis.call('INCR', KEYS[3]) end
"""


@tool
def charge(amount: float) -> str:
    """An idempotent side effect: applied once per idempotency key, however often it runs."""
    key = AgentToolContext.current().idempotency_key
    # One script, so a worker killed mid-call applies the charge wholly or not at all (two
    # commands would leave "applied" set and the effect never counted)
    keys = [PREFIX + name + key for name in ("attempt:", "applied:", "effect:")]
    _redis().eval(_CHARGE, 3, *keys)
    time.sleep(0.05)  # long enough for a kill to land mid-tool now and then
    return f"charged {amount}"


@tool(requires_approval=True)
def pay(amount: float) -> str:
    """Pay (needs approval)."""
    _record()
    return f"paid {amount}"


@tool
def ask_address() -> str:
    """Ask the user for an address."""
    data = AgentToolContext.current().request_user_input("address?")
    _record()
    return f"shipping to {json.dumps(data)}"


def _tool_results(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


def _script(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """A model that makes ``calls`` one per response, then answers with the results."""

    def fn(request: ModelRequest) -> AiMessage:
        done = len(_tool_results(request))
        if done < len(calls):
            name, args = calls[done]
            return AiMessage(tool_calls=[ToolCall(id=f"c{done}", name=name, arguments=args)])
        return AiMessage("done: " + " | ".join(m.content for m in _tool_results(request)))

    return FunctionModel(fn)


def _flaky(request: ModelRequest) -> AiMessage:
    """Fails twice per turn (counted in Redis, so across workers), then answers."""
    first = request.messages[1] if request.messages[0].role == "system" else request.messages[0]
    n = _redis().incr(PREFIX + "flaky:" + first.id)
    if n <= 2:
        raise ModelError(f"overloaded (attempt {n})", retryable=True)
    return AiMessage(f"worked after {n - 1} failures")


def _planner(request: ModelRequest) -> AiMessage:
    if not _tool_results(request):
        tasks = [
            {"id": f"t{i}", "description": f"part {i}", "agent": "e2e-child"} for i in range(3)
        ]
        return AiMessage(
            tool_calls=[
                ToolCall(
                    id="plan",
                    name="create_task_plan",
                    arguments={"goal": "three parts", "tasks": tasks},
                )
            ]
        )
    plan = json.loads(_tool_results(request)[-1].content)
    return AiMessage("parts: " + ", ".join(t["status"] for t in plan["tasks"]))


def agents() -> list[Agent]:
    """Every e2e agent."""
    return [
        Agent(
            "e2e-tools", _script(("record", {"tag": "a"}), ("record", {"tag": "b"})), tools=[record]
        ),
        Agent("e2e-approval", _script(("pay", {"amount": 5.0})), tools=[pay]),
        refunds_agent([], "e2e-refunds"),  # two approvals in one response
        Agent("e2e-form", _script(("ask_address", {})), tools=[ask_address]),
        Agent("e2e-flaky", FunctionModel(_flaky)),
        Agent(
            "e2e-parent",
            FunctionModel(_planner),
            sub_agents=["e2e-child"],
            planning=AgentPlanningPolicy(max_tasks=5),
        ),
        Agent("e2e-child", _script(("record", {"tag": "child"})), tools=[record]),
        Agent(
            "e2e-charges",
            _script(*[("charge", {"amount": float(i)}) for i in range(5)]),
            tools=[charge],
        ),
        Agent(
            "e2e-slow",
            _script(("slow_record", {"tag": "s", "seconds": 1.5}), ("record", {"tag": "after"})),
            tools=[slow_record, record],
        ),
    ]


def loader() -> InMemoryAgentLoader:
    """The loader workers import."""
    return InMemoryAgentLoader(agents())


# -- steps that run too long (tests/e2e/test_pools.py) ---------------------------------------
@tool(timeout=1)
def sleepy(seconds: float) -> str:
    """Sleep past this tool's own timeout."""
    time.sleep(seconds)
    return f"slept {seconds}"


@tool
def hang() -> str:
    """Never return (an hour), with no timeout of its own: only the step's deadline cuts it."""
    _redis().incr(PREFIX + "hang-started:" + AgentToolContext.current().turn_id)
    time.sleep(3600)
    return "woke up"


#: How long the hung model's first call of a turn blocks (past the step's backstop).
MODEL_HANG_SECONDS = 12.0


def _hangs_once(request: ModelRequest) -> AiMessage:
    """A sync model call that hangs on a turn's first call (nothing in the call can cut it)."""
    first = request.messages[1] if request.messages[0].role == "system" else request.messages[0]
    if _redis().incr(PREFIX + "model-calls:" + first.id) == 1:
        time.sleep(MODEL_HANG_SECONDS)
        return AiMessage("the hung call's answer")
    return AiMessage("answered after a hang")


class _SoftLimitOnce(Middleware):
    """Celery's soft limit, raised around a turn's first step (outside its calls)."""

    def wrap_step(self, turn: Any, call_next: Callable[[], Any]) -> Any:
        """Raise ``SoftTimeLimitExceeded`` the first time, then step."""
        if _redis().incr(PREFIX + "interrupted:" + turn.id) == 1:
            raise SoftTimeLimitExceeded()
        return call_next()


@tool
async def overlap(n: int) -> str:
    """Wait on the event loop; say when (this process's clock), where, and under which key."""
    began = time.monotonic()
    await asyncio.sleep(0.5)
    key = AgentToolContext.current().idempotency_key
    return json.dumps(
        {"n": n, "began": began, "ended": time.monotonic(), "pid": os.getpid(), "key": key}
    )


async def _fan_out(request: ModelRequest) -> AiMessage:
    """An async model: four calls of an async tool in one response, then the results."""
    results = _tool_results(request)
    if not results:
        calls = [ToolCall(id=f"o{n}", name="overlap", arguments={"n": n}) for n in range(4)]
        return AiMessage(tool_calls=calls)
    await asyncio.sleep(0)
    return AiMessage(f"{len(results)} results")


def pool_agents() -> list[Agent]:
    """Steps that run too long: a tool past its timeout, a tool and a model that hang."""
    return [
        Agent("e2e-async-fanout", FunctionModel(_fan_out), tools=[overlap]),
        Agent("e2e-sleepy", _script(("sleepy", {"seconds": 8.0})), tools=[sleepy]),
        Agent("e2e-hang", _script(("hang", {})), tools=[hang]),
        Agent("e2e-hung-model", FunctionModel(_hangs_once)),
        Agent(
            "e2e-interrupted",
            FunctionModel(lambda r: AiMessage("after the interruption")),
            middleware=[_SoftLimitOnce()],
        ),
    ]


def pool_loader() -> InMemoryAgentLoader:
    """The loader of the pool suites' workers."""
    return InMemoryAgentLoader(pool_agents())


# -- per-process dependencies ----------------------------------------------------------------
DEPS_GREETING = "hello from the deps"


def _build_deps() -> dict[str, Any]:
    """Record which process built its dependencies (once per process, if all is well)."""
    _redis().rpush(PREFIX + "deps-built", os.getpid())
    return {"pid": os.getpid(), "greeting": DEPS_GREETING}


@tool
def whoami() -> str:
    """Say which process's dependencies this call got."""
    time.sleep(0.3)  # long enough that both prefork children get turns
    return json.dumps(AgentToolContext.current().deps, sort_keys=True)


def deps_agents() -> list[Agent]:
    """An agent whose tool reads per-process dependencies (``Agent(deps=...)``)."""
    return [Agent("e2e-deps", _script(("whoami", {})), tools=[whoami], deps=_build_deps)]


def deps_loader() -> InMemoryAgentLoader:
    """The loader of the dependency suite's workers."""
    return InMemoryAgentLoader(deps_agents())
