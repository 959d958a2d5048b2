"""Retries (RETRY_SCHEDULED, backoff, exhaustion) and limits (budget, iterations, steps)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentBudget,
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnPhase,
    AgentTurnStatus,
    AiMessage,
    ModelError,
    ModelResponse,
    RestoredError,
    RetryPolicy,
    SuspensionType,
    Usage,
    tool,
)
from tests.support.scripts import EventLog, Script, agent, ai_messages, ask, call, tool_messages


def options(**policy: Any) -> AgentTurnOptions:
    return AgentTurnOptions(policy=AgentExecutionPolicy(**policy))


# -- RetryPolicy.delay ------------------------------------------------------------------


def test_retry_delay_grows_exponentially_up_to_max() -> None:
    policy = RetryPolicy(initial_delay=1.0, max_delay=10.0, multiplier=2.0)

    assert [policy.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_retry_delay_defaults_and_other_multiplier() -> None:
    assert RetryPolicy().delay(1) == 1.0
    assert RetryPolicy().delay(100) == 60.0
    assert [RetryPolicy(initial_delay=0.5, multiplier=3).delay(n) for n in (1, 2, 3)] == [
        0.5,
        1.5,
        4.5,
    ]


def test_retry_after_raises_the_floor_only() -> None:
    policy = RetryPolicy(initial_delay=1.0, max_delay=10.0)

    assert policy.delay(1, at_least=7.0) == 7.0
    assert policy.delay(3, at_least=2.0) == 4.0
    assert policy.delay(1, at_least=None) == 1.0


def test_retry_jitter_stays_within_its_bound() -> None:
    policy = RetryPolicy(initial_delay=1.0, jitter=0.5)

    delays = [policy.delay(1) for _ in range(50)]

    assert all(1.0 <= d <= 1.5 for d in delays)


# -- model retries ----------------------------------------------------------------------


def test_retryable_model_error_schedules_retries_then_completes(
    runner: AgentRunner, events: EventLog
) -> None:
    # Given a model that is busy twice and then answers
    script = Script(
        ModelError("busy", retryable=True), ModelError("still busy", retryable=True), "hello"
    )
    opts = options(retry=RetryPolicy(max_retries=3, initial_delay=0.01))

    # When it runs, the turn schedules a retry instead of sleeping
    turn = runner.run(agent(script), "hi", options=opts)
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert (turn.phase, turn.retry_count, turn.iteration_count) == (AgentTurnPhase.MODEL, 1, 1)
    suspension = turn.suspension
    assert suspension is not None and suspension.type is SuspensionType.RETRY
    assert suspension.metadata["delay"] == 0.01
    assert turn.next_runnable_at is not None
    assert 0.0 < turn.next_runnable_at - turn.state.updated_at <= 0.01 + 1e-3
    assert turn.state.error is not None and turn.state.error.message == "busy"

    # Then each retry waits longer, and the third attempt completes
    time.sleep(0.015)
    turn = runner.resume(turn.id, AgentResumeCommand.retry())
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.retry_count == 2
    assert turn.suspension is not None and turn.suspension.metadata["delay"] == 0.02

    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "hello"
    assert (turn.retry_count, turn.iteration_count) == (2, 3)
    scheduled = events.of(AgentEventType.RETRY_SCHEDULED)
    assert [(e.data["attempt"], e.data["error"]["message"]) for e in scheduled] == [
        (1, "busy"),
        (2, "still busy"),
    ]


def test_retry_after_from_the_model_error_delays_the_retry(runner: AgentRunner) -> None:
    script = Script(ModelError("429", retryable=True, retry_after=30.0), then="ok")
    opts = options(retry=RetryPolicy(max_retries=1, initial_delay=0.01))

    turn = runner.run(agent(script), "hi", options=opts)

    assert turn.suspension is not None and turn.suspension.metadata["delay"] == 30.0
    assert turn.next_runnable_at is not None
    assert turn.next_runnable_at - turn.state.updated_at == pytest.approx(30.0, abs=0.1)


def test_non_retryable_model_error_fails_at_once(runner: AgentRunner) -> None:
    script = Script(ModelError("context too long", retryable=False))
    opts = options(retry=RetryPolicy(max_retries=3, initial_delay=0.01))

    turn = runner.run(agent(script), "hi", options=opts)

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "ModelError: context too long"
    assert turn.retry_count == 0
    assert script.calls == 1
    assert ai_messages(turn.messages)[-1].text == (
        "The previous turn ended before completion: ModelError: context too long"
    )


def test_retries_exhausted_fail_the_turn(runner: AgentRunner) -> None:
    script = Script(then=ModelError("busy", retryable=True))
    opts = options(retry=RetryPolicy(max_retries=1, initial_delay=0.01))

    turn = runner.run(agent(script), "hi", options=opts)
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "ModelError: busy"
    assert (turn.retry_count, turn.iteration_count, script.calls) == (1, 2, 2)


def test_retryable_error_without_retries_fails(runner: AgentRunner) -> None:
    turn = runner.run(agent(Script(TimeoutError("read timed out"))), "hi")

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "TimeoutError: read timed out"


def test_empty_model_answer_fails_with_a_clear_reason(runner: AgentRunner) -> None:
    turn = runner.run(agent(Script(AiMessage())), "hi")

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == (
        "ModelError: model returned an empty response (no text, no tool calls)"
    )
    assert turn.final_output is None


def test_empty_model_answer_is_retryable(runner: AgentRunner) -> None:
    opts = options(retry=RetryPolicy(max_retries=1, initial_delay=0.01))

    turn = runner.run(agent(Script(AiMessage(""), then="ok")), "hi", options=opts)

    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED


def test_garbage_from_the_model_fails_with_a_clear_reason(runner: AgentRunner) -> None:
    class Garbage:
        def generate(self, request: Any) -> Any:
            return {"not": "a response"}

    turn = runner.run(Agent("garbage", Garbage()), "hi")  # type: ignore[arg-type]
    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "ModelError: model returned dict, not a ModelResponse"

    turn = runner.run(agent(Script(lambda request: 42)), "hi")
    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "ModelError: FunctionModel returned int, not a response"


def test_unexpected_model_exception_fails_the_turn(runner: AgentRunner) -> None:
    turn = runner.run(agent(Script(KeyError("choices"))), "hi")

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "KeyError: 'choices'"
    assert isinstance(turn.error, KeyError)


# -- budget -----------------------------------------------------------------------------


def test_time_budget_stops_a_retry_that_would_be_due_too_late(runner: AgentRunner) -> None:
    script = Script(ModelError("busy", retryable=True))
    opts = options(
        budget=AgentBudget(max_duration_seconds=5.0),
        retry=RetryPolicy(max_retries=3, initial_delay=60.0),
    )

    turn = runner.run(agent(script), "hi", options=opts)

    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    assert turn.terminal_reason is not None
    assert turn.terminal_reason.startswith("max_duration_seconds (retry due at 60.")
    assert turn.terminal_reason.endswith("limit=5.0)")
    assert turn.next_runnable_at is None and turn.suspension is None
    assert script.calls == 1


def test_time_budget_stops_a_scheduled_retry_once_it_runs_out(runner: AgentRunner) -> None:
    # Given a retry scheduled within a 50 ms budget
    script = Script(ModelError("busy", retryable=True), then="too late")
    opts = options(
        budget=AgentBudget(max_duration_seconds=0.05),
        retry=RetryPolicy(max_retries=3, initial_delay=0.01),
    )
    turn = runner.run(agent(script), "hi", options=opts)
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED

    # When the retry runs after the budget has passed
    time.sleep(0.06)
    turn = runner.resume(turn.id, AgentResumeCommand.retry())

    # Then the turn ends without asking the model again
    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    assert turn.terminal_reason is not None
    assert turn.terminal_reason.startswith("max_duration_seconds (used=0.")
    assert script.calls == 1


def test_token_budget_stops_before_any_tool_side_effect(
    runner: AgentRunner, events: EventLog
) -> None:
    # Given a model whose tool-calling answer already costs 120 of 100 tokens
    ran: list[str] = []

    @tool
    def charge(amount: float) -> str:
        """Charge the card."""
        ran.append("charge")
        return "charged"

    response = ask(
        call("charge", "c1", amount=5.0), usage=Usage(input_tokens=100, output_tokens=20)
    )
    opts = options(budget=AgentBudget(max_total_tokens=100))

    # When the turn runs
    turn = runner.run(agent(Script(response), charge), "buy", options=opts)

    # Then it ends before the tool runs, and the history is closed
    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    reason = "max_total_tokens (used=120, limit=100)"
    assert turn.terminal_reason == reason
    assert ran == []
    assert turn.tool_call_count == 0
    [answer] = tool_messages(turn.messages)
    assert (answer.call_id, answer.content, answer.is_error) == (
        "c1",
        f"Tool call was not completed: {reason}",
        True,
    )
    closing = turn.messages[-1]
    assert isinstance(closing, AiMessage)
    assert closing.text == f"The previous turn ended before completion: {reason}"
    assert len(ai_messages(turn.messages)) == 2
    assert turn.pending_tool_calls == []
    assert AgentEventType.TOOL_STARTED not in events.types()
    assert events.types()[-1] is AgentEventType.BUDGET_EXCEEDED
    assert runner.restore(turn.id).terminal_reason == reason


def test_token_budget_at_the_limit_is_not_exceeded_after_the_response(
    runner: AgentRunner,
) -> None:
    response = ModelResponse(AiMessage("ok"), Usage(input_tokens=60, output_tokens=40))
    opts = options(budget=AgentBudget(max_total_tokens=100))

    turn = runner.run(agent(Script(response)), "hi", options=opts)

    assert turn.status is AgentTurnStatus.COMPLETED


def test_token_budget_stops_the_next_model_call(runner: AgentRunner) -> None:
    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    first = ask(call("noop"), usage=Usage(input_tokens=50, output_tokens=50))
    script = Script(first, then="never")
    opts = options(budget=AgentBudget(max_input_tokens=50))

    turn = runner.run(agent(script, noop), "hi", options=opts)

    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    assert turn.terminal_reason == "max_input_tokens (used=50, limit=50)"
    assert script.calls == 1
    assert turn.tool_call_count == 1


def test_max_tool_calls_stops_before_the_extra_call(runner: AgentRunner) -> None:
    ran: list[str] = []

    @tool
    def step(n: int) -> str:
        """One step."""
        ran.append(str(n))
        return "ok"

    script = Script(ask(call("step", "s1", n=1), call("step", "s2", n=2)))
    opts = options(budget=AgentBudget(max_tool_calls=1))

    turn = runner.run(agent(script, step), "go", options=opts)

    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    assert turn.terminal_reason == "max_tool_calls (used=1, limit=1)"
    assert ran == ["1"]
    first, second = tool_messages(turn.messages)
    assert (first.content, first.is_error) == ("ok", False)
    assert second.call_id == "s2"
    assert second.content == "Tool call was not completed: max_tool_calls (used=1, limit=1)"


def test_duration_budget_checked_at_step_entry(runner: AgentRunner) -> None:
    script = Script(then="never")
    opts = options(budget=AgentBudget(max_duration_seconds=0.02))
    turn = runner.start(agent(script), "hi", options=opts)

    time.sleep(0.03)
    runner.run_until_blocked(turn)

    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    assert script.calls == 0
    assert turn.step_count == 0


# -- iterations and steps ---------------------------------------------------------------


def test_max_iterations_ends_the_turn(runner: AgentRunner, events: EventLog) -> None:
    @tool
    def again() -> str:
        """Loop."""
        return "again"

    script = Script(then=ask(call("again")))

    turn = runner.run(agent(script, again, max_iterations=2), "loop")

    assert turn.status is AgentTurnStatus.MAX_ITERATIONS_REACHED
    assert turn.terminal_reason == "max_iterations (2) reached"
    assert (turn.iteration_count, script.calls, turn.tool_call_count) == (2, 2, 2)
    assert events.types()[-1] is AgentEventType.MAX_ITERATIONS_REACHED
    assert ai_messages(turn.messages)[-1].text == (
        "The previous turn ended before completion: max_iterations (2) reached"
    )


def test_failed_model_requests_count_as_iterations(runner: AgentRunner) -> None:
    script = Script(then=ModelError("busy", retryable=True))
    opts = options(retry=RetryPolicy(max_retries=5, initial_delay=0.01))
    turn = runner.run(agent(script, max_iterations=2), "hi", options=opts)

    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())
    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())

    assert turn.status is AgentTurnStatus.MAX_ITERATIONS_REACHED
    assert script.calls == 2


def test_max_steps_ends_the_turn(runner: AgentRunner, events: EventLog) -> None:
    @tool
    def again() -> str:
        """Loop."""
        return "again"

    script = Script(then=ask(call("again")))

    turn = runner.run(agent(script, again), "loop", options=options(max_steps=3))

    assert turn.status is AgentTurnStatus.MAX_STEPS_REACHED
    assert turn.terminal_reason == "max_steps (3) reached"
    assert turn.step_count == 3
    assert script.calls == 2
    assert events.types()[-1] is AgentEventType.MAX_STEPS_REACHED
    # the pending calls of the last decision are closed with the template
    assert tool_messages(turn.messages)[-1].content == (
        "Tool call was not completed: max_steps (3) reached"
    )


def test_runner_policy_applies_when_the_turn_has_none(make_runner: Any) -> None:
    runner = make_runner(AgentExecutionPolicy(max_steps=1))

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    turn = runner.run(agent(Script(ask(call("noop"))), noop), "go")

    assert turn.status is AgentTurnStatus.MAX_STEPS_REACHED
    assert turn.state.policy is None


def test_custom_closing_templates(runner: AgentRunner) -> None:
    opts = options(
        budget=AgentBudget(max_total_tokens=1),
        interrupted_tool_message_template="[{toolName} {toolCallId}] stopped: {reason}",
        interrupted_turn_message_template="turn {turnId} stopped: {reason}",
    )

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    response = ask(call("noop", "n1"), usage=Usage(input_tokens=2))
    turn = runner.run(agent(Script(response), noop), "go", options=opts)

    reason = "max_total_tokens (used=2, limit=1)"
    assert tool_messages(turn.messages)[0].content == f"[noop n1] stopped: {reason}"
    assert ai_messages(turn.messages)[-1].text == f"turn {turn.id} stopped: {reason}"


def test_step_result_carries_the_retry_error(runner: AgentRunner) -> None:
    error = ModelError("busy", retryable=True)
    opts = options(retry=RetryPolicy(max_retries=1, initial_delay=0.01))
    turn = runner.start(agent(Script(error)), "hi", options=opts)

    result = runner.step(turn)

    assert result.error is error
    assert result.response is None
    assert turn.error is error
    restored = runner.restore(turn.id).error
    assert isinstance(restored, RestoredError)
    assert (restored.type_name, restored.message) == ("ModelError", "busy")
