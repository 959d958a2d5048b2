"""OpenAIResponsesModel against a scripted local Responses API server (never a hosted one)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import tests.support.chat_server as chat
import tests.support.responses_wire as wire
from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    RetryPolicy,
    tool,
)
from runner_core.messages import AiMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from runner_core.models import (
    ModelError,
    ModelRequest,
    OpenAIResponsesModel,
    ReasoningDelta,
    StreamDone,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from runner_core.telemetry import model_name, provider_name
from tests.support.chat_server import ChatServer, Reply

LOOK = ToolSpec("look", "Look something up.", {"type": "object", "properties": {}})
SECRET = "gAAAAB-encrypted-reasoning"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def model(server: ChatServer) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("test-model", base_url=server.base_url, timeout=5.0)


def ask() -> ModelRequest:
    return ModelRequest(messages=[SystemMessage("Be brief."), UserMessage("find x")], tools=[LOOK])


def model_error(call: Any) -> ModelError:
    with pytest.raises(ModelError) as info:
        call()
    return info.value


def stateless_with_reasoning(body: dict[str, Any]) -> str | None:
    """What the adapter must send on every request; the server refuses anything else."""
    if body.get("store") is not False:
        return "store must be false"
    if "reasoning.encrypted_content" not in body.get("include", []):
        return "include must ask for reasoning.encrypted_content"
    return None


def replays_the_loop(body: dict[str, Any]) -> str | None:
    """A follow-up with store=False must carry the reasoning item, the call and its output."""
    items = body["input"]
    kinds = [i.get("type") or i.get("role") for i in items]
    if kinds != ["user", "reasoning", "function_call", "function_call_output"]:
        return f"unexpected input items {kinds}"
    if items[1].get("encrypted_content") != SECRET or items[1].get("id") != "rs_1":
        return "reasoning item not replayed with its encrypted content"
    if items[2]["call_id"] != "call_1" or items[3]["call_id"] != "call_1":
        return "function call and output do not match"
    return stateless_with_reasoning(body)


@tool
def look(q: str) -> str:
    """Look something up."""
    return f"{q}=1"


def loop_script(streaming: bool) -> list[Reply]:
    build = wire.stream if streaming else wire.response
    first = build(
        [
            wire.reasoning("rs_1", "I should look.", SECRET),
            wire.function_call("fc_1", "call_1", "look", '{"q": "x"}'),
        ],
        use=wire.usage(50, 30, cached=20, reasoning_tokens=24),
    )
    last = build([wire.message("x is 1")], use=wire.usage(90, 6, cached=40))
    first.require, last.require = stateless_with_reasoning, replays_the_loop
    return [first, last]


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_a_tool_loop_replays_encrypted_reasoning_statelessly(
    server: ChatServer, streaming: bool
) -> None:
    # Given a reasoning model that calls a tool, then answers
    server.script(*loop_script(streaming))
    model = OpenAIResponsesModel("test-model", base_url=server.base_url, timeout=5.0)
    agent = Agent("looker", model, tools=[look])

    # When a turn runs
    turn = AgentRunner().run(agent, "find x", options=AgentTurnOptions(streaming=streaming))

    # Then it completes (the server refused any request that dropped what it needs)
    assert turn.status is AgentTurnStatus.COMPLETED, turn.error
    assert turn.final_output == "x is 1"
    assert turn.usage == Usage(
        input_tokens=140, output_tokens=36, cached_input_tokens=60, reasoning_tokens=24
    )
    assert all(r.path == "/v1/responses" for r in server.requests)
    ai = turn.conversation_history[1]
    assert isinstance(ai, AiMessage) and ai.reasoning == "I should look."
    assert ai.provider_data == {
        "openai_responses": {
            "reasoning": [
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "I should look."}],
                    "encrypted_content": SECRET,
                }
            ]
        }
    }


def test_the_request_carries_instructions_items_and_tools(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    server.script(wire.response([wire.message("ok")]))

    model.generate(ModelRequest(ask().messages, [LOOK], {"reasoning_effort": "low", "seed": 1}))

    body = server.last_body
    assert body["instructions"] == "Be brief."
    assert body["input"] == [{"role": "user", "content": "find x"}]
    assert body["tools"] == [
        {"type": "function", "name": "look", "description": "Look something up.",
         "parameters": {"type": "object", "properties": {}}, "strict": False}
    ]  # fmt: skip
    assert body["reasoning"] == {"effort": "low"}
    assert "seed" not in body


def test_stream_yields_text_reasoning_and_call_deltas(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    server.script(*loop_script(streaming=True)[:1])

    events = list(model.stream(ask()))

    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["I shoul", "d look."]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (deltas[0].id, deltas[0].name) == ("call_1", "look")
    assert "".join(d.arguments for d in deltas) == '{"q": "x"}'
    assert not any(isinstance(e, TextDelta) for e in events)
    done = events[-1]
    assert isinstance(done, StreamDone)
    call = done.response.message.tool_calls[0]
    assert call.arguments == {"q": "x"}
    assert call.provider_data == {"openai_responses": {"id": "fc_1"}}


def test_data_of_another_provider_is_never_sent(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    other = {"openai_chat": {"reasoning_field": "reasoning_content"}}
    call = ToolCall(id="c1", name="look", provider_data={"anthropic": {"sig": "s"}})
    ai = AiMessage(tool_calls=[call], reasoning="theirs", provider_data=other)
    server.script(wire.response([wire.message("ok")]))

    model.generate(
        ModelRequest([UserMessage("a"), ai, ToolMessage(call_id="c1", name="look", content="1")])
    )

    assert server.last_body["input"][1:] == [
        {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
    ]


# --- malformed answers and errors ---------------------------------------------------------


def test_an_unknown_item_type_fails_without_running_anything(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    odd = {"type": "hologram", "id": "h_1"}
    server.script(wire.response([odd, wire.function_call("fc_1", "call_1", "look", "{}")]))

    err = model_error(lambda: model.generate(ask()))

    assert "Responses API" in str(err) and "'hologram'" in str(err)
    assert err.retryable is False


def test_a_stream_cut_before_completion_is_retryable(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    server.script(wire.stream([wire.message("half")], complete=False))

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is True and "before the response completed" in str(err)


def test_an_empty_output_is_retryable(server: ChatServer, model: OpenAIResponsesModel) -> None:
    server.script(wire.response([]))

    assert model_error(lambda: model.generate(ask())).retryable is True


@pytest.mark.parametrize(("code", "retryable"), [("server_error", True), ("invalid_prompt", False)])
def test_a_failed_response_names_its_code(
    server: ChatServer, model: OpenAIResponsesModel, code: str, retryable: bool
) -> None:
    failed = {"code": code, "message": "it broke"}
    server.script(wire.response([], status="failed", error=failed))

    err = model_error(lambda: model.generate(ask()))

    assert code in str(err) and err.retryable is retryable


def test_an_incomplete_response_fails(server: ChatServer, model: OpenAIResponsesModel) -> None:
    cut = {"reason": "max_output_tokens"}
    server.script(wire.response([wire.message("par")], status="incomplete", incomplete_details=cut))

    err = model_error(lambda: model.generate(ask()))

    assert "max_output_tokens" in str(err) and err.retryable is False


def test_an_error_event_in_a_stream_is_retryable(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    event = {"type": "error", "code": "server_error", "message": "boom", "sequence_number": 0}
    server.script(Reply(chunks=[event], named=True))

    err = model_error(lambda: list(model.stream(ask())))

    assert err.retryable is True and "boom" in str(err)


@pytest.mark.parametrize(
    ("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (401, False)]
)
def test_http_errors_are_classified(
    server: ChatServer, model: OpenAIResponsesModel, status: int, retryable: bool
) -> None:
    server.script(chat.error(status, "nope", headers={"retry-after": "3"}))

    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is retryable and err.retry_after == 3.0


def test_a_body_that_is_not_json_is_retryable(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    server.script(Reply(raw=b"<html>bad gateway</html>"))

    assert model_error(lambda: model.generate(ask())).retryable is True


def test_a_rate_limit_schedules_a_retry_after_the_server_asks(server: ChatServer) -> None:
    server.script(chat.error(429, "slow down", headers={"retry-after": "2"}))
    model = OpenAIResponsesModel("test-model", base_url=server.base_url, timeout=5.0)
    runner = AgentRunner(
        policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=0.01))
    )

    before = time.time()

    turn = runner.run(Agent("looker", model, tools=[look]), "find x")

    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.next_runnable_at is not None and turn.next_runnable_at >= before + 2.0


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_an_async_client_runs_the_loop_on_the_event_loop(
    server: ChatServer, streaming: bool
) -> None:
    server.script(*loop_script(streaming))
    client = openai.AsyncOpenAI(api_key="k", base_url=server.base_url, timeout=5.0)
    model = OpenAIResponsesModel(client=client)
    assert model.prefers_async

    turn = AgentRunner().run(
        Agent("looker", model, tools=[look]),
        "find x",
        options=AgentTurnOptions(streaming=streaming),
    )

    assert turn.status is AgentTurnStatus.COMPLETED, turn.error
    assert turn.final_output == "x is 1"


def test_an_answer_goes_back_as_the_output_items_it_came_as(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    # Given a reasoned final answer, then a next question in the same conversation
    answer = [wire.reasoning("rs_9", "sum it", SECRET), wire.message("42", item_id="msg_9")]
    server.script(wire.response(answer), wire.response([wire.message("ok")]))
    first = model.generate(ModelRequest([UserMessage("sum")])).message

    model.generate(ModelRequest([UserMessage("sum"), first, UserMessage("and again?")]))

    # Then the reasoning item is followed by the message item it led to, id and all
    replayed = server.last_body["input"][1:3]
    assert [i["type"] for i in replayed] == ["reasoning", "message"]
    assert replayed[0]["encrypted_content"] == SECRET
    assert replayed[1]["id"] == "msg_9"
    assert replayed[1]["content"] == [{"type": "output_text", "text": "42", "annotations": []}]


def test_reasoning_without_encrypted_content_is_not_kept_for_replay(
    server: ChatServer, model: OpenAIResponsesModel
) -> None:
    bare = wire.reasoning("rs_1", "hmm", SECRET)
    del bare["encrypted_content"]
    server.script(wire.response([bare, wire.message("ok", item_id="msg_1")]))

    message = model.generate(ask()).message

    assert message.reasoning == "hmm"
    assert message.provider_data == {"openai_responses": {"message_id": "msg_1"}}


def test_spans_name_openai_as_the_provider() -> None:
    model = OpenAIResponsesModel("o4-mini", api_key="k")

    assert provider_name(model) == "openai" and model_name(model) == "o4-mini"


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_an_unreachable_server_is_retryable(streaming: bool) -> None:
    url = f"http://127.0.0.1:{chat.closed_port()}/v1"
    model = OpenAIResponsesModel("test-model", base_url=url, timeout=2.0)

    err = model_error(lambda: list(model.stream(ask())) if streaming else model.generate(ask()))

    assert err.retryable is True and "cannot reach" in str(err)


def test_a_timeout_is_retryable(server: ChatServer) -> None:
    server.script(Reply(body=wire.response_body([wire.message("late")]), delay=1.0))
    model = OpenAIResponsesModel("test-model", base_url=server.base_url, timeout=0.2)

    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is True and "timed out" in str(err)


@pytest.mark.parametrize(
    "body",
    [
        {"id": "resp_1", "object": "response"},
        {"id": "resp_1", "object": "response", "output": None},
        {"id": "resp_1", "object": "response", "output": [{"type": "function_call"}]},
    ],
    ids=["no-output", "null-output", "nameless-call"],
)
def test_a_malformed_response_is_a_retryable_error(
    server: ChatServer, model: OpenAIResponsesModel, body: dict[str, Any]
) -> None:
    server.script(Reply(body=body))

    err = model_error(lambda: model.generate(ask()))

    assert err.retryable is True and str(err).startswith("Responses API: ")


def test_a_call_without_a_call_id_is_named_by_the_runner(server: ChatServer) -> None:
    call = wire.function_call("fc_1", "", "look", '{"q": "x"}')
    del call["call_id"]
    server.script(wire.response([call]), wire.response([wire.message("x is 1")]))
    model = OpenAIResponsesModel("test-model", base_url=server.base_url, timeout=5.0)

    turn = AgentRunner().run(Agent("looker", model, tools=[look]), "find x")

    assert turn.status is AgentTurnStatus.COMPLETED
    sent = {i.get("type"): i for i in server.last_body["input"]}
    assert sent["function_call"]["call_id"] == sent["function_call_output"]["call_id"] != ""
