"""Async models: async FunctionModel functions and generators, the async protocol."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentEventType,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    InvalidArgumentError,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    tool,
)
from runner_core.models import AsyncChatModel, ModelStreamEvent, StreamDone, Usage
from tests.support.scripts import EventLog, tool_messages

E = AgentEventType


@tool
def lookup_order(order_id: str) -> str:
    """Find an order."""
    return f"order {order_id} shipped"


async def answer(request: ModelRequest) -> AiMessage:
    await asyncio.sleep(0.001)
    if request.messages[-1].role == "tool":
        return AiMessage(f"Done: {request.messages[-1].content}")
    return AiMessage(
        tool_calls=[ToolCall(id="c1", name="lookup_order", arguments={"order_id": "7"})]
    )


def test_an_async_function_model_completes_a_turn(runner: AgentRunner) -> None:
    model = FunctionModel(answer)

    turn = runner.run(Agent("async", model, tools=[lookup_order]), "where is 7?")

    assert model.prefers_async
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Done: order 7 shipped"


def test_its_sync_form_still_answers_a_direct_caller() -> None:
    from runner_core.messages import UserMessage

    response = FunctionModel(answer).generate(ModelRequest([UserMessage("hi")]))

    assert response.message.tool_calls[0].name == "lookup_order"


async def pieces(request: ModelRequest) -> AsyncIterator[Any]:
    if request.messages[-1].role == "tool":
        yield "It "
        await asyncio.sleep(0.001)
        yield TextDelta("shipped.")
        return
    yield ReasoningDelta("need the order")
    yield "Let me check"
    yield ToolCallDelta(0, id="call-1", name="lookup_order", arguments='{"order')
    await asyncio.sleep(0.001)
    yield ToolCallDelta(0, arguments='_id": "1001"}')


def test_async_streaming_completes_a_turn_with_deltas_as_events(
    runner: AgentRunner, events: EventLog
) -> None:
    agent = Agent("streamer", FunctionModel(stream_fn=pieces), tools=[lookup_order])

    turn = runner.run(agent, "where?", options=AgentTurnOptions(streaming=True))

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "It shipped."
    assert tool_messages(turn.messages)[0].content == "order 1001 shipped"
    deltas = [
        (e.type, e.data.get("text") or e.data.get("arguments"))
        for e in events.events
        if e.type in (E.MODEL_TEXT_DELTA, E.MODEL_REASONING_DELTA, E.MODEL_TOOL_CALL_DELTA)
    ]
    assert deltas == [
        (E.MODEL_REASONING_DELTA, "need the order"),
        (E.MODEL_TEXT_DELTA, "Let me check"),
        (E.MODEL_TOOL_CALL_DELTA, '{"order'),
        (E.MODEL_TOOL_CALL_DELTA, '_id": "1001"}'),
        (E.MODEL_TEXT_DELTA, "It "),
        (E.MODEL_TEXT_DELTA, "shipped."),
    ]


def test_deltas_reach_the_step_thread_while_the_stream_goes_on(runner: AgentRunner) -> None:
    # Given a stream that waits, after its first piece, until that piece became an event
    first_seen = threading.Event()
    emitted_on: list[threading.Thread] = []

    async def waits(request: ModelRequest) -> AsyncIterator[str]:
        yield "first "
        for _ in range(400):
            if first_seen.is_set():
                break
            await asyncio.sleep(0.005)
        yield "seen" if first_seen.is_set() else "never seen"

    def listener(event: Any) -> None:
        if event.type is E.MODEL_TEXT_DELTA:
            emitted_on.append(threading.current_thread())
            first_seen.set()

    runner.add_event_listener(listener)

    # When the turn streams
    turn = runner.run(
        Agent("live", FunctionModel(stream_fn=waits)),
        "go",
        options=AgentTurnOptions(streaming=True),
    )

    # Then the first delta was an event, on the step thread, before the stream ended
    assert turn.final_output == "first seen"
    assert set(emitted_on) == {threading.current_thread()}


class OnlyAsync:
    """A model with only the async protocol."""

    def __init__(self) -> None:
        self.requests = 0

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        await asyncio.sleep(0)
        return ModelResponse(AiMessage("async only"), Usage(input_tokens=3, output_tokens=2))


def test_a_model_with_only_agenerate_is_accepted(runner: AgentRunner) -> None:
    model = OnlyAsync()
    assert isinstance(model, AsyncChatModel)

    turn = runner.run(Agent("only-async", model), "hi")

    assert (turn.status, turn.final_output, model.requests) == (
        AgentTurnStatus.COMPLETED,
        "async only",
        1,
    )
    assert turn.usage.total_tokens == 5


class OnlyAsyncStreaming(OnlyAsync):
    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        yield TextDelta("stre")
        yield TextDelta("amed")
        yield StreamDone(ModelResponse(AiMessage("streamed")))


def test_a_model_with_only_astream_streams(runner: AgentRunner, events: EventLog) -> None:
    turn = runner.run(
        Agent("astream", OnlyAsyncStreaming()), "hi", options=AgentTurnOptions(streaming=True)
    )

    assert turn.final_output == "streamed"
    assert [e.data["text"] for e in events.of(E.MODEL_TEXT_DELTA)] == ["stre", "amed"]


class Hanging(OnlyAsync):
    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(30)
        raise AssertionError("not cancelled")


async def hanging_stream(request: ModelRequest) -> AsyncIterator[str]:
    yield "a"
    await asyncio.sleep(30)
    yield "b"


@pytest.mark.parametrize("streaming", [False, True])
def test_an_async_model_call_is_cut_off_at_the_step_deadline(
    make_runner: Callable[..., AgentRunner], streaming: bool
) -> None:
    model: Any = FunctionModel(stream_fn=hanging_stream) if streaming else Hanging()
    runner = make_runner(step_time_limit=0.3)

    started = time.monotonic()
    turn = runner.run(Agent("slow", model), "hi", options=AgentTurnOptions(streaming=streaming))

    assert time.monotonic() - started < 5
    assert turn.status is AgentTurnStatus.FAILED
    assert turn.state.error is not None and turn.state.error.type == "ModelError"
    assert "step time limit was reached" in turn.state.error.message
    assert turn.state.error.retryable


def test_something_that_is_no_model_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="generate") as info:
        Agent("x", object())  # type: ignore[arg-type]

    assert info.value.field == "model"


def test_a_scripted_reply_may_be_an_async_function(runner: AgentRunner) -> None:
    from runner_core.testing import ScriptedModel

    async def later(request: ModelRequest) -> str:
        await asyncio.sleep(0)
        return f"{len(request.messages)} messages"

    turn = runner.run(Agent("scripted", ScriptedModel(later)), "hi")

    assert turn.final_output == "1 messages"


def test_an_object_with_an_async_call_is_an_async_function_model(runner: AgentRunner) -> None:
    class Replier:
        async def __call__(self, request: ModelRequest) -> str:
            await asyncio.sleep(0)
            return "from an object"

    model = FunctionModel(Replier())

    turn = runner.run(Agent("obj", model), "hi")

    assert model.prefers_async and turn.final_output == "from an object"
