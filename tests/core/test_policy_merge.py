"""A turn's own policy sets what its caller set; the runner's policy gives the rest."""

from __future__ import annotations

from runner_core import (
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    ModelError,
    RetryPolicy,
)
from runner_core.models.base import ModelRequest
from tests.support.scripts import Script, agent


def failing_once() -> Script:
    state = {"calls": 0}

    def answer(request: ModelRequest) -> str:
        state["calls"] += 1
        if state["calls"] == 1:
            raise ModelError("overloaded", retryable=True)
        return "fine"

    return Script(answer)


def test_fields_the_turn_does_not_set_come_from_the_runner() -> None:
    # Given a runner that retries, and a turn whose own policy only bounds its steps
    runner = AgentRunner(policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=2)))
    options = AgentTurnOptions(policy=AgentExecutionPolicy(max_steps=7))

    turn = runner.run(agent(failing_once()), "go", options=options)

    # Then the runner's retry policy applies (before, the turn's defaults replaced it all)
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert runner.kernel.policy(turn).max_steps == 7
    assert runner.kernel.policy(turn).retry.max_retries == 2


def test_a_field_the_turn_sets_wins_over_the_runner() -> None:
    runner = AgentRunner(policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=2)))
    options = AgentTurnOptions(policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=0)))

    turn = runner.run(agent(failing_once()), "go", options=options)

    assert turn.status is AgentTurnStatus.FAILED
