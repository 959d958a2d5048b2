"""Size limits of the library: what comes in is refused, what a tool or model says is cut.

Inputs, metadata and resume data over their limits are refused before anything is stored
(the census, test_typed_errors.py). A tool result or a model answer over its limit is cut
with a marker (``oversized_output="truncate"``, the default) or is an error (``"fail"``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from runner_core import (
    AgentExecutionPolicy,
    AgentLimits,
    AgentRunner,
    AgentTurnStatus,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    PayloadTooLargeError,
    ToolErrorStrategy,
    tool,
)
from tests.support.scripts import Script, agent, ai_messages, ask, call, tool_messages

S = AgentTurnStatus


def _runner(**limits: Any) -> AgentRunner:
    strategy = limits.pop("strategy", ToolErrorStrategy.FAIL_TURN)
    policy = AgentExecutionPolicy(limits=AgentLimits(**limits), tool_error_strategy=strategy)
    return AgentRunner(
        turn_store=InMemoryAgentTurnStore(), agent_loader=InMemoryAgentLoader(), policy=policy
    )


@tool
def dump(size: int) -> str:
    """A result of ``size`` characters (two bytes each)."""
    return "é" * size


def test_the_defaults() -> None:
    limits = AgentExecutionPolicy().limits
    assert (limits.max_input_bytes, limits.max_metadata_bytes) == (1 << 20, 64 << 10)
    assert limits.max_resume_data_bytes == 1 << 20
    assert (limits.max_tool_result_bytes, limits.max_model_answer_bytes) == (1 << 20, 1 << 20)
    assert limits.oversized_output == "truncate"


def test_an_input_at_its_limit_is_taken_and_one_byte_more_is_not() -> None:
    runner = _runner(max_input_bytes=10)
    script = Script(then="ok")

    assert runner.run(agent(script), "é" * 5).status is S.COMPLETED  # 10 bytes
    with pytest.raises(PayloadTooLargeError) as caught:
        runner.run(agent(script), "é" * 5 + "x")

    assert (caught.value.field, caught.value.limit, caught.value.size) == ("input", 10, 11)
    assert "input" in str(caught.value) and "10" in str(caught.value)


def test_a_tool_result_over_its_limit_is_cut_with_a_marker() -> None:
    runner = _runner(max_tool_result_bytes=100)
    script = Script(ask(call("dump", size=500)), then="done")

    turn = runner.run(agent(script, dump), "dump")

    assert turn.status is S.COMPLETED
    (result,) = tool_messages(turn.messages)
    assert len(result.content.encode()) <= 100
    assert result.content.startswith("é")
    assert result.content.endswith("[truncated: 1000 bytes, the limit is 100]")
    assert not result.is_error
    assert script.requests[1].messages[-1] == result  # the model read the cut result


def test_a_tool_result_within_its_limit_is_left_alone() -> None:
    runner = _runner(max_tool_result_bytes=1000)
    turn = runner.run(agent(Script(ask(call("dump", size=500)), then="done"), dump), "dump")
    assert tool_messages(turn.messages)[0].content == "é" * 500


def test_a_tool_result_over_its_limit_fails_the_turn_by_policy() -> None:
    runner = _runner(max_tool_result_bytes=100, oversized_output="fail")

    turn = runner.run(agent(Script(ask(call("dump", size=500)), then="done"), dump), "dump")

    assert turn.status is S.FAILED
    assert turn.state.error is not None
    assert turn.state.error.type == "PayloadTooLargeError"
    assert "limit is 100" in turn.state.error.message
    # the closing protocol answered the call: the history stays valid
    assert tool_messages(turn.messages)[0].is_error


def test_a_failing_result_goes_back_to_the_model_when_the_strategy_says_so() -> None:
    runner = _runner(
        max_tool_result_bytes=100,
        oversized_output="fail",
        strategy=ToolErrorStrategy.RETURN_ERROR_TO_MODEL,
    )
    script = Script(ask(call("dump", size=500)), then="smaller next time")

    turn = runner.run(agent(script, dump), "dump")

    assert turn.status is S.COMPLETED
    (result,) = tool_messages(turn.messages)
    assert result.is_error
    assert json.loads(result.content)["exception"] == "PayloadTooLargeError"


def test_a_model_answer_over_its_limit_is_cut_with_a_marker() -> None:
    runner = _runner(max_model_answer_bytes=200)

    turn = runner.run(agent(Script(then="word " * 100)), "talk")

    assert turn.status is S.COMPLETED
    answer = ai_messages(turn.messages)[-1]
    assert len(answer.model_dump_json().encode()) <= 200
    assert answer.text is not None and answer.text.startswith("word word")
    assert answer.text.endswith("the limit is 200]")
    assert turn.final_output == answer.text


def test_a_model_answer_over_its_limit_fails_the_turn_by_policy() -> None:
    runner = _runner(max_model_answer_bytes=200, oversized_output="fail")

    turn = runner.run(agent(Script(then="word " * 100)), "talk")

    assert turn.status is S.FAILED
    assert turn.state.error is not None
    assert "limit is 200" in turn.state.error.message


def test_tool_calls_too_large_to_cut_fail_the_turn() -> None:
    runner = _runner(max_model_answer_bytes=200)

    turn = runner.run(agent(Script(ask(call("dump", size=1, pad="p" * 300))), dump), "dump")

    assert turn.status is S.FAILED
    assert turn.state.error is not None and "max_model_answer_bytes" in turn.state.error.message
