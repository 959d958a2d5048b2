"""Timeouts inside the call: the tool's own or the policy's, and the step's deadline."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnStatus,
    RetryPolicy,
    tool,
)
from runner_core._engine import aio
from runner_core._engine.toolthreads import ToolThreads
from runner_core.tools import TimeoutBehavior, Tool
from tests.support.scripts import Script, agent, ask, call, content, tool_messages

RELEASE = threading.Event()


def slow_tools(seconds: float, **options: Any) -> dict[str, Tool]:
    """The same slow tool, sync and async."""

    @tool(name="slow", **options)
    def slow_sync() -> str:
        """Wait."""
        RELEASE.wait(seconds)
        return "finally"

    @tool(name="slow", **options)
    async def slow_async() -> str:
        """Wait."""
        await asyncio.sleep(seconds)
        return "finally"

    return {"sync": slow_sync, "async": slow_async}


@pytest.fixture(autouse=True)
def release_abandoned() -> Any:
    RELEASE.clear()
    yield
    RELEASE.set()  # let the abandoned threads of the test end


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_by_default_the_model_is_told_the_tool_timed_out(runner: AgentRunner, kind: str) -> None:
    slow = slow_tools(5, timeout=0.2)[kind]
    script = Script(ask(call("slow")), "it timed out, sorry")
    abandoned = aio.ABANDONED_THREADS.value

    started = time.monotonic()
    turn = runner.run(agent(script, slow), "go")

    assert time.monotonic() - started < 3
    assert turn.status is AgentTurnStatus.COMPLETED
    [answer] = tool_messages(turn.messages)
    assert answer.is_error
    assert content(answer) == {
        "error": True,
        "type": "tool_timeout",
        "message": "tool 'slow' timed out after 0.2 s",
        "tool": "slow",
        "seconds": 0.2,
    }
    assert aio.ABANDONED_THREADS.value == abandoned + (1 if kind == "sync" else 0)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("behavior", ["retry", "fail"])
def test_retry_and_fail_behaviours(
    make_runner: Callable[..., AgentRunner], kind: str, behavior: TimeoutBehavior
) -> None:
    slow = slow_tools(5, timeout=0.1, timeout_behavior=behavior)[kind]
    script = Script(ask(call("slow")))
    runner = make_runner(AgentExecutionPolicy(retry=RetryPolicy(max_retries=2)))

    turn = runner.run(agent(script, slow), "go")

    expected = AgentTurnStatus.RETRY_SCHEDULED if behavior == "retry" else AgentTurnStatus.FAILED
    assert turn.status is expected
    assert turn.state.error is not None
    assert turn.state.error.type == "ToolTimeoutError"
    assert turn.state.error.message == "tool 'slow' timed out after 0.1 s"
    assert script.calls == 1  # the model was not asked about it


def test_the_policy_gives_the_default_timeout_and_behaviour(
    make_runner: Callable[..., AgentRunner],
) -> None:
    slow = slow_tools(5)["async"]
    policy = AgentExecutionPolicy(tool_timeout_seconds=0.1, tool_timeout_behavior="fail")

    turn = make_runner(policy).run(agent(Script(ask(call("slow"))), slow), "go")

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "ToolTimeoutError: tool 'slow' timed out after 0.1 s"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_step_deadline_cuts_a_call_and_says_so(
    make_runner: Callable[..., AgentRunner], kind: str
) -> None:
    slow = slow_tools(5, timeout=4)[kind]
    script = Script(ask(call("slow")), "out of time")
    runner = make_runner(step_time_limit=0.3)

    started = time.monotonic()
    turn = runner.run(agent(script, slow), "go")

    assert time.monotonic() - started < 3
    [answer] = tool_messages(turn.messages)
    body = content(answer)
    assert body["type"] == "tool_timeout"
    assert body["message"].endswith(": the step time limit was reached")
    assert body["seconds"] <= 0.3
    assert turn.status is AgentTurnStatus.COMPLETED


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_later_call_waits_for_the_next_step_rather_than_start_too_late(
    make_runner: Callable[..., AgentRunner], kind: str
) -> None:
    # Given three 0.35 s calls in one response and a 1 s step time limit
    @tool(name="work")
    def work_sync(n: int) -> str:
        """Work a while."""
        time.sleep(0.35)
        return f"done {n}"

    @tool(name="work")
    async def work_async(n: int) -> str:
        """Work a while."""
        await asyncio.sleep(0.35)
        return f"done {n}"

    work = {"sync": work_sync, "async": work_async}[kind]
    calls = [call("work", f"w{n}", n=n) for n in (1, 2, 3)]
    runner = make_runner(step_time_limit=1.0)

    turn = runner.run(agent(Script(ask(*calls), "all done"), work), "go")

    # Then the third call does not start with 0.3 s left (to be cut off): the next step
    # runs it, with a deadline of its own, and every call returns its result
    assert turn.status is AgentTurnStatus.COMPLETED
    assert [m.content for m in tool_messages(turn.messages)] == ["done 1", "done 2", "done 3"]
    assert turn.state.step_count == 4  # model, two calls, the third call, model


def test_a_fast_call_with_a_timeout_returns_its_result(runner: AgentRunner) -> None:
    @tool(timeout=5)
    def quick(x: int) -> int:
        """Double."""
        return 2 * x

    turn = runner.run(agent(Script(ask(call("quick", x=21)), "42"), quick), "go")

    assert tool_messages(turn.messages)[0].content == "42"


def test_a_sync_tool_without_a_timeout_runs_on_the_step_thread(runner: AgentRunner) -> None:
    threads: list[threading.Thread] = []

    @tool
    def where() -> str:
        """Which thread."""
        threads.append(threading.current_thread())
        return "here"

    runner.run(agent(Script(ask(call("where")), "ok"), where), "go")

    assert threads == [threading.current_thread()]


def test_a_timed_sync_tool_thread_sees_the_call_context(runner: AgentRunner) -> None:
    from runner_core import AgentToolContext

    @tool(timeout=5)
    def who() -> str:
        """Which call."""
        return AgentToolContext.current().call_id

    turn = runner.run(agent(Script(ask(call("who", "c-9")), "ok"), who), "go")

    assert tool_messages(turn.messages)[0].content == "c-9"


def test_a_negative_timeout_is_refused_naming_the_tool() -> None:
    from runner_core import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="tool 'f'") as info:

        @tool(timeout=-1)
        def f() -> None:
            """Nothing."""

    assert info.value.field == "timeout"


def test_tool_threads_are_kept_and_an_abandoned_one_serves_again_once_free() -> None:
    threads = ToolThreads(keep_idle=4)
    gate = threading.Event()

    def idle(n: int) -> None:
        deadline = time.monotonic() + 5
        while len(threads._idle) != n and time.monotonic() < deadline:
            time.sleep(0.001)

    first = threads.call(threading.get_ident, 5)
    idle(1)
    assert threads.call(threading.get_ident, 5) == first  # kept, not a new thread
    idle(1)

    abandoned = aio.ABANDONED_THREADS.value
    with pytest.raises(aio.DeadlineExceeded):
        threads.call(lambda: gate.wait(5), 0.05)
    assert aio.ABANDONED_THREADS.value == abandoned + 1
    assert threads._idle == []  # the only thread is still busy with the abandoned call
    gate.set()
    idle(1)
    assert threads.call(threading.get_ident, 5) == first
