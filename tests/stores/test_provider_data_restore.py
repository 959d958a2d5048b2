"""Reasoning and signatures survive Redis: another runner continues a reasoning tool loop.

The scripted server refuses (400) a follow-up that lacks what it sent, as DeepSeek's
thinking mode and Gemini's compatible endpoint do, so a dropped field fails the turn.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tests.support.chat_server as wire
import tests.support.responses_wire as responses
from runner_core import (
    Agent,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    InMemoryAgentLoader,
    tool,
)
from runner_core.models import OpenAIChatModel, OpenAIResponsesModel
from stores.redis import RedisAgentTurnStore
from tests.support.chat_server import ChatServer, Reply
from tests.support.servers import RedisServer

SIGNATURE = {"google": {"thought_signature": "c2lnLTE="}}

Require = Callable[[dict[str, Any]], str | None]


@tool(requires_approval=True)
def look(q: str) -> str:
    """Look something up."""
    return f"{q}=1"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def two_stores(redis_server: RedisServer) -> Iterator[tuple[RedisAgentTurnStore, ...]]:
    """Two store instances on one Redis, like two worker processes."""
    namespace = f"t{uuid.uuid4().hex[:8]}"
    stores = tuple(RedisAgentTurnStore(redis_server.url, namespace=namespace) for _ in "ab")
    yield stores
    for store in stores:
        store.close()


def runner_on(store: RedisAgentTurnStore, server: ChatServer, responses: bool) -> AgentRunner:
    kind = OpenAIResponsesModel if responses else OpenAIChatModel
    agent = Agent("thinker", kind("test-model", base_url=server.base_url), tools=[look])
    return AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader([agent]))


def assistants(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


def wants_reasoning(*expected: str) -> Require:
    def require(body: dict[str, Any]) -> str | None:
        got = [m.get("reasoning_content") for m in assistants(body)]
        return None if got == list(expected) else f"reasoning_content missing: {got}"

    return require


def wants_signature(body: dict[str, Any]) -> str | None:
    calls = [c for m in assistants(body) for c in m.get("tool_calls", [])]
    signed = [c.get("extra_content") == SIGNATURE for c in calls]
    return None if signed and signed[0] else "Function call is missing a thought_signature"


def deepseek_script(streaming: bool) -> list[Reply]:
    def call(call_id: str, reasoning: str, require: Require | None) -> Reply:
        if streaming:
            chunks = [
                wire.chunk({"role": "assistant", "reasoning_content": reasoning}),
                wire.chunk(wire.tool_delta(0, '{"q": "x"}', call_id, "look")),
                wire.chunk(None, usage=wire.usage(10, 5)),
            ]
            return Reply(chunks=chunks, require=require)
        tool_calls = [wire.tool_call(call_id, "look", '{"q": "x"}')]
        reply = wire.completion(None, tool_calls=tool_calls, reasoning_content=reasoning)
        reply.require = require
        return reply

    last = wire.completion("x is 1")
    last.require = wants_reasoning("r1", "r2")
    if streaming:
        last = Reply(
            chunks=[wire.chunk({"content": "x is 1"}), wire.finish()], require=last.require
        )
    return [call("c1", "r1", None), call("c2", "r2", wants_reasoning("r1")), last]


def gemini_script(streaming: bool) -> list[Reply]:
    if streaming:
        delta = wire.tool_delta(0, '{"q": "x"}', "c1", "look")
        delta["tool_calls"][0]["extra_content"] = SIGNATURE
        first = Reply(chunks=[wire.chunk(delta), wire.chunk(None, usage=wire.usage(10, 5))])
        last = Reply(
            chunks=[wire.chunk({"content": "x is 1"}), wire.finish()], require=wants_signature
        )
        return [first, last]
    call = {**wire.tool_call("c1", "look", '{"q": "x"}'), "extra_content": SIGNATURE}
    last = wire.completion("x is 1")
    last.require = wants_signature
    return [wire.completion(None, tool_calls=[call]), last]


def wants_encrypted_reasoning(body: dict[str, Any]) -> str | None:
    items = [i for i in body["input"] if i.get("type") == "reasoning"]
    ok = body["store"] is False and [i.get("encrypted_content") for i in items] == ["enc-1"]
    return None if ok else f"reasoning items not replayed: {items}"


def responses_script(streaming: bool) -> list[Reply]:
    build = responses.stream if streaming else responses.response
    first = build(
        [
            responses.reasoning("rs_1", "look first", "enc-1"),
            responses.function_call("fc_1", "c1", "look", '{"q": "x"}'),
        ]
    )
    last = build([responses.message("x is 1")])
    last.require = wants_encrypted_reasoning
    return [first, last]


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    "script",
    [deepseek_script, gemini_script, responses_script],
    ids=["deepseek", "gemini", "responses"],
)
def test_another_runner_replays_what_the_first_one_received(
    server: ChatServer,
    two_stores: tuple[RedisAgentTurnStore, RedisAgentTurnStore],
    script: Callable[[bool], list[Reply]],
    streaming: bool,
) -> None:
    # Given a reasoning tool loop whose first call waits for approval on one runner
    server.script(*script(streaming))
    on_responses = script is responses_script
    first, second = (runner_on(store, server, on_responses) for store in two_stores)
    options = AgentTurnOptions(streaming=streaming)
    turn = first.run("thinker", "what is x?", options=options)
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL

    # When another runner, on its own store instance, approves each call and continues
    while turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL:
        call_id = second.restore(turn.id).pending_tool_calls[0].id
        second.resume(turn.id, AgentResumeCommand.approve_tool(call_id))
        turn = second.run_until_blocked(second.restore(turn.id))

    # Then every follow-up carried what the server sent (it refuses one that does not)
    assert turn.status is AgentTurnStatus.COMPLETED, turn.error
    assert turn.final_output == "x is 1"
    assert len(server.requests) == len(script(streaming))


@tool
def peek(q: str) -> str:
    """Look something up, no approval needed."""
    return f"{q}=1"


def test_the_next_turn_of_a_conversation_replays_the_last_turns_reasoning(
    server: ChatServer, two_stores: tuple[RedisAgentTurnStore, RedisAgentTurnStore]
) -> None:
    # Given a DeepSeek tool loop in a conversation on one runner, then the next question on
    # another: DeepSeek wants every answer's reasoning of a turn with tool calls, always
    call = wire.completion(
        None, tool_calls=[wire.tool_call("c1", "peek", '{"q": "x"}')], reasoning_content="r1"
    )
    answer = wire.completion("x is 1", reasoning_content="r2")
    answer.require = wants_reasoning("r1")
    again = wire.completion("still 1")
    again.require = wants_reasoning("r1", "r2")
    server.script(call, answer, again)
    runners = []
    for store in two_stores:
        model = OpenAIChatModel("test-model", base_url=server.base_url)
        runners.append(
            AgentRunner(
                turn_store=store,
                agent_loader=InMemoryAgentLoader([Agent("thinker", model, tools=[peek])]),
                chat_memory_provider=store.chat_memory,
            )
        )

    first = runners[0].run("thinker", "what is x?", conversation_id="c-1")
    second = runners[1].run("thinker", "and now?", conversation_id="c-1")

    assert first.status is AgentTurnStatus.COMPLETED, first.error
    assert second.status is AgentTurnStatus.COMPLETED, second.error
    assert second.final_output == "still 1"
