"""What a tool returns reaches the model as JSON, or the turn fails naming the tool.

A value that is not a result yet (a coroutine an async tool forgot to await, a generator,
``map(...)``) is never rendered as its repr: the turn fails, whatever the tool-error
strategy, and the model is not asked to act on ``<generator object ...>``.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

import pytest
from pydantic import BaseModel

from runner_core import (
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnStatus,
    AwaitableResultError,
    InvalidArgumentTypeError,
    IteratorResultError,
    ToolErrorStrategy,
    tool,
)
from runner_core.tools import Tool
from tests.support.scripts import Script, agent, ask, call, tool_messages

#: What the unfinished values' bodies did: none of them may run.
RAN: list[str] = []
#: The coroutines and generators the tools built: each must end closed.
MADE: list[Any] = []


def made(value: Any) -> Any:
    MADE.append(value)
    return value


async def _lookup() -> str:
    RAN.append("lookup")
    return "found"


def _rows() -> Iterator[int]:
    RAN.append("rows")
    yield 1


async def _stream() -> AsyncIterator[int]:
    RAN.append("stream")
    yield 1


def _forgot_await() -> Tool:
    @tool
    async def lookup(q: str) -> Any:
        """Look up, forgetting an await."""
        await asyncio.sleep(0)
        return made(_lookup())

    return lookup


def _async_returns_a_stream() -> Tool:
    @tool
    async def lookup(q: str) -> Any:
        """Look up, handing back an async generator."""
        return _stream()

    return lookup


def _sync_returns(value: Callable[[], Any], timeout: float | None = None) -> Callable[[], Tool]:
    def build() -> Tool:
        @tool(timeout=timeout)
        def lookup(q: str) -> Any:
            """Look up."""
            return value()

        return lookup

    return build


UNFINISHED: dict[str, tuple[Callable[[], Tool], type[Exception], str]] = {
    "an async tool's coroutine": (_forgot_await, AwaitableResultError, "coroutine"),
    "an async tool's async generator": (
        _async_returns_a_stream,
        IteratorResultError,
        "async_generator",
    ),
    "a generator": (_sync_returns(lambda: made(_rows())), IteratorResultError, "generator"),
    "a generator, under a timeout": (
        _sync_returns(lambda: made(_rows()), 5),
        IteratorResultError,
        "generator",
    ),
    "map(...)": (_sync_returns(lambda: map(str, [1, 2])), IteratorResultError, "map"),
    "an async generator": (_sync_returns(_stream), IteratorResultError, "async_generator"),
    "a generator in a dict": (
        _sync_returns(lambda: {"rows": made(_rows())}),
        IteratorResultError,
        "generator",
    ),
    "a coroutine in a list": (
        _sync_returns(lambda: ["x", made(_lookup())]),
        AwaitableResultError,
        "coroutine",
    ),
}


@pytest.mark.parametrize("strategy", list(ToolErrorStrategy))
@pytest.mark.parametrize("case", list(UNFINISHED))
def test_an_unfinished_result_fails_the_turn_naming_the_tool(
    make_runner: Callable[..., AgentRunner], case: str, strategy: ToolErrorStrategy
) -> None:
    build, error, kind = UNFINISHED[case]
    RAN.clear()
    MADE.clear()
    script = Script(ask(call("lookup", q="1001")), "built on garbage")
    runner = make_runner(AgentExecutionPolicy(tool_error_strategy=strategy))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a "never awaited" RuntimeWarning fails the test
        turn = runner.run(agent(script, build()), "look it up")

    assert turn.status is AgentTurnStatus.FAILED
    assert isinstance(turn.error, error)
    assert turn.error.tool == "lookup"
    assert not turn.error.retryable
    assert "'lookup'" in (turn.terminal_reason or "")
    assert kind in (turn.terminal_reason or "")
    assert script.calls == 1  # the model never saw it
    assert RAN == []  # closed before its body ran
    assert all(_closed(value) for value in MADE)
    assert all(" object " not in m.content for m in tool_messages(turn.messages))


def _closed(value: Any) -> bool:
    if inspect.iscoroutine(value):
        return inspect.getcoroutinestate(value) == inspect.CORO_CLOSED
    return inspect.getgeneratorstate(value) == inspect.GEN_CLOSED


def test_one_unfinished_result_among_concurrent_calls_fails_the_turn(
    make_runner: Callable[..., AgentRunner],
) -> None:
    @tool
    async def good(q: str) -> str:
        """A finished answer."""
        await asyncio.sleep(0.01)
        return f"answer {q}"

    script = Script(ask(call("good", "c1", q="a"), call("lookup", "c2", q="b")), "garbage")
    runner = make_runner(AgentExecutionPolicy(max_tool_concurrency=4))

    turn = runner.run(agent(script, good, _forgot_await()), "both")

    assert turn.status is AgentTurnStatus.FAILED
    assert isinstance(turn.error, AwaitableResultError)
    assert script.calls == 1
    assert all(" object " not in m.content for m in tool_messages(turn.messages))


def _generator_function(q: str) -> Iterator[str]:
    yield q


async def _async_generator_function(q: str) -> AsyncIterator[str]:
    yield q


class _Streams:
    async def __call__(self, q: str) -> AsyncIterator[str]:
        yield q


@pytest.mark.parametrize(
    "fn",
    [_generator_function, _async_generator_function, _Streams()],
    ids=["generator", "async generator", "async generator __call__"],
)
def test_a_generator_function_is_refused_as_a_tool(fn: Callable[..., Any]) -> None:
    with pytest.raises(InvalidArgumentTypeError, match="generator") as caught:
        Tool(fn, name="rows")

    assert "'rows'" in str(caught.value)
    assert caught.value.field == "fn"


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


@dataclass
class Parcel:
    weight: float
    size: Size
    sent: date


class Stop(BaseModel):
    city: str


def test_results_reach_the_model_as_json(runner: AgentRunner) -> None:
    @tool
    def parcel() -> Parcel:
        """A dataclass, holding an enum and a date."""
        return Parcel(1.5, Size.LARGE, date(2026, 12, 6))

    @tool
    def route() -> dict[str, Any]:
        """Models in a list, a set (rendered sorted), an enum as a value."""
        tags = {"fragile", "by air", "upright"}
        return {"stops": [Stop(city="Oslo")], "tags": tags, "size": Size.SMALL}

    script = Script(ask(call("parcel", "c1"), call("route", "c2")), "ok")

    turn = runner.run(agent(script, parcel, route), "go")

    first, second = (m.content for m in tool_messages(turn.messages))
    assert first == '{"weight": 1.5, "size": "l", "sent": "2026-12-06"}'
    assert second == (
        '{"stops": [{"city": "Oslo"}], "tags": ["by air", "fragile", "upright"], "size": "s"}'
    )
