"""AnthropicChatModel against a scripted local Messages API server (never a hosted one)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

import tests.support.anthropic_server as wire
from runner_core.messages import (
    AiMessage,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from runner_core.models import (
    AnthropicChatModel,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    StreamDone,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from tests.support.anthropic_server import AnthropicServer

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
THOUGHT = wire.thinking("The user wants Paris weather.", "sig-paris")


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    srv = AnthropicServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def model(server: AnthropicServer) -> AnthropicChatModel:
    return AnthropicChatModel("claude-test", base_url=server.base_url, timeout=5.0)


def ask(*messages: Message, **kwargs: Any) -> ModelRequest:
    return ModelRequest(messages=list(messages or [UserMessage("hi")]), **kwargs)


def model_error(call: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        call()
    return info.value


def key_headers(server: AnthropicServer) -> str:
    """Where SDK releases put the key: ``x-api-key``, or (newer ones) ``authorization``."""
    headers = server.requests[0].headers
    return f"{headers.get('x-api-key')} {headers.get('authorization')}"


def streamed(model: AnthropicChatModel, request: ModelRequest) -> list[Any]:
    return list(model.stream(request))


# --- answers ----------------------------------------------------------------------------


def test_generate_keeps_thinking_blocks_as_provider_data(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    call = wire.tool_use("toolu_1", "get_weather", {"city": "Paris"})
    server.script(wire.message(THOUGHT, wire.redacted("opaque=="), wire.text("Checking."), call))

    message = model.generate(ask(tools=[WEATHER])).message

    assert message.text == "Checking."
    assert message.reasoning == "The user wants Paris weather."
    assert list(message.tool_calls) == [
        ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Paris"})
    ]
    assert message.provider_data == {
        "anthropic": {
            "stop_reason": "tool_use",
            "thinking": [THOUGHT, {"type": "redacted_thinking", "data": "opaque=="}],
        }
    }


def test_usage_counts_every_input_token_and_the_cached_ones(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    use = {**wire.usage(100, 40, cache_read=300, cache_write=50)}
    use["output_tokens_details"] = {"thinking_tokens": 25}
    server.script(wire.message(wire.text("ok"), use=use), wire.stream(wire.text("ok"), use=use))

    expected = Usage(
        input_tokens=450, output_tokens=40, cached_input_tokens=300, reasoning_tokens=25
    )
    assert model.generate(ask()).usage == expected
    done = streamed(model, ask())[-1]
    assert isinstance(done, StreamDone)
    assert done.response.usage == expected


def test_stream_yields_deltas_and_the_same_message_as_generate(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    blocks = (
        THOUGHT,
        wire.redacted("opaque=="),
        wire.text("Checking."),
        wire.tool_use("toolu_1", "get_weather", {"city": "Paris"}),
    )
    server.script(wire.message(*blocks), wire.stream(*blocks))

    whole = model.generate(ask(tools=[WEATHER])).message
    events = streamed(model, ask(tools=[WEATHER]))

    assert events[:-1] == [
        ReasoningDelta("The user wants"),
        ReasoningDelta(" Paris weather."),
        TextDelta("Chec"),
        TextDelta("king."),
        ToolCallDelta(3, "toolu_1", "get_weather"),
        ToolCallDelta(3, arguments='{"city":'),
        ToolCallDelta(3, arguments=' "Paris"}'),
    ]
    done = events[-1]
    assert isinstance(done, StreamDone)
    streamed_message = done.response.message
    assert streamed_message.model_dump(exclude={"id"}) == whole.model_dump(exclude={"id"})
    assert server.bodies[1]["stream"] is True


def test_streamed_arguments_that_are_not_an_object_are_kept_raw(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    events = wire.stream_events(wire.tool_use("toolu_1", "get_weather", {"city": "Paris"}))
    for _, data in events:
        if data.get("delta", {}).get("type") == "input_json_delta":
            data["delta"]["partial_json"] = '{"city": '
    server.script(wire.Reply(events=events))

    done = streamed(model, ask(tools=[WEATHER]))[-1]

    [call] = done.response.message.tool_calls
    assert call.arguments == {"__invalid_json__": '{"city": {"city": '}


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_a_tool_call_without_an_id_is_left_for_the_runner_to_name(
    server: AnthropicServer, model: AnthropicChatModel, streaming: bool
) -> None:
    call = {"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}}
    server.script((wire.stream if streaming else wire.message)(call))

    if streaming:
        message = streamed(model, ask(tools=[WEATHER]))[-1].response.message
    else:
        message = model.generate(ask(tools=[WEATHER])).message

    assert [(c.id, c.name) for c in message.tool_calls] == [("", "get_weather")]


def test_a_text_answer_cut_at_max_tokens_is_kept_and_says_so(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    server.script(wire.message(wire.text("The first half"), stop_reason="max_tokens"))

    message = model.generate(ask()).message

    assert message.text == "The first half"
    assert message.provider_data == {"anthropic": {"stop_reason": "max_tokens"}}


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_a_tool_call_cut_at_max_tokens_is_an_error(
    server: AnthropicServer, model: AnthropicChatModel, streaming: bool
) -> None:
    call = wire.tool_use("toolu_1", "get_weather", {"city": "Par"})
    reply = wire.stream if streaming else wire.message
    server.script(reply(wire.text("Let me look."), call, stop_reason="max_tokens"))

    if streaming:
        err = model_error(lambda: streamed(model, ask(tools=[WEATHER])))
    else:
        err = model_error(lambda: model.generate(ask(tools=[WEATHER])))

    assert err.retryable is False
    assert "max_tokens" in str(err) and "'get_weather'" in str(err)


def test_a_refusal_without_text_fails(server: AnthropicServer, model: AnthropicChatModel) -> None:
    server.script(wire.message(stop_reason="refusal"))

    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is False
    assert "refused" in str(err)


# --- requests ---------------------------------------------------------------------------


def test_request_body_carries_blocks_in_wire_shape(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    # Given a history with thinking, two tool calls, their results and a user follow-up
    server.script(wire.message(wire.text("ok")))
    calls = [
        ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="toolu_2", name="get_weather", arguments={"city": "Oslo"}),
    ]
    data = {"anthropic": {"stop_reason": "tool_use", "thinking": [THOUGHT]}}
    history: list[Message] = [
        SystemMessage("Be brief."),
        UserMessage("Weather in Paris and Oslo?"),
        AiMessage("Checking both.", tool_calls=calls, reasoning="ignored", provider_data=data),
        ToolMessage(call_id="toolu_1", name="get_weather", content="sunny"),
        ToolMessage(call_id="toolu_2", name="get_weather", content="no such city", is_error=True),
        UserMessage("And in Rome?"),
    ]

    # When it is sent
    model.generate(ask(*history, tools=[WEATHER]))

    # Then thinking comes first, tool results share one user message with the text after
    body = server.bodies[0]
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert body["max_tokens"] == 4096
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Oslo?"}]},
        {
            "role": "assistant",
            "content": [
                THOUGHT,
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather",
                 "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such city",
                 "is_error": True},
                {"type": "text", "text": "And in Rome?"},
            ],
        },
    ]  # fmt: skip
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER.parameters,
        }
    ]


def test_other_providers_data_and_reasoning_are_not_sent(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    server.script(wire.message(wire.text("ok")))
    foreign = AiMessage(
        "Earlier answer.",
        reasoning="a DeepSeek chain of thought",
        provider_data={"openai": {"reasoning_content": "secret"}},
    )

    model.generate(ask(UserMessage("a"), foreign, AiMessage(), UserMessage("b")))

    assert server.bodies[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Earlier answer."}]},
        {"role": "user", "content": [{"type": "text", "text": "b"}]},
    ]


def test_images_reach_the_wire_as_image_blocks(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    server.script(wire.message(wire.text("a cat")))
    png = base64.b64encode(b"\x89PNG fake").decode()
    parts = [
        TextPart(text="What is this?"),
        ImagePart(url=f"data:image/png;base64,{png}"),
        ImagePart(url="https://example.test/cat.jpg"),
    ]

    model.generate(ask(UserMessage(parts)))

    assert server.bodies[0]["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "image", "source": {"type": "url", "url": "https://example.test/cat.jpg"}},
    ]


def test_prompt_caching_marks_system_tools_and_last_message(server: AnthropicServer) -> None:
    server.script(wire.message(wire.text("ok")), wire.message(wire.text("ok")))
    cached = AnthropicChatModel("claude-test", base_url=server.base_url, prompt_caching=True)
    plain = AnthropicChatModel("claude-test", base_url=server.base_url)
    request = ask(SystemMessage("Be brief."), UserMessage("a"), tools=[WEATHER])

    cached.generate(request)
    plain.generate(request)

    mark = {"type": "ephemeral"}
    body, plain_body = server.bodies
    assert body["system"][-1]["cache_control"] == mark
    assert body["tools"][-1]["cache_control"] == mark
    assert body["messages"][-1]["content"][-1]["cache_control"] == mark
    assert "cache_control" not in str(plain_body)


def test_a_cache_control_mapping_is_used_as_it_is(server: AnthropicServer) -> None:
    server.script(wire.message(wire.text("ok")))
    mark = {"type": "ephemeral", "ttl": "1h"}
    model = AnthropicChatModel("claude-test", base_url=server.base_url, prompt_caching=mark)

    model.generate(ask(SystemMessage("Be brief."), UserMessage("a")))

    assert server.bodies[0]["system"][-1]["cache_control"] == mark


def test_thinking_settings_raise_the_default_max_tokens(server: AnthropicServer) -> None:
    server.script(wire.message(wire.text("ok")), wire.message(wire.text("ok")))
    thinking = {"type": "enabled", "budget_tokens": 2048}
    model = AnthropicChatModel(
        "claude-test", base_url=server.base_url, settings={"thinking": thinking}
    )

    model.generate(ask())
    model.generate(ask(settings={"max_tokens": 9000, "stop": "END", "temperature": 1.0}))

    first, second = server.bodies
    assert (first["thinking"], first["max_tokens"]) == (thinking, 2048 + 4096)
    assert second["max_tokens"] == 9000
    assert (second["stop_sequences"], second["temperature"]) == (["END"], 1.0)
    assert "stop" not in second


def test_tool_choice_is_sent_only_with_tools(server: AnthropicServer) -> None:
    server.script(wire.message(wire.text("ok")), wire.message(wire.text("ok")))
    model = AnthropicChatModel(
        "claude-test", base_url=server.base_url, settings={"tool_choice": {"type": "any"}}
    )

    model.generate(ask())
    model.generate(ask(tools=[WEATHER]))

    assert "tool_choice" not in server.bodies[0]
    assert server.bodies[1]["tool_choice"] == {"type": "any"}


def test_construction_from_environment(
    monkeypatch: pytest.MonkeyPatch, server: AnthropicServer
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("AGENTWORKER_MODEL", "claude-env")
    server.script(wire.message(wire.text("ok")))

    model = AnthropicChatModel()
    model.generate(ask())

    assert server.bodies[0]["model"] == "claude-env"
    assert "sk-ant-env" in key_headers(server)
    assert "anthropic-version" in server.requests[0].headers


def test_an_injected_client_is_used_with_its_retries_off(server: AnthropicServer) -> None:
    client = anthropic.Anthropic(api_key="sk-ant-injected", base_url=server.base_url, max_retries=5)
    server.script(wire.error(529, "overloaded_error", "Overloaded"))

    model = AnthropicChatModel("claude-test", client=client)

    assert model.client.max_retries == 0
    assert model_error(lambda: model.generate(ask())).retryable is True
    assert len(server.requests) == 1
    assert "sk-ant-injected" in key_headers(server)


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_interleaved_thinking_goes_back_between_the_same_tool_uses(
    server: AnthropicServer, model: AnthropicChatModel, streaming: bool
) -> None:
    # Given an answer that thinks again between its two tool uses
    later = wire.thinking("Now Oslo.", "sig-oslo")
    paris = wire.tool_use("toolu_1", "get_weather", {"city": "Paris"})
    oslo = wire.tool_use("toolu_2", "get_weather", {"city": "Oslo"})
    server.script((wire.stream if streaming else wire.message)(THOUGHT, paris, later, oslo))
    server.script(wire.message(wire.text("ok")))
    if streaming:
        answer = streamed(model, ask(tools=[WEATHER]))[-1].response.message
    else:
        answer = model.generate(ask(tools=[WEATHER])).message

    # When it is sent back with its results
    results = [ToolMessage(call_id=c.id, name=c.name, content="ok") for c in answer.tool_calls]
    model.generate(ask(UserMessage("hi"), answer, *results, tools=[WEATHER]))

    # Then its blocks are in the order they came
    assert server.bodies[1]["messages"][1]["content"] == [THOUGHT, paris, later, oslo]


def test_the_sync_and_async_forms_work_over_either_client(server: AnthropicServer) -> None:
    reply = (wire.text("ok"),)
    server.script(*(f(*reply) for f in (wire.message, wire.stream) for _ in range(2)))
    over_async = AnthropicChatModel(
        "claude-test", client=anthropic.AsyncAnthropic(api_key="k", base_url=server.base_url)
    )
    over_sync = AnthropicChatModel("claude-test", base_url=server.base_url)

    async def drain(model: AnthropicChatModel) -> list[Any]:
        return [event async for event in model.astream(ask())]

    assert over_async.prefers_async and not over_sync.prefers_async
    assert over_async.generate(ask()).message.text == "ok"
    assert asyncio.run(over_sync.agenerate(ask())).message.text == "ok"
    assert list(over_async.stream(ask()))[-1].response.message.text == "ok"
    assert asyncio.run(drain(over_sync))[-1].response.message.text == "ok"


def test_a_json_schema_response_format_becomes_the_output_format(
    server: AnthropicServer, model: AnthropicChatModel
) -> None:
    server.script(*(wire.message(wire.text('{"city": "Paris"}')) for _ in range(3)))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    openai_style = {"type": "json_schema", "json_schema": {"name": "City", "schema": schema}}

    model.generate(ask(settings={"response_format": openai_style}))
    model.generate(
        ask(settings={"response_format": openai_style, "output_config": {"effort": "low"}})
    )
    model.generate(ask(settings={"response_format": {"type": "json_object"}}))

    first, second, third = server.bodies
    assert first["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert second["output_config"]["effort"] == "low"
    assert second["output_config"]["format"]["schema"] == schema
    assert "output_config" not in third and "response_format" not in third
