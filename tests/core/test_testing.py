"""runner_core.testing: the scripted model users test their agents with."""

from __future__ import annotations

import pytest

from runner_core import (
    Agent,
    AgentEventType,
    AgentRunner,
    AgentTurnStatus,
    ModelError,
    ModelRequest,
    ToolMessage,
    Usage,
    UserMessage,
    tool,
)
from runner_core.testing import EventLog, ScriptedModel, asks, tool_call


@tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: shipped"


def test_a_script_is_played_in_order_and_every_request_is_recorded() -> None:
    model = ScriptedModel(asks(tool_call("lookup", order_id="1001")), "It ships today.")
    log = EventLog()
    runner = AgentRunner()
    runner.add_event_listener(log)
    turn = runner.run(Agent("support", model, tools=[lookup]), "Where is 1001?")
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "It ships today."
    assert model.calls == 2
    results = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [r.content for r in results] == ["order 1001: shipped"]
    assert len(log.of(AgentEventType.TURN_COMPLETED)) == 1
    assert AgentEventType.TOOL_COMPLETED in log.types(turn.id)


def test_an_unexpected_extra_call_is_an_assertion_error() -> None:
    model = ScriptedModel("only answer")
    model.generate(_request())
    with pytest.raises(AssertionError, match="unexpected model call #2"):
        model.generate(_request())


def test_then_answers_once_the_script_runs_out_and_replies_may_raise_or_compute() -> None:
    model = ScriptedModel(ModelError("busy", retryable=True), lambda r: "computed", then="again")
    with pytest.raises(ModelError):
        model.generate(_request())
    assert model.generate(_request()).message.text == "computed"
    assert [model.generate(_request()).message.text for _ in range(2)] == ["again", "again"]


def test_asks_with_usage_is_a_response_that_reports_it() -> None:
    usage = Usage(input_tokens=3, output_tokens=4)
    reply = ScriptedModel(asks(tool_call("lookup", "c9", order_id="1"), usage=usage))
    response = reply.generate(_request())
    assert response.usage == usage
    assert [(c.id, c.name, dict(c.arguments)) for c in response.message.tool_calls] == [
        ("c9", "lookup", {"order_id": "1"})
    ]


def _request() -> ModelRequest:
    return ModelRequest(messages=[UserMessage("hi")])
