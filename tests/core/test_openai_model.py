"""OpenAIChatModel against a scripted local Chat Completions server (never a hosted one)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any

import openai
import pytest

import tests.support.chat_server as wire
from runner_core import (
    Agent,
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    RetryPolicy,
    tool,
)
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
    INVALID_ARGUMENTS_KEY,
    ModelError,
    ModelRequest,
    ReasoningDelta,
    StreamDone,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from runner_core.models.openai import OpenAIChatModel, parse_retry_after
from tests.support.chat_server import ChatServer, Reply

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def model(server: ChatServer) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=server.base_url, timeout=5.0)


def ask(text: str = "hi", **kwargs: Any) -> ModelRequest:
    return ModelRequest(messages=[UserMessage(text)], **kwargs)


def model_error(call: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        call()
    return info.value


# --- generate: the answer ------------------------------------------------------------------


def test_generate_returns_text_and_usage(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(wire.completion("Hello!", prompt_tokens=12, completion_tokens=3))

    response = model.generate(ask())

    assert response.message.text == "Hello!"
    assert response.message.tool_calls == ()
    assert response.usage == Usage(input_tokens=12, output_tokens=3)
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.last_body["model"] == "test-model"
    assert "stream" not in server.last_body or server.last_body["stream"] is False


def test_tool_calls_keep_their_ids(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(
        wire.completion(
            tool_calls=[
                wire.tool_call("call_abc", "get_weather", '{"city": "Paris"}'),
                wire.tool_call("call_def", "get_weather", '{"city": "Oslo"}'),
            ]
        )
    )

    message = model.generate(ask(tools=[WEATHER])).message

    assert message.text is None
    assert list(message.tool_calls) == [
        ToolCall(id="call_abc", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_def", name="get_weather", arguments={"city": "Oslo"}),
    ]


def test_text_and_tool_call_together(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(
        wire.completion("Let me look.", tool_calls=[wire.tool_call("c1", "get_weather", "{}")])
    )

    message = model.generate(ask(tools=[WEATHER])).message

    assert message.text == "Let me look."
    assert list(message.tool_calls) == [ToolCall(id="c1", name="get_weather", arguments={})]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_text_is_kept(server: ChatServer, model: OpenAIChatModel, field: str) -> None:
    server.script(wire.completion("42", **{field: "six times seven"}))

    message = model.generate(ask()).message

    assert (message.text, message.reasoning) == ("42", "six times seven")


def test_invalid_json_arguments_are_kept_raw(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(wire.completion(tool_calls=[wire.tool_call("c1", "get_weather", '{"city": ')]))

    call = model.generate(ask(tools=[WEATHER])).message.tool_calls[0]

    assert (call.id, call.name) == ("c1", "get_weather")
    assert call.arguments == {INVALID_ARGUMENTS_KEY: '{"city": '}


def test_non_object_json_arguments_are_invalid(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(wire.completion(tool_calls=[wire.tool_call("c1", "get_weather", "[1, 2]")]))

    call = model.generate(ask(tools=[WEATHER])).message.tool_calls[0]

    assert call.arguments == {INVALID_ARGUMENTS_KEY: "[1, 2]"}


@pytest.mark.parametrize("content", [None, ""])
def test_empty_response_is_a_retryable_error(
    server: ChatServer, model: OpenAIChatModel, content: str | None
) -> None:
    server.script(wire.completion(content))

    err = model_error(lambda: model.generate(ask()))

    assert str(err) == "model returned an empty response"
    assert err.retryable is True


def test_no_choices_is_an_empty_response(server: ChatServer, model: OpenAIChatModel) -> None:
    reply = wire.completion("unused")
    reply.body["choices"] = []
    server.script(reply)

    assert model_error(lambda: model.generate(ask())).retryable is True


# --- generate: the request on the wire ----------------------------------------------------


def test_request_body_carries_messages_and_tools_in_wire_shape(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(wire.completion("Sunny."))
    history: list[Message] = [
        SystemMessage("Be brief."),
        UserMessage("Weather in Paris?"),
        AiMessage(
            tool_calls=[ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})],
            reasoning="must not be sent back",
        ),
        ToolMessage(call_id="call_1", name="get_weather", content='{"sky": "clear"}'),
        AiMessage("It is clear."),
        UserMessage("Thanks"),
    ]

    model.generate(
        ModelRequest(
            messages=history,
            tools=[WEATHER],
            settings={"temperature": 0.2, "parallel_tool_calls": False, "max_tokens": 50,
                      "not_a_model_setting": "x"},
        )
    )  # fmt: skip

    body = server.last_body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear"}'},
        {"role": "assistant", "content": "It is clear."},
        {"role": "user", "content": "Thanks"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 50
    assert body["parallel_tool_calls"] is False
    assert "not_a_model_setting" not in body


def test_tool_settings_are_sent_only_with_tools(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(wire.completion("ok"))

    model.generate(ask(settings={"parallel_tool_calls": True, "tool_choice": "auto"}))

    assert "parallel_tool_calls" not in server.last_body
    assert "tool_choice" not in server.last_body
    assert "tools" not in server.last_body


def test_constructor_settings_are_defaults_the_request_overrides(server: ChatServer) -> None:
    model = OpenAIChatModel("m", base_url=server.base_url, settings={"temperature": 0.9, "seed": 7})
    server.script(wire.completion("ok"))

    model.generate(ask(settings={"temperature": 0.1}))

    assert (server.last_body["temperature"], server.last_body["seed"]) == (0.1, 7)


def test_images_reach_the_wire_as_image_url_parts(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(wire.completion("A cat."))
    data_url = "data:image/png;base64,iVBORw0KGgo="
    message = UserMessage(
        [
            TextPart(text="What is in these?"),
            ImagePart(url="https://example.test/cat.jpg", detail="low"),
            ImagePart(url=data_url),
        ]
    )

    model.generate(ModelRequest(messages=[message]))

    assert server.last_body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.test/cat.jpg", "detail": "low"},
                },
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        }
    ]


# --- streaming ----------------------------------------------------------------------------


def test_stream_yields_deltas_and_assembles_split_tool_call_arguments(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(
        Reply(
            chunks=[
                wire.chunk({"role": "assistant", "content": ""}),
                wire.chunk({"content": "Checking "}),
                wire.chunk({"content": "the weather."}),
                wire.chunk(wire.tool_delta(0, "", call_id="call_w", name="get_weather")),
                wire.chunk(wire.tool_delta(0, '{"ci')),
                wire.chunk(wire.tool_delta(0, 'ty": "Pa')),
                wire.chunk(wire.tool_delta(0, 'ris"}')),
                wire.chunk(usage=wire.usage(21, 9)),
            ]
        )
    )

    events = list(model.stream(ask(tools=[WEATHER])))

    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta("Checking "),
        TextDelta("the weather."),
    ]
    assert [e.arguments for e in events if isinstance(e, ToolCallDelta)] == [
        "",
        '{"ci',
        'ty": "Pa',
        'ris"}',
    ]
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.response.message.text == "Checking the weather."
    assert list(done.response.message.tool_calls) == [
        ToolCall(id="call_w", name="get_weather", arguments={"city": "Paris"})
    ]
    assert done.response.usage == Usage(input_tokens=21, output_tokens=9)
    assert server.last_body["stream"] is True
    assert server.last_body["stream_options"] == {"include_usage": True}


def test_stream_interleaves_two_tool_calls_by_index(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(
        Reply(
            chunks=[
                wire.chunk(wire.tool_delta(0, '{"city":', call_id="a", name="get_weather")),
                wire.chunk(wire.tool_delta(1, '{"city":', call_id="b", name="get_weather")),
                wire.chunk(wire.tool_delta(1, '"Oslo"}')),
                wire.chunk(wire.tool_delta(0, '"Rome"}')),
                wire.finish("tool_calls"),
            ]
        )
    )

    done = list(model.stream(ask(tools=[WEATHER])))[-1]

    assert isinstance(done, StreamDone)
    assert list(done.response.message.tool_calls) == [
        ToolCall(id="a", name="get_weather", arguments={"city": "Rome"}),
        ToolCall(id="b", name="get_weather", arguments={"city": "Oslo"}),
    ]
    assert done.response.usage == Usage()


def test_stream_infers_tool_call_indexes_a_server_leaves_out(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    # Gemini's compatible endpoint streams tool calls without "index".
    def call(call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
        piece: dict[str, Any] = {"function": {"arguments": arguments}}
        if call_id:
            piece.update(id=call_id, type="function")
            piece["function"]["name"] = name
        return {"tool_calls": [piece]}

    server.script(
        Reply(
            chunks=[
                wire.chunk(call("g1", "get_weather", '{"city": "Rome"}')),
                wire.chunk(call("g2", "get_weather", '{"city":')),
                wire.chunk(call(None, None, ' "Oslo"}')),
                wire.finish("tool_calls"),
            ]
        )
    )

    done = list(model.stream(ask(tools=[WEATHER])))[-1]

    assert isinstance(done, StreamDone)
    assert list(done.response.message.tool_calls) == [
        ToolCall(id="g1", name="get_weather", arguments={"city": "Rome"}),
        ToolCall(id="g2", name="get_weather", arguments={"city": "Oslo"}),
    ]


def test_tool_calls_without_ids_are_left_for_the_runner_to_name(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    id_less = {"index": 0, "function": {"name": "get_weather", "arguments": "{}"}}
    server.script(Reply(chunks=[wire.chunk({"tool_calls": [id_less]}), wire.finish("tool_calls")]))

    done = list(model.stream(ask(tools=[WEATHER])))[-1]

    assert isinstance(done, StreamDone)
    (call,) = done.response.message.tool_calls
    assert call.id == ""  # the runner fills {turn_id}-{iteration}-{index}
    assert (call.name, call.arguments) == ("get_weather", {})


def test_stream_yields_reasoning_deltas(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(
        Reply(
            chunks=[
                wire.chunk({"reasoning_content": "Think"}),
                wire.chunk({"reasoning_content": "ing."}),
                wire.chunk({"content": "Done."}),
                wire.finish(),
            ]
        )
    )

    events = list(model.stream(ask()))

    assert events[:3] == [ReasoningDelta("Think"), ReasoningDelta("ing."), TextDelta("Done.")]
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert (done.response.message.reasoning, done.response.message.text) == ("Thinking.", "Done.")


def test_stream_with_invalid_arguments_keeps_them_raw(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(
        Reply(
            chunks=[
                wire.chunk(wire.tool_delta(0, "{oops", call_id="c", name="get_weather")),
                wire.finish("tool_calls"),
            ]
        )
    )

    done = list(model.stream(ask(tools=[WEATHER])))[-1]

    assert isinstance(done, StreamDone)
    assert done.response.message.tool_calls[0].arguments == {INVALID_ARGUMENTS_KEY: "{oops"}


def test_empty_stream_is_a_retryable_error(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(
        Reply(chunks=[wire.chunk({"role": "assistant"}), wire.chunk(usage=wire.usage(1, 0))])
    )

    err = model_error(lambda: list(model.stream(ask())))

    assert (str(err), err.retryable) == ("model returned an empty response", True)


def test_stream_http_error_is_mapped(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(wire.error(503, "overloaded", headers={"Retry-After": "3"}))

    err = model_error(lambda: list(model.stream(ask())))

    assert (err.retryable, err.retry_after) == (True, 3.0)


def test_error_event_inside_a_stream_is_retryable(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(
        Reply(chunks=[wire.chunk({"content": "Par"}), {"error": {"message": "engine crashed"}}])
    )

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is True
    assert "engine crashed" in str(err)


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "retryable", "retry_after"),
    [
        pytest.param(
            wire.error(429, "Slow down", headers={"Retry-After": "2"}), True, 2.0, id="429-after-2s"
        ),
        pytest.param(
            wire.error(429, "Slow down", headers={"retry-after-ms": "1500"}), True, 1.5, id="429-ms"
        ),
        pytest.param(
            wire.error(429, "Slow down", code="rate_limit_exceeded"), True, None, id="429"
        ),
        pytest.param(
            wire.error(429, "No credit", code="insufficient_quota"), False, None, id="quota-code"
        ),
        pytest.param(
            wire.error(429, "No credit", type="insufficient_quota"), False, None, id="quota-type"
        ),
        pytest.param(wire.error(500, "Internal error"), True, None, id="500"),
        pytest.param(wire.error(502, "Bad gateway"), True, None, id="502"),
        pytest.param(wire.error(503, "Overloaded"), True, None, id="503"),
        pytest.param(wire.error(400, "Bad messages"), False, None, id="400"),
        pytest.param(wire.error(401, "Incorrect API key"), False, None, id="401"),
        pytest.param(wire.error(403, "Forbidden region"), False, None, id="403"),
        pytest.param(wire.error(404, "No such model"), False, None, id="404"),
        pytest.param(wire.error(422, "Unprocessable"), False, None, id="422"),
        pytest.param(
            wire.error(400, "Too long", code="context_length_exceeded"), False, None, id="context"
        ),
    ],
)
def test_http_errors_are_classified(
    server: ChatServer,
    model: OpenAIChatModel,
    reply: Reply,
    retryable: bool,
    retry_after: float | None,
) -> None:
    server.script(reply)

    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is retryable
    assert err.retry_after == retry_after
    assert str(reply.status) in str(err)
    assert reply.body["error"]["message"] in str(err)
    assert isinstance(err.__cause__, openai.APIStatusError)


def test_sdk_retries_are_off(server: ChatServer, model: OpenAIChatModel) -> None:
    server.script(wire.error(500, "boom"), wire.completion("too late"))

    assert model_error(lambda: model.generate(ask())).retryable is True
    assert len(server.requests) == 1


def test_timeout_is_retryable(server: ChatServer) -> None:
    model = OpenAIChatModel("m", base_url=server.base_url, timeout=0.2)
    server.script(Reply(body=wire.completion("late").body, delay=1.0))

    started = time.monotonic()
    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is True
    assert "timed out" in str(err)
    assert time.monotonic() - started < 1.0


def test_connection_refused_is_retryable() -> None:
    model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{wire.closed_port()}/v1")

    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is True
    assert "cannot reach" in str(err)
    assert isinstance(err.__cause__, openai.APIConnectionError)


def test_connection_refused_while_streaming_is_retryable() -> None:
    model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{wire.closed_port()}/v1")

    assert model_error(lambda: list(model.stream(ask()))).retryable is True


def test_retry_after_parsing() -> None:
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": " 0.5 "}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    in_ten = parse_retry_after({"retry-after": formatdate(time.time() + 10, usegmt=True)})
    assert in_ten is not None and 8.0 <= in_ten <= 10.0
    past = parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert past == 0.0


# --- construction ---------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTWORKER_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_construction_from_environment(clean_env: pytest.MonkeyPatch, server: ChatServer) -> None:
    clean_env.setenv("OPENAI_API_KEY", "sk-from-env")
    clean_env.setenv("OPENAI_BASE_URL", server.base_url)
    clean_env.setenv("AGENTWORKER_MODEL", "env-model")
    server.script(wire.completion("ok"))

    model = OpenAIChatModel()
    model.generate(ask())

    assert model.model == "env-model"
    assert model.client.max_retries == 0
    assert server.last_body["model"] == "env-model"
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_base_url_alone_gets_a_placeholder_key(
    clean_env: pytest.MonkeyPatch, server: ChatServer
) -> None:
    server.script(wire.completion("ok"))

    model = OpenAIChatModel(base_url=server.base_url)
    model.generate(ask())

    assert model.model == "gpt-4o-mini"
    assert server.requests[0].headers["authorization"].startswith("Bearer ")


def test_arguments_win_over_environment(clean_env: pytest.MonkeyPatch, server: ChatServer) -> None:
    clean_env.setenv("OPENAI_API_KEY", "sk-env")
    clean_env.setenv("AGENTWORKER_MODEL", "env-model")
    server.script(wire.completion("ok"))

    OpenAIChatModel("arg-model", api_key="sk-arg", base_url=server.base_url).generate(ask())

    assert server.last_body["model"] == "arg-model"
    assert server.requests[0].headers["authorization"] == "Bearer sk-arg"


def test_injected_client_is_used_with_retries_off(server: ChatServer) -> None:
    client = openai.OpenAI(api_key="sk-injected", base_url=server.base_url, max_retries=5)
    server.script(wire.error(503, "busy"), wire.completion("never reached"))

    model = OpenAIChatModel("m", client=client)

    assert model.client.max_retries == 0
    assert model_error(lambda: model.generate(ask())).retryable is True
    assert len(server.requests) == 1
    assert server.requests[0].headers["authorization"] == "Bearer sk-injected"


# --- whole turns through the runner -------------------------------------------------------


def weather_agent(server: ChatServer) -> Agent:
    @tool
    def get_weather(city: str) -> dict[str, str]:
        """Current weather for a city."""
        return {"city": city, "sky": "clear"}

    model = OpenAIChatModel("test-model", base_url=server.base_url, timeout=5.0)
    return Agent(id="weather", model=model, instructions="Be brief.", tools=[get_weather])


def test_full_tool_calling_turn(server: ChatServer) -> None:
    # Given a server that first asks for the tool, then answers
    server.script(
        wire.completion(
            tool_calls=[wire.tool_call("call_1", "get_weather", '{"city": "Paris"}')],
            prompt_tokens=20,
            completion_tokens=7,
        ),
        wire.completion("Clear skies in Paris.", prompt_tokens=35, completion_tokens=6),
    )

    # When a turn runs
    turn = AgentRunner().run(weather_agent(server), "Weather in Paris?")

    # Then it completes with the answer, the tool round trip, and the summed usage
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Clear skies in Paris."
    assert turn.usage == Usage(input_tokens=55, output_tokens=13)
    history = turn.conversation_history
    assert [type(m) for m in history] == [UserMessage, AiMessage, ToolMessage, AiMessage]
    assert list(history[1].tool_calls) == [  # type: ignore[union-attr]
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})
    ]
    assert history[2].call_id == "call_1"  # type: ignore[union-attr]
    first, second = (r.body for r in server.requests)
    assert first["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]
    assert first["tools"][0]["function"]["description"] == "Current weather for a city."
    assert first["tools"][0]["function"]["parameters"]["properties"]["city"]["type"] == "string"
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_1"
    tool_reply = second["messages"][3]
    assert (tool_reply["role"], tool_reply["tool_call_id"]) == ("tool", "call_1")
    assert "clear" in tool_reply["content"]


def test_streaming_turn_emits_model_deltas(server: ChatServer) -> None:
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

    turn = runner.run(weather_agent(server), "Oslo?", options=AgentTurnOptions(streaming=True))

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Clear in Oslo."
    assert turn.usage == Usage(input_tokens=24, output_tokens=7)
    texts = [e.data["text"] for e in seen if e.type is AgentEventType.MODEL_TEXT_DELTA]
    assert texts == ["Clear ", "in Oslo."]
    assert sum(e.type is AgentEventType.MODEL_TOOL_CALL_DELTA for e in seen) == 2
    assert all(r.body["stream"] is True for r in server.requests)


def test_rate_limit_schedules_a_retry_no_sooner_than_retry_after(server: ChatServer) -> None:
    # Given a 429 asking for 2 seconds, then an answer
    server.script(
        wire.error(429, "Rate limit reached", headers={"Retry-After": "2"}),
        wire.completion("Done."),
    )
    runner = AgentRunner(
        policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=0.01))
    )
    before = time.time()

    # When the turn runs, it waits (no thread sleeps) at least Retry-After
    turn = runner.run(weather_agent(server), "hi")

    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.next_runnable_at is not None
    assert before + 2.0 <= turn.next_runnable_at <= time.time() + 2.5
    assert turn.error is not None and "429" in str(turn.error)
    assert time.time() - before < 2.0

    # Then continuing it early succeeds
    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Done."
    assert len(server.requests) == 2
