"""What the Chat Completions adapter records of an answer, and replays on the next request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import tests.support.chat_server as wire
from runner_core.messages import AiMessage, ToolCall, ToolMessage, UserMessage
from runner_core.models import ModelRequest, StreamDone, ToolSpec, Usage
from runner_core.models.openai import OpenAIChatModel
from tests.support.chat_server import ChatServer, Reply

LOOK = ToolSpec("look", "Look something up.", {"type": "object", "properties": {}})
SIGNATURE = {"google": {"thought_signature": "c2lnLTE="}}


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def model(server: ChatServer) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=server.base_url, timeout=5.0)


def ask() -> ModelRequest:
    return ModelRequest(messages=[UserMessage("find x")], tools=[LOOK])


def answer(model: OpenAIChatModel, request: ModelRequest, streaming: bool) -> AiMessage:
    if not streaming:
        return model.generate(request).message
    events = list(model.stream(request))
    done = events[-1]
    assert isinstance(done, StreamDone)
    return done.response.message


def follow_up(request: ModelRequest, ai: AiMessage) -> ModelRequest:
    results = [ToolMessage(call_id=c.id, name=c.name, content="x=1") for c in ai.tool_calls]
    return ModelRequest(messages=[*request.messages, ai, *results], tools=request.tools)


def assistants(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


def assistant_of(body: dict[str, Any]) -> dict[str, Any]:
    return assistants(body)[0]


def deepseek_call(streaming: bool) -> Reply:
    if not streaming:
        return wire.completion(
            None, tool_calls=[wire.tool_call("c1", "look", "{}")], reasoning_content="think"
        )
    return Reply(
        chunks=[
            wire.chunk({"role": "assistant", "reasoning_content": "thi"}),
            wire.chunk({"reasoning_content": "nk"}),
            wire.chunk(wire.tool_delta(0, "{}", "c1", "look")),
            wire.chunk(None, usage=wire.usage(10, 5)),
        ]
    )


def gemini_call(streaming: bool) -> Reply:
    call = {**wire.tool_call("c1", "look", "{}"), "extra_content": SIGNATURE}
    second = wire.tool_call("c2", "look", "{}")
    if not streaming:
        return wire.completion(None, tool_calls=[call, second])
    first = wire.tool_delta(0, "{}", "c1", "look")
    first["tool_calls"][0]["extra_content"] = SIGNATURE
    return Reply(
        chunks=[
            wire.chunk({"role": "assistant", **first}),
            wire.chunk(wire.tool_delta(1, "{}", "c2", "look")),
            wire.chunk(None, usage=wire.usage(10, 5)),
        ]
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_deepseek_reasoning_goes_back_beside_the_tool_calls(
    server: ChatServer, model: OpenAIChatModel, streaming: bool
) -> None:
    server.script(deepseek_call(streaming), wire.completion("done"))

    ai = answer(model, ask(), streaming)
    model.generate(follow_up(ask(), ai))

    assert ai.reasoning == "think"
    assert ai.provider_data == {"openai_chat": {"reasoning_field": "reasoning_content"}}
    sent = assistant_of(server.last_body)
    assert sent["reasoning_content"] == "think"
    assert "reasoning" not in sent


@pytest.mark.parametrize("streaming", [False, True])
def test_an_async_client_records_and_replays_the_same(server: ChatServer, streaming: bool) -> None:
    client = openai.AsyncOpenAI(api_key="k", base_url=server.base_url, timeout=5.0)
    model = OpenAIChatModel("test-model", client=client)
    server.script(gemini_call(streaming), deepseek_call(streaming), wire.completion("done"))

    signed = answer(model, ask(), streaming)
    reasoned = answer(model, follow_up(ask(), signed), streaming)
    model.generate(follow_up(follow_up(ask(), signed), reasoned))

    first, second = assistants(server.last_body)
    assert first["tool_calls"][0]["extra_content"] == SIGNATURE
    assert second["reasoning_content"] == "think"


@pytest.mark.parametrize("streaming", [False, True])
def test_gemini_signatures_go_back_on_their_own_calls(
    server: ChatServer, model: OpenAIChatModel, streaming: bool
) -> None:
    server.script(gemini_call(streaming), wire.completion("done"))

    ai = answer(model, ask(), streaming)
    model.generate(follow_up(ask(), ai))

    first, second = ai.tool_calls
    assert first.provider_data == {"openai_chat": {"extra_content": SIGNATURE}}
    assert second.provider_data is None
    calls = assistant_of(server.last_body)["tool_calls"]
    assert calls[0]["extra_content"] == SIGNATURE
    assert "extra_content" not in calls[1]


def test_a_reasoning_parser_field_goes_back_under_its_own_name(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    # vLLM's newer reasoning parsers (and OpenRouter, Ollama) answer in `reasoning`
    reply = wire.completion(None, tool_calls=[wire.tool_call("c1", "look", "{}")], reasoning="r")
    server.script(reply, wire.completion("done"))

    ai = model.generate(ask()).message
    model.generate(follow_up(ask(), ai))

    sent = assistant_of(server.last_body)
    assert sent["reasoning"] == "r" and "reasoning_content" not in sent


def test_reasoning_of_a_plain_answer_goes_back_too(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    # DeepSeek wants every answer of a user turn with tool calls, the last one too
    server.script(wire.completion("first", reasoning_content="think"), wire.completion("done"))

    ai = model.generate(ask()).message
    model.generate(ModelRequest(messages=[UserMessage("a"), ai, UserMessage("b")]))

    assert assistant_of(server.last_body) == {
        "role": "assistant", "content": "first", "reasoning_content": "think"
    }  # fmt: skip


def test_reasoning_the_adapter_did_not_record_is_not_sent(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    server.script(wire.completion("done"))
    ai = AiMessage("first", reasoning="from a FunctionModel, or a record of version 1")

    model.generate(ModelRequest(messages=[UserMessage("a"), ai, UserMessage("b")]))

    assert assistant_of(server.last_body) == {"role": "assistant", "content": "first"}


def test_data_of_another_provider_is_never_sent(server: ChatServer, model: OpenAIChatModel) -> None:
    other = {"anthropic": {"signature": "s"}, "openai_responses": {"items": [{"id": "rs"}]}}
    call = ToolCall(id="c1", name="look", provider_data=other)
    ai = AiMessage(tool_calls=[call], reasoning="theirs", provider_data=other)
    server.script(wire.completion("done"))

    model.generate(follow_up(ask(), ai))

    sent = assistant_of(server.last_body)
    assert set(sent) == {"role", "content", "tool_calls"}
    assert set(sent["tool_calls"][0]) == {"id", "type", "function"}


def test_a_follow_up_without_its_reasoning_is_refused_by_the_server(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    # The test server refuses as DeepSeek does: the check itself can fail
    def require(body: dict[str, Any]) -> str | None:
        sent = assistant_of(body)
        return None if sent.get("reasoning_content") == "think" else "missing reasoning_content"

    server.script(Reply(body=wire.completion("done").body, require=require))
    bare = AiMessage(tool_calls=[ToolCall(id="c1", name="look")], reasoning="think")

    with pytest.raises(Exception, match="missing reasoning_content"):
        model.generate(follow_up(ask(), bare))


@pytest.mark.parametrize("streaming", [False, True])
def test_usage_counts_cached_and_reasoning_tokens(
    server: ChatServer, model: OpenAIChatModel, streaming: bool
) -> None:
    detailed = {
        **wire.usage(100, 40),
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    if streaming:
        reply = Reply(chunks=[wire.chunk({"content": "hi"}), wire.chunk(None, usage=detailed)])
    else:
        reply = wire.completion("hi")
        reply.body["usage"] = detailed
    server.script(reply)

    if streaming:
        done = list(model.stream(ask()))[-1]
        assert isinstance(done, StreamDone)
        usage = done.response.usage
    else:
        usage = model.generate(ask()).usage

    assert usage == Usage(
        input_tokens=100, output_tokens=40, cached_input_tokens=64, reasoning_tokens=30
    )


def test_deepseek_cache_hits_count_as_cached_input(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    reply = wire.completion("hi")
    reply.body["usage"] = {**wire.usage(100, 5), "prompt_cache_hit_tokens": 80}
    server.script(reply)

    assert model.generate(ask()).usage.cached_input_tokens == 80


@pytest.mark.parametrize("streaming", [False, True])
def test_an_answers_own_extra_content_goes_back_on_it(
    server: ChatServer, model: OpenAIChatModel, streaming: bool
) -> None:
    # Gemini may sign a text answer too (the signature is then optional to send back)
    if streaming:
        first = Reply(
            chunks=[wire.chunk({"content": "hi", "extra_content": SIGNATURE}), wire.finish()]
        )
    else:
        first = wire.completion("hi", extra_content=SIGNATURE)
    server.script(first, wire.completion("done"))

    ai = answer(model, ask(), streaming)
    model.generate(ModelRequest(messages=[UserMessage("a"), ai, UserMessage("b")]))

    assert ai.provider_data == {"openai_chat": {"extra_content": SIGNATURE}}
    assert assistant_of(server.last_body)["extra_content"] == SIGNATURE


def test_a_signature_stays_with_its_call_when_indexes_do_not_start_at_0(
    server: ChatServer, model: OpenAIChatModel
) -> None:
    signed = wire.tool_delta(3, "{}", "c2", "look")
    signed["tool_calls"][0]["extra_content"] = SIGNATURE
    first = wire.chunk(wire.tool_delta(1, "{}", "c1", "look"))
    server.script(Reply(chunks=[first, wire.chunk(signed), wire.finish("tool_calls")]))

    first, second = answer(model, ask(), streaming=True).tool_calls

    assert (first.id, first.provider_data) == ("c1", None)
    assert second.id == "c2"
    assert second.provider_data == {"openai_chat": {"extra_content": SIGNATURE}}
