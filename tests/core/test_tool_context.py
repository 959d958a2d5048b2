"""A tool's context parameter and its agent's per-process dependencies (``ctx.deps``)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurnStatus,
    InMemoryAgentLoader,
    InvalidArgumentError,
    RetryPolicy,
    tool,
)
from runner_core.deps import DependencyError, agent_deps
from tests.support.scripts import Script, agent, ask, call, tool_messages


@tool
def plain(order_id: str, ctx: AgentToolContext) -> str:
    """Look an order up."""
    return f"{ctx.call_id}:{order_id}"


@tool
def optional(order_id: str, ctx: AgentToolContext | None = None) -> str:
    """Look an order up."""
    assert ctx is not None
    return f"{ctx.call_id}:{order_id}"


def texted(order_id: str, ctx: "AgentToolContext") -> str:  # noqa: UP037 - the case tested
    """Look an order up."""
    return f"{ctx.call_id}:{order_id}"


@pytest.mark.parametrize("lookup", [plain, optional, tool(texted)], ids=["plain", "opt", "str"])
def test_a_context_parameter_receives_the_context_and_stays_out_of_the_schema(
    runner: AgentRunner, lookup: Any
) -> None:
    assert lookup.context_param == "ctx"
    assert set(lookup.spec.parameters["properties"]) == {"order_id"}
    assert lookup.spec.parameters["required"] == ["order_id"]
    script = Script(ask(call(lookup.name, "c7", order_id="1001")), "ok")

    turn = runner.run(agent(script, lookup), "where?")

    assert tool_messages(turn.messages)[0].content == "c7:1001"
    assert "ctx" not in str(script.requests[0].tools)


def test_a_model_cannot_pass_the_context_argument(runner: AgentRunner) -> None:
    script = Script(ask(call("plain", order_id="1", ctx="forged")), "sorry")

    turn = runner.run(agent(script, plain), "go")

    [answer] = tool_messages(turn.messages)
    assert answer.is_error and "ctx: Extra inputs are not permitted" in answer.content


def counting_factory(made: list[int]) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        made.append(os.getpid())
        return {"pool": object(), "pid": os.getpid()}

    return build


def deps_agent(
    factory: Callable[[], Any], replies: int = 1, **kwargs: Any
) -> tuple[Agent, list[Any]]:
    seen: list[Any] = []

    @tool
    def use(ctx: AgentToolContext) -> str:
        """Use the pool."""
        seen.append(ctx.deps)
        return "used"

    calls = [ask(call("use", f"c{i}")) for i in range(replies)]
    script = Script(*calls, then="done")
    return Agent("with-deps", script, tools=[use], deps=factory, **kwargs), seen


def test_deps_are_built_once_for_many_calls_and_turns(runner: AgentRunner) -> None:
    made: list[int] = []
    agent_, seen = deps_agent(counting_factory(made), replies=3)

    runner.run(agent_, "first")
    runner.run(agent_, "second")

    assert made == [os.getpid()]
    assert len(seen) == 3 and all(d is seen[0] for d in seen)
    assert agent_deps(agent_) is seen[0]


def test_deps_are_built_once_when_threads_race_for_them() -> None:
    made: list[int] = []
    gate = threading.Barrier(8)

    def slow_build() -> object:
        made.append(1)
        return object()

    agent_ = Agent("racer", Script(), deps=slow_build)
    got: list[Any] = []

    def take() -> None:
        gate.wait()
        got.append(agent_deps(agent_))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert made == [1] and len(got) == 8 and all(g is got[0] for g in got)


def test_an_async_factory_runs_on_the_process_loop(runner: AgentRunner) -> None:
    async def build() -> asyncio.AbstractEventLoop:
        await asyncio.sleep(0)
        return asyncio.get_running_loop()

    loops: list[asyncio.AbstractEventLoop] = []

    @tool
    async def use(ctx: AgentToolContext) -> str:
        """Use the loop-bound client."""
        loops.extend([ctx.deps, asyncio.get_running_loop()])
        return "ok"

    agent_ = Agent("async-deps", Script(ask(call("use")), "done"), tools=[use], deps=build)
    runner.run(agent_, "go")

    assert loops[0] is loops[1]


def test_a_tool_of_an_agent_without_deps_gets_none(runner: AgentRunner) -> None:
    seen: list[Any] = ["unset"]

    @tool
    def use(ctx: AgentToolContext) -> str:
        """Use nothing."""
        seen[0] = ctx.deps
        return "ok"

    runner.run(agent(Script(ask(call("use")), "done"), use), "go")

    assert seen == [None]


def test_a_restored_turn_gets_the_same_deps(
    make_runner: Callable[..., AgentRunner], loader: InMemoryAgentLoader
) -> None:
    made: list[int] = []
    seen: list[Any] = []

    @tool(requires_approval=True)
    def refund(ctx: AgentToolContext) -> str:
        """Refund."""
        seen.append(ctx.deps)
        return "refunded"

    @tool
    def look(ctx: AgentToolContext) -> str:
        """Look."""
        seen.append(ctx.deps)
        return "looked"

    script = Script(ask(call("look", "c1")), ask(call("refund", "c2")), "done")
    agent_ = Agent("restorer", script, tools=[look, refund], deps=counting_factory(made))
    first, second = make_runner(), make_runner()
    loader.register(agent_)

    turn = first.run(agent_, "refund it")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    turn = second.resume(turn.id, AgentResumeCommand.approve_tool("c2"))

    assert turn.status is AgentTurnStatus.COMPLETED
    assert len(seen) == 2 and seen[0] is seen[1] and made == [os.getpid()]


def test_a_forked_child_builds_its_own_deps() -> None:
    made: list[int] = []
    agent_ = Agent("forker", Script(), deps=counting_factory(made))
    parent = agent_deps(agent_)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            child = agent_deps(agent_)
            again = agent_deps(agent_)
            os.write(write, f"{child['pid']} {int(child is again)} {len(made)}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child_pid, same, built = os.read(read, 100).decode().split()
    os.close(read)

    assert int(child_pid) == pid != parent["pid"]
    assert (same, built) == ("1", "2")  # the child built once more, then kept it
    assert made == [os.getpid()]


def test_a_failing_factory_is_typed_retried_and_logged_once(
    make_runner: Callable[..., AgentRunner], caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> object:
        raise ConnectionError("database is down")

    caplog.set_level(logging.ERROR, logger="runner_core.deps")
    agent_, seen = deps_agent(broken, replies=2, version="7")
    runner = make_runner(AgentExecutionPolicy(retry=RetryPolicy(max_retries=2)))

    first = runner.run(agent_, "one")
    second = runner.run(agent_, "two")

    for turn in (first, second):
        assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
        assert turn.state.error is not None and turn.state.error.type == "DependencyError"
        assert "'with-deps' version '7'" in turn.state.error.message
        assert "ConnectionError: database is down" in turn.state.error.message
    assert seen == []
    logged = [r for r in caplog.records if r.name == "runner_core.deps"]
    assert len(logged) == 1 and "with-deps" in logged[0].getMessage()
    with pytest.raises(DependencyError) as info:
        agent_deps(agent_)
    assert (info.value.agent_id, info.value.version, info.value.retryable) == (
        "with-deps",
        "7",
        True,
    )


def test_deps_that_are_not_callable_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="'x': deps must be") as info:
        Agent("x", Script(), deps={"pool": 1})  # type: ignore[arg-type]

    assert info.value.field == "deps"


def test_an_unresolvable_hint_is_refused_but_a_context_string_is_not() -> None:
    def lookup(order_id: "OrderId", ctx: "AgentToolContext") -> str:  # type: ignore[name-defined]  # noqa: F821, UP037
        """Look an order up."""
        return str(order_id)

    def fine(order_id: str, ctx: "Ctx.AgentToolContext") -> str:  # type: ignore[name-defined]  # noqa: F821, UP037
        """Look an order up."""
        return str(order_id)

    with pytest.raises(InvalidArgumentError, match="tool 'lookup'.*'OrderId'") as info:
        tool(lookup)

    assert info.value.field == "order_id"
    assert tool(fine).context_param == "ctx"
