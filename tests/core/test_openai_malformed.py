"""A 200 answer whose body is not JSON is a transient fault: retried, never a failed turn.

Against the scripted local Chat Completions server (never a hosted one).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tests.support.chat_server as wire
from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnStatus,
    RetryPolicy,
)
from runner_core.messages import UserMessage
from runner_core.models import ModelError, ModelRequest, StreamDone
from runner_core.models.openai import OpenAIChatModel
from tests.support.chat_server import ChatServer, Reply

MALFORMED = [b"{not json", b"", b"<html>502 Bad Gateway</html>", b'{"choices": [{"mess']


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def model(server: ChatServer) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=server.base_url, timeout=5.0)


def ask() -> ModelRequest:
    return ModelRequest(messages=[UserMessage("hi")])


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_200_body_is_a_retryable_model_error(
    server: ChatServer, model: OpenAIChatModel, body: bytes
) -> None:
    server.script(Reply(status=200, raw=body))
    with pytest.raises(ModelError) as info:
        model.generate(ask())
    assert info.value.retryable is True
    assert "malformed JSON" in str(info.value)


def test_a_choice_without_a_message_is_retryable(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(Reply(body={"id": "x", "object": "chat.completion", "choices": [{"index": 0}]}))
    with pytest.raises(ModelError) as info:
        model.generate(ask())
    assert info.value.retryable is True


def test_a_malformed_stream_chunk_is_retryable(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(Reply(chunks=[wire.chunk({"role": "assistant", "content": "Hel"}), "{broken"]))
    with pytest.raises(ModelError) as info:
        list(model.stream(ask()))
    assert info.value.retryable is True
    assert "malformed JSON" in str(info.value)


def test_the_turn_is_retried_and_completes(server: ChatServer) -> None:
    # Given a server that answers 200 with a broken body once, then a real completion
    server.script(Reply(status=200, raw=b"{not json"), wire.completion("Done."))
    agent = Agent("m", OpenAIChatModel("test-model", base_url=server.base_url, timeout=5.0))
    runner = AgentRunner(
        policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=0.01))
    )

    # When the turn runs, the broken answer schedules a retry instead of failing the turn
    turn = runner.run(agent, "hi")
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.error is not None and "malformed JSON" in str(turn.error)

    # Then the retry completes it
    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Done."
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "pieces",
    [
        [wire.chunk({"role": "assistant", "content": "The answer is"})],
        [wire.chunk(wire.tool_delta(0, '{"city": "Ro', call_id="c1", name="get_weather"))],
    ],
    ids=["text", "tool-call"],
)
def test_a_stream_that_stops_before_its_end_is_retryable_and_runs_nothing(
    server: ChatServer, model: OpenAIChatModel, pieces: list[dict[str, object]]
) -> None:
    # A clean end of the body, but no finish_reason and no usage chunk: the answer was cut
    server.script(Reply(chunks=pieces))

    with pytest.raises(ModelError) as info:
        list(model.stream(ask()))

    assert info.value.retryable is True
    assert "ended before the answer finished" in str(info.value)


def test_a_stream_ended_by_its_usage_chunk_alone_is_complete(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(Reply(chunks=[wire.chunk({"content": "Hi"}), wire.chunk(usage=wire.usage(1, 1))]))

    done = list(model.stream(ask()))[-1]

    assert isinstance(done, StreamDone) and done.response.message.text == "Hi"
