"""Async tools: awaited on the process loop, in the call's context; awaitables refused."""

from __future__ import annotations

import asyncio
import inspect
import threading
import warnings
from typing import Any

import pytest

from runner_core import (
    AgentExecutionPolicy,
    AgentRunner,
    AgentToolContext,
    AgentTurnStatus,
    ToolErrorStrategy,
    tool,
)
from runner_core.tools import AwaitableResultError, Tool
from tests.support.scripts import Script, agent, ask, call, tool_messages


def test_an_async_tool_result_is_what_it_returned(runner: AgentRunner) -> None:
    @tool
    async def fetch(url: str) -> dict[str, Any]:
        """Fetch a page."""
        await asyncio.sleep(0.01)
        return {"url": url, "status": 200}

    script = Script(ask(call("fetch", url="https://example.org")), "fetched")

    turn = runner.run(agent(script, fetch), "get it")

    assert turn.status is AgentTurnStatus.COMPLETED
    [answer] = tool_messages(turn.messages)
    assert not answer.is_error
    assert answer.content == '{"url": "https://example.org", "status": 200}'
    assert "<coroutine object" not in answer.content


def test_the_call_context_and_its_idempotency_key_work_inside(runner: AgentRunner) -> None:
    seen: list[str] = []

    @tool
    async def charge(amount: int) -> str:
        """Charge a card."""
        await asyncio.sleep(0)
        ctx = AgentToolContext.current()
        seen.append(ctx.idempotency_key)
        return f"charged {amount} as {ctx.tool_name}"

    script = Script(ask(call("charge", "pay-1", amount=5)), "done")

    turn = runner.run(agent(script, charge), "pay")

    assert seen == [f"{turn.id}:pay-1"]
    assert tool_messages(turn.messages)[0].content == "charged 5 as charge"


def test_an_object_with_an_async_call_is_an_async_tool(runner: AgentRunner) -> None:
    class Lookup:
        """Look an order up."""

        async def __call__(self, order_id: str) -> str:
            await asyncio.sleep(0)
            return f"order {order_id} shipped"

    lookup = Tool(Lookup(), name="lookup")
    script = Script(ask(call("lookup", order_id="7")), "ok")

    turn = runner.run(agent(script, lookup), "where?")

    assert lookup.is_async
    assert lookup.spec.parameters["required"] == ["order_id"]
    assert tool_messages(turn.messages)[0].content == "order 7 shipped"


def test_a_loop_bound_object_serves_two_turns_on_the_same_loop(runner: AgentRunner) -> None:
    # Given an async client-like object made by the first call and kept by the process
    clients: list[tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = []

    @tool
    async def query(q: str) -> str:
        """Query a service."""
        if not clients:
            clients.append((asyncio.get_running_loop(), asyncio.Lock()))
        loop, lock = clients[0]
        assert asyncio.get_running_loop() is loop
        async with lock:
            await asyncio.sleep(0.01)
        return f"answer to {q}"

    # When two turns use it
    for q in ("one", "two"):
        script = Script(ask(call("query", q=q)), "ok")
        turn = runner.run(agent(script, query), q)

        # Then both ran on the one loop the object is bound to
        assert turn.status is AgentTurnStatus.COMPLETED
        assert tool_messages(turn.messages)[0].content == f"answer to {q}"
    assert len(clients) == 1


@pytest.mark.parametrize(
    "strategy", [ToolErrorStrategy.FAIL_TURN, ToolErrorStrategy.RETURN_ERROR_TO_MODEL]
)
def test_a_sync_tool_returning_a_coroutine_fails_the_turn_naming_it(
    make_runner: Any, strategy: ToolErrorStrategy
) -> None:
    async def later() -> str:
        return "never rendered"

    made: list[Any] = []

    @tool
    def fetch(url: str) -> Any:
        """Fetch, wrongly."""
        made.append(later())
        return made[-1]

    script = Script(ask(call("fetch", url="x")), "built on garbage")
    runner = make_runner(AgentExecutionPolicy(tool_error_strategy=strategy))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a "never awaited" RuntimeWarning fails the test
        turn = runner.run(agent(script, fetch), "get")

    assert turn.status is AgentTurnStatus.FAILED
    assert isinstance(turn.error, AwaitableResultError)
    assert turn.error.tool == "fetch"
    assert "'fetch'" in (turn.terminal_reason or "")
    assert script.calls == 1  # the model never saw it
    assert inspect.getcoroutinestate(made[0]) == inspect.CORO_CLOSED  # so never "not awaited"
    assert all("<coroutine object" not in m.content for m in tool_messages(turn.messages))


def test_an_async_tool_raising_goes_the_way_of_any_tool_error(runner: AgentRunner) -> None:
    @tool
    async def explode() -> str:
        """Fail."""
        await asyncio.sleep(0)
        raise ValueError("disk on fire")

    turn = runner.run(agent(Script(ask(call("explode"))), explode), "go")

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "ValueError: disk on fire"


def test_many_threads_running_async_tools_at_once_do_not_deadlock(
    make_runner: Any,
) -> None:
    # Given async tools, some cut by a timeout, run by turns on eight threads at once
    @tool
    async def quick(n: int) -> int:
        """Echo after a pause."""
        await asyncio.sleep(0.002)
        return n

    @tool(timeout=0.05)
    async def cut(n: int) -> int:
        """Never in time."""
        await asyncio.sleep(5)
        return n

    results: dict[int, Any] = {}

    def run(i: int) -> None:
        calls = [call("quick", f"q{j}", n=j) for j in range(5)] + [call("cut", "x", n=0)]
        script = Script(*[ask(c) for c in calls], "done")
        turn = make_runner().run(agent(script, quick, cut), f"job {i}")
        results[i] = (turn.status, [m.is_error for m in tool_messages(turn.messages)])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    # Then every turn completed with its results, and no thread is stuck
    assert not any(t.is_alive() for t in threads)
    expected = (AgentTurnStatus.COMPLETED, [False] * 5 + [True])
    assert results == dict.fromkeys(range(8), expected)


def test_invoke_tool_is_thread_safe_for_calls_of_one_turn(runner: AgentRunner) -> None:
    # Given one turn, and async and bounded sync tools that report the call they serve
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from runner_core._engine.calls import invoke_tool

    @tool
    async def echo_async(n: int) -> str:
        """Echo."""
        await asyncio.sleep(0.001)
        return f"{AgentToolContext.current().call_id}:{n}"

    @tool(timeout=5)
    def echo_sync(n: int) -> str:
        """Echo."""
        return f"{AgentToolContext.current().call_id}:{n}"

    turn = runner.start(agent(Script(), echo_async, echo_sync), "go")

    def one(i: int) -> str:
        t = echo_async if i % 2 else echo_sync
        message = invoke_tool(runner.kernel, turn, t, call(t.name, f"c{i}", n=i))
        return message.content

    # When many threads invoke them at once, each in its own copy of the context
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(contextvars.copy_context().run, one, i) for i in range(64)]
        results = [f.result(timeout=30) for f in futures]

    # Then every call got its own context and result
    assert results == [f"c{i}:{i}" for i in range(64)]
