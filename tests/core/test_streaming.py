"""Streaming: deltas become events in order, tool calls are assembled, the flag persists."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from runner_core import (
    Agent,
    AgentEventType,
    AgentRunner,
    AgentToolContext,
    AgentTurnOptions,
    AgentTurnStatus,
    FunctionModel,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    tool,
)
from runner_core.models import INVALID_ARGUMENTS_KEY
from tests.support.scripts import EventLog, tool_messages

E = AgentEventType


def streaming_agent(looked_up: list[str]) -> Agent:
    @tool
    def lookup_order(order_id: str) -> str:
        """Find an order."""
        looked_up.append(AgentToolContext.current().call_id + ":" + order_id)
        return "shipped"

    def stream(request: ModelRequest) -> Iterator[Any]:
        if request.messages[-1].role == "tool":
            yield "It "
            yield TextDelta("shipped.")
            return
        yield ReasoningDelta("need the order")
        yield "Let me check"
        yield ToolCallDelta(0, id="call-1", name="lookup_order", arguments='{"order')
        yield ToolCallDelta(0, arguments='_id": "10')
        yield ToolCallDelta(0, arguments='01"}')

    return Agent("streamer", FunctionModel(stream_fn=stream), tools=[lookup_order])


def test_streaming_emits_deltas_in_order_and_runs_the_assembled_call(
    runner: AgentRunner, events: EventLog
) -> None:
    looked_up: list[str] = []

    options = AgentTurnOptions(streaming=True)
    turn = runner.run(streaming_agent(looked_up), "where?", options=options)

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "It shipped."
    assert looked_up == ["call-1:1001"]
    deltas = [
        (e.type, e.data.get("text"), e.data.get("arguments"))
        for e in events.events
        if e.type in (E.MODEL_TEXT_DELTA, E.MODEL_REASONING_DELTA, E.MODEL_TOOL_CALL_DELTA)
    ]
    assert deltas == [
        (E.MODEL_REASONING_DELTA, "need the order", None),
        (E.MODEL_TEXT_DELTA, "Let me check", None),
        (E.MODEL_TOOL_CALL_DELTA, None, '{"order'),
        (E.MODEL_TOOL_CALL_DELTA, None, '_id": "10'),
        (E.MODEL_TOOL_CALL_DELTA, None, '01"}'),
        (E.MODEL_TEXT_DELTA, "It ", None),
        (E.MODEL_TEXT_DELTA, "shipped.", None),
    ]
    first_delta = events.of(E.MODEL_TOOL_CALL_DELTA)[0]
    assert (first_delta.data["index"], first_delta.data["call_id"], first_delta.data["name"]) == (
        0,
        "call-1",
        "lookup_order",
    )
    # deltas come between MODEL_STARTED and MODEL_COMPLETED
    types = events.types(turn.id)
    first_model = types[types.index(E.MODEL_STARTED) : types.index(E.MODEL_COMPLETED)]
    assert first_model.count(E.MODEL_TOOL_CALL_DELTA) == 3
    ai = turn.messages[1]
    assert ai.reasoning == "need the order"  # type: ignore[union-attr]


def test_streaming_flag_is_persisted(runner: AgentRunner) -> None:
    turn = runner.start(streaming_agent([]), "where?", options=AgentTurnOptions(streaming=True))

    assert turn.streaming is True
    assert runner.restore(turn.id).streaming is True


def test_without_streaming_no_deltas_are_emitted(runner: AgentRunner, events: EventLog) -> None:
    looked_up: list[str] = []

    turn = runner.run(streaming_agent(looked_up), "where?")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.streaming is False
    assert looked_up == ["call-1:1001"]
    assert not {E.MODEL_TEXT_DELTA, E.MODEL_TOOL_CALL_DELTA} & set(events.types())


def test_streamed_arguments_that_are_not_json_go_back_to_the_model(runner: AgentRunner) -> None:
    ran: list[str] = []

    @tool
    def lookup_order(order_id: str) -> str:
        """Find an order."""
        ran.append(order_id)
        return "x"

    def stream(request: ModelRequest) -> Iterator[Any]:
        if request.messages[-1].role == "tool":
            yield "sorry"
            return
        yield ToolCallDelta(0, id="c1", name="lookup_order", arguments='{"order_id": ')

    model = FunctionModel(stream_fn=stream)
    a = Agent("streamer", model, tools=[lookup_order])

    turn = runner.run(a, "go", options=AgentTurnOptions(streaming=True))

    assert turn.status is AgentTurnStatus.COMPLETED
    assert ran == []
    [answer] = tool_messages(turn.messages)
    assert answer.is_error and "arguments are not a JSON object" in answer.content
    ai = turn.messages[1]
    assert ai.tool_calls[0].arguments == {INVALID_ARGUMENTS_KEY: '{"order_id": '}  # type: ignore[union-attr]


def test_generate_only_model_streams_one_text_delta(runner: AgentRunner, events: EventLog) -> None:
    model = FunctionModel(lambda request: "whole answer")

    turn = runner.run(Agent("plain", model), "hi", options=AgentTurnOptions(streaming=True))

    assert turn.final_output == "whole answer"
    assert [e.data["text"] for e in events.of(E.MODEL_TEXT_DELTA)] == ["whole answer"]
