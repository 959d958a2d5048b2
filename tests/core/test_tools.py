"""Tools: schemas, argument validation, tool errors and the tool-error strategies."""

from __future__ import annotations

import pytest

from runner_core import (
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AiMessage,
    ToolCall,
    ToolError,
    ToolErrorStrategy,
    ToolMessage,
    tool,
)
from runner_core.models import INVALID_ARGUMENTS_KEY
from tests.support.scripts import Script, agent, ai_messages, ask, call, content, tool_messages


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


def test_schema_comes_from_type_hints_and_docstring() -> None:
    spec = add.spec

    assert spec.name == "add"
    assert spec.description == "Add two numbers."
    assert spec.parameters["properties"]["a"]["type"] == "integer"
    assert spec.parameters["required"] == ["a"]
    assert spec.parameters["additionalProperties"] is False


def test_tool_decorator_options_and_direct_call() -> None:
    @tool(name="plus", description="Adds.")
    def f(x: int) -> int:
        return x + 1

    assert (f.name, f.spec.description) == ("plus", "Adds.")
    assert f(1) == 2


@pytest.mark.parametrize(
    ("tool_call", "kind", "fragment"),
    [
        (call("add", a="not a number"), "invalid_arguments", "a: Input should be a valid integer"),
        (call("add", b=2), "invalid_arguments", "a: Field required"),
        (call("add", a=1, c=3), "invalid_arguments", "c: Extra inputs are not permitted"),
        (
            ToolCall(id="c1", name="add", arguments={INVALID_ARGUMENTS_KEY: "{a: 1"}),
            "invalid_arguments",
            "arguments are not a JSON object: {a: 1",
        ),
        (call("subtract", a=1), "unknown_tool", "unknown tool 'subtract' (available: add)"),
    ],
    ids=["wrong-type", "missing", "extra", "not-json", "unknown-tool"],
)
def test_malformed_calls_go_back_to_the_model(
    runner: AgentRunner, tool_call: ToolCall, kind: str, fragment: str
) -> None:
    # Given a model whose first call is malformed and which then answers
    script = Script(AiMessage(tool_calls=[tool_call]), "sorry, fixed")

    # When the turn runs
    turn = runner.run(agent(script, add), "add")

    # Then the model got an error ToolMessage for that call id and the turn went on
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "sorry, fixed"
    [answer] = tool_messages(turn.messages)
    assert answer.is_error and answer.call_id == "c1"
    body = content(answer)
    assert body["error"] is True and body["type"] == kind
    assert fragment in body["message"]
    assert turn.tool_call_count == 0
    assert script.requests[1].messages[-1] == answer


def test_valid_call_after_invalid_one_runs(runner: AgentRunner) -> None:
    script = Script(
        AiMessage(tool_calls=[call("add", "c1", a="x"), call("add", "c2", a=2, b=3)]), "5"
    )

    turn = runner.run(agent(script, add), "add")

    first, second = tool_messages(turn.messages)
    assert first.is_error and not second.is_error
    assert second.content == "5"
    assert turn.tool_call_count == 1


def test_tool_error_goes_to_the_model(runner: AgentRunner) -> None:
    @tool
    def lookup(order_id: str) -> str:
        """Find an order."""
        raise ToolError(f"order {order_id} does not exist")

    script = Script(ask(call("lookup", order_id="9")), "no such order")

    turn = runner.run(agent(script, lookup), "where is 9?")

    assert turn.status is AgentTurnStatus.COMPLETED
    [answer] = tool_messages(turn.messages)
    assert answer.is_error
    assert content(answer) == {
        "error": True,
        "type": "tool_error",
        "message": "order 9 does not exist",
    }


def test_plain_exception_fails_the_turn_by_default(runner: AgentRunner) -> None:
    ran: list[str] = []

    @tool
    def explode() -> str:
        """Fail."""
        ran.append("explode")
        raise ValueError("disk on fire")

    @tool
    def later() -> str:
        """Never reached."""
        ran.append("later")
        return "ok"

    script = Script(ask(call("explode", "c1"), call("later", "c2")))

    turn = runner.run(agent(script, explode, later), "go")

    # Then FAILED names the exception, and the history is closed for both pending calls
    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "ValueError: disk on fire"
    assert isinstance(turn.error, ValueError)
    assert ran == ["explode"]
    answers = tool_messages(turn.messages)
    assert [m.call_id for m in answers] == ["c1", "c2"]
    assert all(
        m.content == "Tool call was not completed: ValueError: disk on fire" for m in answers
    )
    closing = ai_messages(turn.messages)[-1]
    assert closing.text == "The previous turn ended before completion: ValueError: disk on fire"
    assert turn.pending_tool_calls == []
    restored = runner.restore(turn.id)
    assert restored.status is AgentTurnStatus.FAILED
    assert str(restored.error) == "ValueError: disk on fire"


def test_plain_exception_returned_to_the_model_with_that_strategy(runner: AgentRunner) -> None:
    @tool
    def explode() -> str:
        """Fail."""
        raise ValueError("disk on fire")

    policy = AgentExecutionPolicy(tool_error_strategy=ToolErrorStrategy.RETURN_ERROR_TO_MODEL)
    script = Script(ask(call("explode")), "the disk is on fire")

    turn = runner.run(agent(script, explode), "go", options=AgentTurnOptions(policy=policy))

    assert turn.status is AgentTurnStatus.COMPLETED
    [answer] = tool_messages(turn.messages)
    assert answer.is_error and answer.call_id == "c1"
    assert content(answer) == {
        "error": True,
        "type": "tool_error",
        "message": "disk on fire",
        "exception": "ValueError",
    }
    assert runner.restore(turn.id).state.policy == policy


def test_tool_results_are_rendered(runner: AgentRunner) -> None:
    @tool
    def text() -> str:
        """Text."""
        return "plain"

    @tool
    def data() -> dict[str, object]:
        """Data."""
        return {"n": 1, "name": "é"}

    script = Script(ask(call("text", "c1"), call("data", "c2")), "ok")

    turn = runner.run(agent(script, text, data), "go")

    first, second = tool_messages(turn.messages)
    assert (first.content, second.content) == ("plain", '{"n": 1, "name": "é"}')


def test_plain_functions_are_accepted_as_tools(runner: AgentRunner) -> None:
    def double(x: int) -> int:
        """Double."""
        return 2 * x

    turn = runner.run(agent(Script(ask(call("double", x=4)), "8"), double), "go")

    assert [m.content for m in tool_messages(turn.messages)] == ["8"]


def test_two_tools_with_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="two tools named 'add'"):
        agent(Script(), add, add)


def test_tool_messages_keep_their_tool_name(runner: AgentRunner) -> None:
    turn = runner.run(agent(Script(ask(call("add", a=1)), "2"), add), "go")

    [answer] = tool_messages(turn.messages)
    assert answer == ToolMessage(id=answer.id, call_id="c1", name="add", content="2")
