"""Whole turns on AnthropicChatModel: a tool loop with thinking, retries, failures.

The local server checks every follow-up request the way the API does: the thinking
blocks it sent come back unchanged and first, with their signatures, and the results of
one answer's tool calls come back together in one user message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest

import tests.support.anthropic_server as wire
from runner_core import (
    Agent,
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    RetryPolicy,
    ToolError,
    tool,
)
from runner_core.models import AnthropicChatModel, Usage
from tests.support.anthropic_server import AnthropicServer, Expect

THINKING = {"type": "enabled", "budget_tokens": 1024}
FIRST_THOUGHT = wire.thinking("Two cities: ask for both at once.", "sig-A")
HIDDEN = wire.redacted("RVhBTVBMRQ==")
SECOND_THOUGHT = wire.thinking("Oslo failed; try Bergen.", "sig-B")


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    srv = AnthropicServer().start()
    yield srv
    srv.stop()


def weather_agent(server: AnthropicServer, *, client: Any = None) -> Agent:
    @tool
    def get_weather(city: str) -> dict[str, str]:
        """Current weather for a city."""
        if city == "Oslo":
            raise ToolError("no station in Oslo")
        return {"city": city, "sky": "clear"}

    settings = {"thinking": THINKING}
    if client is not None:
        model = AnthropicChatModel("claude-test", client=client, settings=settings)
    else:
        model = AnthropicChatModel(
            "claude-test", base_url=server.base_url, timeout=5.0, settings=settings
        )
    return Agent(id="weather", model=model, instructions="Be brief.", tools=[get_weather])


def assistant(body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The content of the request's ``n``-th assistant message."""
    turns = [m for m in body["messages"] if m["role"] == "assistant"]
    content: list[dict[str, Any]] = turns[n]["content"]
    return content


def expects_first_round(body: dict[str, Any]) -> None:
    """The first answer's blocks, signatures included, and both results in one message."""
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    blocks = assistant(body, 0)
    assert blocks[:2] == [FIRST_THOUGHT, HIDDEN], "thinking blocks must come back first, as sent"
    assert [b["type"] for b in blocks[2:]] == ["text", "tool_use", "tool_use"]
    assert [b["id"] for b in blocks[3:]] == ["toolu_P", "toolu_O"]
    results = body["messages"][2]["content"]
    assert [(r["type"], r["tool_use_id"]) for r in results] == [
        ("tool_result", "toolu_P"),
        ("tool_result", "toolu_O"),
    ], "the results of one answer must come back in one user message"
    assert "clear" in results[0]["content"] and "is_error" not in results[0]
    assert results[1]["is_error"] is True and "no station in Oslo" in results[1]["content"]


def expects_second_round(body: dict[str, Any]) -> None:
    expects_first_round({**body, "messages": body["messages"][:3]})
    assert assistant(body, 1)[0] == SECOND_THOUGHT
    assert body["messages"][4]["content"][0]["tool_use_id"] == "toolu_B"


def tool_loop(reply: Callable[..., wire.Reply]) -> list[wire.Reply]:
    """Two tool rounds with thinking, then the answer; each follow-up checked."""
    both = (
        wire.tool_use("toolu_P", "get_weather", {"city": "Paris"}),
        wire.tool_use("toolu_O", "get_weather", {"city": "Oslo"}),
    )
    return [
        reply(FIRST_THOUGHT, HIDDEN, wire.text("Checking both."), *both,
              use=wire.usage(100, 50, cache_write=20)),
        reply(SECOND_THOUGHT, wire.tool_use("toolu_B", "get_weather", {"city": "Bergen"}),
              use=wire.usage(200, 30, cache_read=120), expect=expects_first_round),
        reply(wire.thinking("Done.", "sig-C"), wire.text("Paris and Bergen are clear."),
              use=wire.usage(300, 10), expect=expects_second_round),
    ]  # fmt: skip


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_a_tool_loop_with_thinking_round_trips_blocks_and_grouped_results(
    server: AnthropicServer, streaming: bool
) -> None:
    # Given a server answering with thinking, parallel calls, a second call, then text
    server.script(*tool_loop(wire.stream if streaming else wire.message))
    runner = AgentRunner()
    seen: list[Any] = []
    runner.add_event_listener(seen.append)

    # When a turn runs
    options = AgentTurnOptions(streaming=streaming)
    turn = runner.run(weather_agent(server), "Weather in Paris and Oslo?", options=options)

    # Then every follow-up carried what the server sent, and the turn completed
    assert server.refused == []
    assert turn.status is AgentTurnStatus.COMPLETED, turn.error
    assert turn.final_output == "Paris and Bergen are clear."
    assert turn.usage == Usage(input_tokens=740, output_tokens=90, cached_input_tokens=120)
    first = server.bodies[0]
    assert first["system"] == [{"type": "text", "text": "Be brief."}]
    assert (first["thinking"], first["max_tokens"]) == (THINKING, 1024 + 4096)
    assert all(body["stream"] is streaming for body in server.bodies)
    if streaming:
        reasoning = [e for e in seen if e.type is AgentEventType.MODEL_REASONING_DELTA]
        assert reasoning, "thinking deltas reach listeners"


def test_a_tool_loop_over_the_async_client(server: AnthropicServer) -> None:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-async", base_url=server.base_url)
    server.script(*tool_loop(wire.stream))
    agent = weather_agent(server, client=client)
    assert agent.model.prefers_async is True  # type: ignore[union-attr]

    turn = AgentRunner().run(agent, "Weather?", options=AgentTurnOptions(streaming=True))

    assert server.refused == []
    assert turn.status is AgentTurnStatus.COMPLETED, turn.error
    assert turn.final_output == "Paris and Bergen are clear."


def test_a_529_is_retry_scheduled_no_sooner_than_retry_after(server: AnthropicServer) -> None:
    # Given an overloaded server asking for 2 seconds, then an answer
    server.script(
        wire.error(529, "overloaded_error", "Overloaded", headers={"retry-after": "2"}),
        wire.message(wire.text("Done.")),
    )
    runner = AgentRunner(
        policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=0.01))
    )
    before = time.time()

    # When the turn runs, it is scheduled (no thread sleeps) at least retry-after later
    turn = runner.run(weather_agent(server), "hi")

    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.next_runnable_at is not None
    assert before + 2.0 <= turn.next_runnable_at <= time.time() + 2.5
    assert turn.error is not None and "529 overloaded_error" in str(turn.error)
    assert time.time() - before < 2.0

    # Then continuing it completes
    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Done."


def test_a_400_fails_the_turn(server: AnthropicServer) -> None:
    server.script(wire.error(400, "invalid_request_error", "messages.1: thinking is invalid"))

    turn = AgentRunner().run(weather_agent(server), "hi")

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.error is not None and "thinking is invalid" in str(turn.error)
    assert len(server.requests) == 1


def test_a_refused_signature_fails_the_turn(server: AnthropicServer) -> None:
    # Given a server that refuses any follow-up (as if the signature did not verify)
    def never(body: dict[str, Any]) -> None:
        raise AssertionError("invalid signature in thinking block")

    expect: Expect = never
    replies = tool_loop(wire.message)[:2]
    replies[1].expect = expect
    server.script(*replies)

    turn = AgentRunner().run(weather_agent(server), "Weather?")

    assert turn.status is AgentTurnStatus.FAILED
    assert "invalid signature" in str(turn.error)


def test_a_garbled_answer_runs_no_tool(server: AnthropicServer) -> None:
    # Given an answer with a tool call and a block of a type the adapter does not know
    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Weather."""
        ran.append(city)
        return "clear"

    call = wire.tool_use("toolu_1", "get_weather", {"city": "Paris"})
    server.script(wire.message(call, {"type": "hologram"}))
    model = AnthropicChatModel("claude-test", base_url=server.base_url, timeout=5.0)

    turn = AgentRunner().run(Agent(id="w", model=model, tools=[get_weather]), "hi")

    assert turn.status is AgentTurnStatus.FAILED
    assert "unknown type 'hologram'" in str(turn.error)
    assert ran == []


def test_a_truncated_stream_is_retried_and_the_turn_completes(server: AnthropicServer) -> None:
    call = wire.tool_use("toolu_1", "get_weather", {"city": "Paris"})
    server.script(
        wire.Reply(events=wire.stream_events(call)[:-3]),
        wire.stream(wire.text("Clear.")),
    )
    runner = AgentRunner(
        policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=0.01))
    )
    options = AgentTurnOptions(streaming=True)

    turn = runner.run(weather_agent(server), "hi", options=options)
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert "before message_stop" in str(turn.error)
    assert turn.pending_tool_calls == []

    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Clear."


def test_a_call_without_an_id_is_named_and_answered_under_that_name(
    server: AnthropicServer,
) -> None:
    # Given an answer whose tool use has no id
    def same_id_both_ways(body: dict[str, Any]) -> None:
        [use] = [b for b in assistant(body, 0) if b["type"] == "tool_use"]
        [result] = body["messages"][2]["content"]
        assert use["id"] and result["tool_use_id"] == use["id"]

    nameless = {"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}}
    server.script(
        wire.message(FIRST_THOUGHT, nameless),
        wire.message(wire.text("Clear."), expect=same_id_both_ways),
    )

    # When the turn runs, the runner names the call, and both sides carry that name
    turn = AgentRunner().run(weather_agent(server), "Paris?")

    assert server.refused == []
    assert turn.status is AgentTurnStatus.COMPLETED, turn.error
