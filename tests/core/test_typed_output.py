"""Typed final output: ``Agent(output_type=...)`` through the final-answer tool."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, Literal

from pydantic import BaseModel

from runner_core import (
    Agent,
    AgentEventType,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    InMemoryChatMemory,
    OutputValidationError,
    UserMessage,
    tool,
)
from runner_core.messages import AiMessage, ToolMessage
from runner_core.models import ModelRequest, ToolCallDelta
from runner_core.output import FINAL_TOOL
from runner_core.testing import EventLog, ScriptedModel, asks, tool_call


class Price(BaseModel):
    """A price in a currency."""

    amount: float
    currency: str


class Quote(BaseModel):
    """What the agent answers with."""

    product: str
    price: Price


class Cat(BaseModel):
    kind: Literal["cat"]
    meows: int


class Dog(BaseModel):
    kind: Literal["dog"]
    barks: int


GOOD = {"product": "lamp", "price": {"amount": 12.5, "currency": "EUR"}}
BAD = {"product": "lamp", "price": {"amount": "cheap", "currency": "EUR"}}


def final(call_id: str = "f1", **arguments: Any) -> AiMessage:
    """A model answer calling the final-answer tool."""
    message = asks(tool_call(FINAL_TOOL, call_id, **arguments))
    assert isinstance(message, AiMessage)
    return message


def quoting(model: ScriptedModel, **kwargs: Any) -> Agent:
    return Agent("quoter", model, output_type=Quote, **kwargs)


def test_a_valid_answer_is_a_typed_output(runner: AgentRunner, events: EventLog) -> None:
    model = ScriptedModel(final(**GOOD))

    turn = runner.run(quoting(model), "price of a lamp?")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.output == Quote(product="lamp", price=Price(amount=12.5, currency="EUR"))
    assert isinstance(turn.output, Quote)
    assert json.loads(turn.final_output or "") == GOOD
    assert turn.state.output == GOOD
    # the model was offered the final-answer tool with the type's schema
    (spec,) = model.requests[0].tools
    assert spec.name == FINAL_TOOL
    assert spec.parameters["properties"].keys() == {"product", "price"}
    # the call is answered, so the history is valid for a next request
    answer = turn.messages[-1]
    assert isinstance(answer, ToolMessage) and answer.call_id == "f1" and not answer.is_error
    assert turn.pending_tool_calls == []
    assert turn.tool_call_count == 0


def test_an_invalid_answer_is_retried_with_the_field_named(runner: AgentRunner) -> None:
    model = ScriptedModel(final("f1", **BAD), final("f2", **GOOD))

    turn = runner.run(quoting(model, output_retries=1), "price of a lamp?")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.output.price.amount == 12.5
    assert turn.state.output_retry_count == 1
    prompt = model.requests[1].messages[-1]
    assert isinstance(prompt, ToolMessage) and prompt.is_error
    assert prompt.call_id == "f1"
    assert "price.amount" in prompt.content
    assert "'cheap'" in prompt.content
    assert FINAL_TOOL in prompt.content


def test_answers_still_invalid_after_the_retries_fail_the_turn(runner: AgentRunner) -> None:
    model = ScriptedModel(then=final(**BAD))

    turn = runner.run(quoting(model, output_retries=2), "price of a lamp?")

    assert turn.status is AgentTurnStatus.FAILED
    assert model.calls == 3
    error = turn.error
    assert isinstance(error, OutputValidationError)
    assert error.field == "price.amount"
    assert error.attempts == 3
    assert "price.amount" in str(error)
    assert turn.state.error is not None
    assert turn.state.error.type == "OutputValidationError"
    assert "price.amount" in turn.state.error.message
    assert turn.output is None
    # the failure closed the protocol: every call of the history has its answer
    calls = {c.id for m in turn.messages if isinstance(m, AiMessage) for c in m.tool_calls}
    answered = {m.call_id for m in turn.messages if isinstance(m, ToolMessage)}
    assert calls == answered
    assert isinstance(turn.messages[-1], AiMessage)


def test_zero_retries_fail_at_the_first_invalid_answer(runner: AgentRunner) -> None:
    model = ScriptedModel(then=final(**BAD))

    turn = runner.run(quoting(model, output_retries=0), "price?")

    assert turn.status is AgentTurnStatus.FAILED
    assert model.calls == 1
    assert "price.amount" in (turn.terminal_reason or "")


def test_a_list_output_travels_wrapped_and_reads_typed(runner: AgentRunner) -> None:
    items = [{"amount": 1, "currency": "EUR"}, {"amount": 2.5, "currency": "USD"}]
    model = ScriptedModel(final(response=items))

    turn = runner.run(Agent("lister", model, output_type=list[Price]), "prices?")

    assert turn.output == [Price(amount=1, currency="EUR"), Price(amount=2.5, currency="USD")]
    (spec,) = model.requests[0].tools
    assert spec.parameters["required"] == ["response"]
    assert spec.parameters["properties"]["response"]["type"] == "array"
    assert "$defs" in spec.parameters  # Price is referenced from the top of the schema
    assert json.loads(turn.final_output or "") == [
        {"amount": 1.0, "currency": "EUR"},
        {"amount": 2.5, "currency": "USD"},
    ]


def test_a_union_output_picks_its_member(runner: AgentRunner) -> None:
    model = ScriptedModel(final(response={"kind": "dog", "barks": 3}))

    turn = runner.run(Agent("pets", model, output_type=Cat | Dog), "which pet?")

    assert turn.output == Dog(kind="dog", barks=3)


def test_a_union_error_names_the_member_field(runner: AgentRunner) -> None:
    model = ScriptedModel(final("f1", response={"kind": "dog", "barks": "loud"}), final("f2"))

    turn = runner.run(Agent("pets", model, output_type=Cat | Dog, output_retries=1), "pet?")

    assert turn.status is AgentTurnStatus.FAILED
    prompt = model.requests[1].messages[-1]
    assert isinstance(prompt, ToolMessage)
    assert "barks" in prompt.content
    assert isinstance(turn.error, OutputValidationError)
    assert turn.error.field == "response"  # the second answer had no value at all


def test_plain_text_is_asked_again_for_the_tool(runner: AgentRunner) -> None:
    model = ScriptedModel("It costs 12.50 EUR.", final(**GOOD))

    turn = runner.run(quoting(model), "price?")

    assert turn.status is AgentTurnStatus.COMPLETED
    prompt = model.requests[1].messages[-1]
    assert isinstance(prompt, UserMessage)
    assert prompt.text.endswith(f"Call {FINAL_TOOL} with the corrected answer as its arguments.")
    assert "JSON only" not in prompt.text


def test_tools_run_before_the_final_answer(runner: AgentRunner) -> None:
    ran: list[str] = []

    @tool
    def lookup(product: str) -> str:
        """Look a product's price up."""
        ran.append(product)
        return "12.5 EUR"

    model = ScriptedModel(asks(tool_call("lookup", "c1", product="lamp")), final(**GOOD))

    turn = runner.run(quoting(model, tools=[lookup]), "price?")

    assert ran == ["lamp"]
    assert turn.output.product == "lamp"
    assert [t.name for t in model.requests[0].tools] == ["lookup", FINAL_TOOL]


def test_calls_beside_an_accepted_answer_never_run(runner: AgentRunner) -> None:
    ran: list[str] = []

    @tool
    def lookup(product: str) -> str:
        """Look a product's price up."""
        ran.append(product)
        return "12.5 EUR"

    both = asks(tool_call("lookup", "c1", product="lamp"), tool_call(FINAL_TOOL, "f1", **GOOD))
    turn = runner.run(quoting(ScriptedModel(both), tools=[lookup]), "price?")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert ran == []
    skipped = next(m for m in turn.messages if isinstance(m, ToolMessage) and m.call_id == "c1")
    assert skipped.is_error and "tool_not_run" in skipped.content


def test_calls_beside_a_refused_answer_still_run(runner: AgentRunner) -> None:
    ran: list[str] = []

    @tool
    def lookup(product: str) -> str:
        """Look a product's price up."""
        ran.append(product)
        return "12.5 EUR"

    both = asks(tool_call("lookup", "c1", product="lamp"), tool_call(FINAL_TOOL, "f1", **BAD))
    model = ScriptedModel(both, final("f2", **GOOD))

    turn = runner.run(quoting(model, tools=[lookup]), "price?")

    assert ran == ["lamp"]
    assert turn.output.price.amount == 12.5
    answered = [m.call_id for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert answered == ["f1", "c1"]


def test_the_final_answer_is_not_a_tool_run_for_listeners(
    runner: AgentRunner, events: EventLog
) -> None:
    model = ScriptedModel(final("f1", **BAD), final("f2", **GOOD))

    runner.run(quoting(model), "price?")

    tool_events = {
        AgentEventType.TOOL_STARTED,
        AgentEventType.TOOL_COMPLETED,
        AgentEventType.TOOL_FAILED,
    }
    assert not [e for e in events.events if e.type in tool_events]
    refused, accepted = events.of(AgentEventType.MODEL_COMPLETED)
    assert refused.data["tool_calls"] == [] and accepted.data["tool_calls"] == []
    assert refused.data["output"] == "invalid"
    assert "price.amount" in refused.data["output_error"]
    assert accepted.data["output"] == "valid"
    (done,) = events.of(AgentEventType.TURN_COMPLETED)
    assert json.loads(done.data["final_output"]) == GOOD


def test_a_restored_turn_continues_the_retry_count(
    make_runner: Callable[..., AgentRunner], loader: InMemoryAgentLoader
) -> None:
    # Given a turn whose first answer was refused, its one retry used
    first = make_runner()
    agent = loader.register(quoting(ScriptedModel(final("f1", **BAD)), output_retries=1))
    turn = first.start(agent, "price?")
    first.step(turn)
    assert turn.state.output_retry_count == 1
    assert turn.status is AgentTurnStatus.RUNNING

    # When another runner (its own agent object, same id and version) goes on
    other_loader = InMemoryAgentLoader([quoting(ScriptedModel(final("f2", **BAD)))])
    other = AgentRunner(turn_store=first.store, agent_loader=other_loader)
    restored = other.restore(turn.id)
    other.run_until_blocked(restored)

    # Then the second refusal is past the retries: the turn fails
    assert restored.status is AgentTurnStatus.FAILED
    assert isinstance(restored.error, OutputValidationError)
    assert restored.error.attempts == 2


def test_the_output_survives_a_restore_in_another_runner(
    make_runner: Callable[..., AgentRunner], loader: InMemoryAgentLoader
) -> None:
    runner = make_runner()
    agent = loader.register(quoting(ScriptedModel(final(**GOOD))))
    done = runner.run(agent, "price?")

    other_loader = InMemoryAgentLoader([quoting(ScriptedModel())])
    other = AgentRunner(turn_store=runner.store, agent_loader=other_loader)
    restored = other.restore(done.id)

    assert isinstance(restored.output, Quote)
    assert restored.output == done.output
    restored.output.product = "changed"  # each read is a fresh instance
    assert restored.output.product == "lamp"


def test_an_agent_without_output_type_is_unchanged(runner: AgentRunner) -> None:
    model = ScriptedModel("plain answer")

    turn = runner.run(Agent("plain", model), "hi")

    assert turn.final_output == "plain answer"
    assert turn.output is None
    assert model.requests[0].tools == [] and model.requests[0].output is None


def test_a_streamed_answer_arrives_as_final_answer_deltas(
    runner: AgentRunner, events: EventLog
) -> None:
    def pieces(request: ModelRequest) -> Iterator[ToolCallDelta]:
        yield ToolCallDelta(0, "f1", FINAL_TOOL, '{"product": "lamp", ')
        yield ToolCallDelta(0, arguments='"price": {"amount": 12.5, "currency": "EUR"}}')

    agent = Agent("quoter", FunctionModel(stream_fn=pieces), output_type=Quote)
    turn = runner.run(agent, "price?", options=AgentTurnOptions(streaming=True))

    assert turn.output == Quote.model_validate(GOOD)
    deltas = events.of(AgentEventType.MODEL_TOOL_CALL_DELTA)
    assert [d.data["name"] for d in deltas] == [FINAL_TOOL, None]


def test_broken_streamed_arguments_are_refused_not_guessed(runner: AgentRunner) -> None:
    def pieces(request: ModelRequest) -> Iterator[ToolCallDelta]:
        if len(request.messages) == 1:
            yield ToolCallDelta(0, "f1", FINAL_TOOL, '{"product": "lamp", "pri')
        else:
            yield ToolCallDelta(0, "f2", FINAL_TOOL, json.dumps(GOOD))

    agent = Agent("quoter", FunctionModel(stream_fn=pieces), output_type=Quote)
    turn = runner.run(agent, "price?", options=AgentTurnOptions(streaming=True))

    assert turn.status is AgentTurnStatus.COMPLETED
    refusal = next(m for m in turn.messages if isinstance(m, ToolMessage) and m.is_error)
    assert "not a JSON object" in refusal.content


def test_a_conversation_goes_on_after_a_typed_answer(
    store: InMemoryAgentTurnStore, loader: InMemoryAgentLoader
) -> None:
    memory = InMemoryChatMemory()
    runner = AgentRunner(
        turn_store=store, agent_loader=loader, chat_memory_provider=lambda cid: memory
    )
    model = ScriptedModel(final("f1", **GOOD), final("f2", **{**GOOD, "product": "desk"}))
    agent = loader.register(quoting(model))

    first = runner.run(agent, "lamp?", conversation_id="c1")
    second = runner.run(agent, "and a desk?", conversation_id="c1")

    assert first.output.product == "lamp" and second.output.product == "desk"
    # the second request replays the first answer's call with its answer, then the question
    replayed = model.requests[1].messages
    roles = [m.role for m in replayed]
    assert roles == ["user", "assistant", "tool", "user"]
    assert isinstance(replayed[2], ToolMessage) and replayed[2].call_id == "f1"


def test_a_cancel_during_the_answer_wins_and_the_answer_is_not_recorded(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    def answer_and_cancel(request: ModelRequest) -> AiMessage:
        store.request_cancellation("t-cancel")
        return final(**GOOD)

    turn = runner.start(quoting(ScriptedModel(answer_and_cancel)), "price?", turn_id="t-cancel")
    turn = runner.run_until_blocked(turn)

    assert turn.status is AgentTurnStatus.CANCELLED
    assert turn.output is None and turn.state.output is None
    # the commit that would record the answer met the cancel: the answer is not recorded
    assert not any(isinstance(m, AiMessage) and m.tool_calls for m in turn.messages)
    assert not any(isinstance(m, ToolMessage) for m in turn.messages)
