"""AnthropicChatModel's errors: HTTP statuses, stream error events, malformed answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

import tests.support.anthropic_server as wire
from runner_core.messages import UserMessage
from runner_core.models import AnthropicChatModel, ModelError, ModelRequest
from runner_core.models.anthropic import parse_retry_after
from tests.support.anthropic_server import AnthropicServer, Reply
from tests.support.chat_server import closed_port


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    srv = AnthropicServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def model(server: AnthropicServer) -> AnthropicChatModel:
    return AnthropicChatModel("claude-test", base_url=server.base_url, timeout=5.0)


def ask() -> ModelRequest:
    return ModelRequest(messages=[UserMessage("hi")])


def model_error(call: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        call()
    return info.value


def both_ways(model: AnthropicChatModel, streaming: bool) -> ModelError:
    if streaming:
        return model_error(lambda: list(model.stream(ask())))
    return model_error(lambda: model.generate(ask()))


# --- HTTP errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "retryable", "retry_after"),
    [
        pytest.param(
            wire.error(529, "overloaded_error", "Overloaded", headers={"retry-after": "7"}),
            True, 7.0, id="529-overloaded",
        ),
        pytest.param(
            wire.error(429, "rate_limit_error", "Slow down", headers={"retry-after": "2"}),
            True, 2.0, id="429",
        ),
        pytest.param(
            wire.error(429, "rate_limit_error", "Slow down", headers={"retry-after-ms": "1500"}),
            True, 1.5, id="429-ms",
        ),
        pytest.param(wire.error(500, "api_error", "Internal error"), True, None, id="500"),
        pytest.param(wire.error(503, "api_error", "Unavailable"), True, None, id="503"),
        pytest.param(wire.error(504, "timeout_error", "Timed out"), True, None, id="504"),
        pytest.param(wire.error(408, "timeout_error", "Timed out"), True, None, id="408"),
        pytest.param(
            wire.error(400, "invalid_request_error", "messages: bad"), False, None, id="400"
        ),
        pytest.param(
            wire.error(401, "authentication_error", "invalid x-api-key"), False, None, id="401"
        ),
        pytest.param(wire.error(403, "permission_error", "Forbidden"), False, None, id="403"),
        pytest.param(wire.error(404, "not_found_error", "No such model"), False, None, id="404"),
        pytest.param(wire.error(413, "request_too_large", "Too large"), False, None, id="413"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_http_errors_are_classified(
    server: AnthropicServer,
    model: AnthropicChatModel,
    reply: Reply,
    retryable: bool,
    retry_after: float | None,
    streaming: bool,
) -> None:
    server.script(reply)

    err = both_ways(model, streaming)

    assert (err.retryable, err.retry_after) == (retryable, retry_after)
    assert f"HTTP {reply.status} {reply.body['error']['type']}" in str(err)
    assert reply.body["error"]["message"] in str(err)
    assert str(err).startswith("anthropic: ")
    assert isinstance(err.__cause__, anthropic.APIStatusError)
    assert len(server.requests) == 1  # the SDK's own retries are off


@pytest.mark.parametrize(
    ("kind", "retryable"),
    [("overloaded_error", True), ("api_error", True), ("invalid_request_error", False)],
)
def test_an_error_event_inside_a_stream_is_classified_by_its_type(
    server: AnthropicServer, model: AnthropicChatModel, kind: str, retryable: bool
) -> None:
    events = wire.stream_events(wire.text("Half an ans"))[:4]
    server.script(Reply(events=[*events, wire.error_event(kind, "went wrong")]))

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is retryable
    assert kind in str(err) and "went wrong" in str(err)


def test_a_timeout_is_retryable(server: AnthropicServer) -> None:
    model = AnthropicChatModel("claude-test", base_url=server.base_url, timeout=0.2)
    server.script(Reply(body=wire.message_body(wire.text("late")), delay=1.0))

    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is True
    assert "timed out" in str(err)


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_connection_refused_is_retryable(streaming: bool) -> None:
    model = AnthropicChatModel(
        "claude-test", base_url=f"http://127.0.0.1:{closed_port()}", timeout=2.0
    )

    err = both_ways(model, streaming)

    assert err.retryable is True
    assert "cannot reach" in str(err)


def test_retry_after_parsing() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({}) is None


# --- malformed answers ------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_an_unknown_block_type_fails_naming_it(
    server: AnthropicServer, model: AnthropicChatModel, streaming: bool
) -> None:
    block = {"type": "hologram", "frames": 3}
    reply = wire.stream if streaming else wire.message
    server.script(reply(wire.text("Look:"), block))

    err = both_ways(model, streaming)

    assert err.retryable is False
    assert "anthropic: " in str(err) and "unknown type 'hologram'" in str(err)


def test_an_unknown_delta_type_fails_naming_it(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    events = wire.stream_events(wire.text("Hello"))
    sparkle = {"type": "content_block_delta", "index": 0, "delta": {"type": "sparkle_delta"}}
    events.insert(3, ("content_block_delta", sparkle))
    server.script(Reply(events=events))

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is False
    assert "'sparkle_delta'" in str(err)


def test_unknown_event_types_are_skipped(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    events = wire.stream_events(wire.text("Hello"))
    events.insert(2, ("aurora", {"type": "aurora", "glow": True}))
    server.script(Reply(events=events))

    *_, done = list(model.stream(ask()))

    assert done.response.message.text == "Hello"


@pytest.mark.parametrize("cut", [-1, -2, -4], ids=["no-stop", "no-delta", "mid-block"])
def test_a_truncated_stream_is_retryable(
    server: AnthropicServer, model: AnthropicChatModel, cut: int
) -> None:
    call = wire.tool_use("toolu_1", "get_weather", {"city": "Paris"})
    server.script(Reply(events=wire.stream_events(call)[:cut]))

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is True
    assert "before message_stop" in str(err)


def test_a_delta_for_a_block_never_started_is_retryable(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    events = wire.stream_events(wire.text("Hello"))
    del events[2]  # content_block_start
    server.script(Reply(events=events))

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is True
    assert "block 0, never started" in str(err)


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_no_content_is_retryable(
    server: AnthropicServer, model: AnthropicChatModel, streaming: bool
) -> None:
    reply = wire.stream if streaming else wire.message
    server.script(reply(stop_reason="end_turn"))

    err = both_ways(model, streaming)

    assert err.retryable is True
    assert "no text and no tool call" in str(err)


def test_thinking_alone_is_no_answer(server: AnthropicServer, model: AnthropicChatModel) -> None:
    server.script(wire.message(wire.thinking("hmm", "sig"), stop_reason="end_turn"))

    assert model_error(lambda: model.generate(ask())).retryable is True


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply(raw=b"<html>bad gateway</html>"), id="not-json"),
        pytest.param(Reply(body={"hello": "world"}), id="not-a-message"),
        pytest.param(Reply(body={"type": "message", "content": None}), id="no-content"),
    ],
)
def test_a_malformed_body_is_retryable(
    server: AnthropicServer, model: AnthropicChatModel, reply: Reply
) -> None:
    server.script(reply)

    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is True
    assert str(err).startswith("anthropic: ")


def test_a_malformed_event_is_retryable(server: AnthropicServer, model: AnthropicChatModel) -> None:
    events = wire.stream_events(wire.text("Hello"))
    events[3] = ("content_block_delta", "{not json")
    server.script(Reply(events=events))

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is True
    assert "malformed" in str(err)


def test_a_delta_without_its_piece_is_retryable(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    events = wire.stream_events(wire.text("Hello"))
    events[3] = ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta"}})  # fmt: skip
    server.script(Reply(events=events))

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is True
    assert "text_delta without its text" in str(err)
