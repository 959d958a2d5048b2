"""Native structured output: the Chat Completions adapter's ``json_schema`` response format.

The real ``openai`` SDK talks to a scripted local server (never a hosted one); the test
asserts on what reached the wire.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

import tests.support.chat_server as wire
from runner_core import (
    Agent,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    OutputValidationError,
    UserMessage,
)
from runner_core.models import ModelRequest, OutputSchema, supports_native_output
from runner_core.models.openai import OpenAIChatModel
from runner_core.output import FINAL_TOOL
from tests.support.chat_server import ChatServer, Reply


class Forecast(BaseModel):
    """Tomorrow's weather."""

    city: str
    celsius: float


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def model(server: ChatServer) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=server.base_url, timeout=5.0)


def forecaster(model: OpenAIChatModel, retries: int = 1) -> Agent:
    return Agent(
        "forecaster", model, output_type=Forecast, output_mode="native", output_retries=retries
    )


def test_the_adapter_declares_native_output(model: OpenAIChatModel) -> None:
    assert supports_native_output(model)


def test_the_schema_goes_out_as_response_format(
    server: ChatServer, model: OpenAIChatModel, runner: AgentRunner
) -> None:
    server.script(wire.completion('{"city": "Oslo", "celsius": -3.5}'))

    turn = runner.run(forecaster(model), "weather in Oslo tomorrow?")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.output == Forecast(city="Oslo", celsius=-3.5)
    body = server.last_body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "Forecast",
            "schema": Forecast.model_json_schema(),
            "description": "Tomorrow's weather.",
        },
    }
    assert "tools" not in body  # no final-answer tool in native mode
    assert json.loads(turn.final_output or "") == {"city": "Oslo", "celsius": -3.5}


def test_an_invalid_answer_is_retried_as_a_user_message(
    server: ChatServer, model: OpenAIChatModel, runner: AgentRunner
) -> None:
    server.script(
        wire.completion('{"city": "Oslo", "celsius": "cold"}'),
        wire.completion('```json\n{"city": "Oslo", "celsius": -3}\n```'),
    )

    turn = runner.run(forecaster(model), "weather in Oslo tomorrow?")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.output.celsius == -3
    retry = server.requests[1].body
    assert retry["response_format"]["json_schema"]["schema"] == Forecast.model_json_schema()
    last = retry["messages"][-1]
    assert last["role"] == "user"
    assert "celsius" in last["content"] and "'cold'" in last["content"]
    assert FINAL_TOOL not in last["content"]


def test_text_that_is_not_json_fails_after_the_retries(
    server: ChatServer, model: OpenAIChatModel, runner: AgentRunner
) -> None:
    server.script(wire.completion("It will be cold."), wire.completion("Really cold."))

    turn = runner.run(forecaster(model, retries=1), "weather?")

    assert turn.status is AgentTurnStatus.FAILED
    assert isinstance(turn.error, OutputValidationError)
    assert "not JSON" in str(turn.error)
    assert len(server.requests) == 2


def test_a_list_schema_is_wrapped_in_an_object(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(wire.completion('{"response": [1, 2]}'))
    request = ModelRequest(
        [UserMessage("numbers?")],
        output=OutputSchema("numbers", {"type": "object", "properties": {}}),
    )

    model.generate(request)

    assert server.last_body["response_format"]["json_schema"]["name"] == "numbers"
    agent = Agent("lists", model, output_type=list[int], output_mode="native")
    assert agent.output_schema is not None
    assert agent.output_schema.schema["required"] == ["response"]
    assert agent.output_schema.name == "final_result"  # list[int] has no name of its own


def test_a_streamed_native_answer_is_validated_whole(
    server: ChatServer, model: OpenAIChatModel, runner: AgentRunner
) -> None:
    server.script(
        Reply(
            chunks=[
                wire.chunk({"role": "assistant", "content": '{"city": "Oslo", '}),
                wire.chunk({"content": '"celsius": 4}'}),
                wire.chunk(None, usage=wire.usage(9, 6)),
            ]
        )
    )

    turn = runner.run(forecaster(model), "weather?", options=AgentTurnOptions(streaming=True))

    assert turn.output == Forecast(city="Oslo", celsius=4)
    assert server.last_body["stream"] is True
    assert server.last_body["response_format"]["type"] == "json_schema"
