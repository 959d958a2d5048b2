"""Cached input and reasoning tokens: summed over a turn, counted by budgets, shown."""

from __future__ import annotations

from runner_core import (
    Agent,
    AgentBudget,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    ToolCall,
    ToolMessage,
    tool,
)
from runner_core.models import ModelRequest, ModelResponse, Usage

THINKING = Usage(input_tokens=100, output_tokens=60, cached_input_tokens=80, reasoning_tokens=50)


@tool
def noop() -> str:
    """Nothing."""
    return "ok"


def thinker(request: ModelRequest) -> ModelResponse:
    if isinstance(request.messages[-1], ToolMessage):
        return ModelResponse(AiMessage("done"), THINKING)
    return ModelResponse(AiMessage(tool_calls=[ToolCall(id="c1", name="noop")]), THINKING)


def test_a_turn_sums_the_cached_and_reasoning_parts() -> None:
    turn = AgentRunner().run(Agent("t", FunctionModel(thinker), tools=[noop]), "go")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.usage == THINKING + THINKING
    assert turn.usage.reasoning_tokens == 100 and turn.usage.cached_input_tokens == 160


def test_reasoning_tokens_count_against_the_output_budget_and_are_named() -> None:
    policy = AgentExecutionPolicy(budget=AgentBudget(max_output_tokens=55))
    options = AgentTurnOptions(policy=policy)

    turn = AgentRunner().run(
        Agent("t", FunctionModel(thinker), tools=[noop]), "go", options=options
    )

    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    assert turn.terminal_reason == "max_output_tokens (used=60, reasoning=50, limit=55)"


def test_cached_input_counts_against_the_total_budget_and_is_named() -> None:
    policy = AgentExecutionPolicy(budget=AgentBudget(max_total_tokens=150))
    options = AgentTurnOptions(policy=policy)

    turn = AgentRunner().run(
        Agent("t", FunctionModel(thinker), tools=[noop]), "go", options=options
    )

    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    assert turn.terminal_reason == "max_total_tokens (used=160, cached=80, reasoning=50, limit=150)"
