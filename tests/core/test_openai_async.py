"""OpenAIChatModel over an ``openai.AsyncOpenAI`` client, against the local chat server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import tests.support.chat_server as wire
from runner_core import (
    Agent,
    AgentEventType,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    tool,
)
from runner_core.messages import UserMessage
from runner_core.models import ModelError, ModelRequest, StreamDone, TextDelta, Usage
from runner_core.models.openai import OpenAIChatModel
from tests.support.chat_server import ChatServer, Reply


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def model(server: ChatServer) -> OpenAIChatModel:
    client = openai.AsyncOpenAI(api_key="sk-async", base_url=server.base_url, max_retries=4)
    return OpenAIChatModel("test-model", client=client)


@tool
def get_weather(city: str) -> dict[str, str]:
    """Current weather for a city."""
    return {"city": city, "sky": "clear"}


def test_an_async_client_is_awaited_with_its_retries_off(model: OpenAIChatModel) -> None:
    assert isinstance(model.client, openai.AsyncOpenAI)
    assert model.client.max_retries == 0
    assert model.prefers_async


def test_a_tool_calling_turn_over_the_async_client(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(
        wire.completion(
            tool_calls=[wire.tool_call("call_1", "get_weather", '{"city": "Paris"}')],
            prompt_tokens=20,
            completion_tokens=7,
        ),
        wire.completion("Clear skies in Paris.", prompt_tokens=35, completion_tokens=6),
    )

    turn = AgentRunner().run(Agent("w", model, tools=[get_weather]), "Weather in Paris?")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Clear skies in Paris."
    assert turn.usage == Usage(input_tokens=55, output_tokens=13)
    assert server.requests[0].headers["authorization"] == "Bearer sk-async"
    assert server.requests[1].body["messages"][1]["tool_calls"][0]["id"] == "call_1"


def test_a_streaming_turn_over_the_async_client_emits_deltas(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(
        Reply(
            chunks=[
                wire.chunk(wire.tool_delta(0, '{"city":', call_id="call_s", name="get_weather")),
                wire.chunk(wire.tool_delta(0, ' "Oslo"}')),
                wire.chunk(usage=wire.usage(8, 4)),
            ]
        ),
        Reply(
            chunks=[
                wire.chunk({"content": "Clear "}),
                wire.chunk({"content": "in Oslo."}),
                wire.chunk(usage=wire.usage(16, 3)),
            ]
        ),
    )
    runner = AgentRunner()
    seen: list[Any] = []
    runner.add_event_listener(seen.append)

    turn = runner.run(
        Agent("w", model, tools=[get_weather]), "Oslo?", options=AgentTurnOptions(streaming=True)
    )

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Clear in Oslo."
    assert turn.usage == Usage(input_tokens=24, output_tokens=7)
    texts = [e.data["text"] for e in seen if e.type is AgentEventType.MODEL_TEXT_DELTA]
    assert texts == ["Clear ", "in Oslo."]
    assert all(r.body["stream"] is True for r in server.requests)


def test_errors_are_classified_as_over_the_sync_client(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(wire.error(503, "busy"), wire.error(400, "bad request"))
    request = ModelRequest([UserMessage("hi")])

    with pytest.raises(ModelError) as busy:
        model.generate(request)
    with pytest.raises(ModelError) as bad:
        model.generate(request)

    assert (busy.value.retryable, bad.value.retryable) == (True, False)
    assert len(server.requests) == 2  # the SDK did not retry


def test_the_sync_forms_work_for_a_direct_caller(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(
        wire.completion("Hello!"),
        Reply(
            chunks=[wire.chunk({"content": "Hi "}), wire.chunk({"content": "there"}), wire.finish()]
        ),
    )
    request = ModelRequest([UserMessage("hi")])

    assert model.generate(request).message.text == "Hello!"
    events = list(model.stream(request))

    assert events[:2] == [TextDelta("Hi "), TextDelta("there")]
    assert isinstance(events[-1], StreamDone)
    assert events[-1].response.message.text == "Hi there"
