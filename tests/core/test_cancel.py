"""Cancellation: waiting turns end at once, running ones at the next check, the flag sticks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runner_core import (
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurnOptions,
    AgentTurnStatus,
    AiMessage,
    ConcurrentModificationError,
    InMemoryAgentTurnStore,
    ModelError,
    RetryPolicy,
    TurnNotFoundError,
    tool,
)
from tests.support.commits import save
from tests.support.scripts import EventLog, Script, agent, ai_messages, ask, call, tool_messages


def test_cancel_of_a_waiting_turn_finalizes_it_without_running_the_tool(
    runner: AgentRunner, store: InMemoryAgentTurnStore, events: EventLog
) -> None:
    # Given a turn waiting for approval of a refund
    ran: list[str] = []

    @tool(requires_approval=True)
    def refund(amount: float) -> str:
        """Refund."""
        ran.append("refund")
        return "refunded"

    script = Script(ask(call("refund", "r1", amount=10.0)))
    turn = runner.run(agent(script, refund), "refund")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL

    # When the caller cancels it with a reason
    cancelled = runner.cancel(turn.id, reason="customer hung up")

    # Then it is CANCELLED now, the pending call answered, one closing message, no tool run
    assert cancelled.status is AgentTurnStatus.CANCELLED
    assert cancelled.terminal_reason == "customer hung up"
    assert ran == []
    assert cancelled.tool_call_count == 0
    [answer] = tool_messages(cancelled.messages)
    assert (answer.call_id, answer.content) == (
        "r1",
        "Tool call was not completed: customer hung up",
    )
    closing = cancelled.messages[-1]
    assert isinstance(closing, AiMessage)
    assert closing.text == "The previous turn ended before completion: customer hung up"
    assert len(ai_messages(cancelled.messages)) == 2
    assert cancelled.pending_tool_calls == [] and cancelled.suspension is None
    stored = store.load(turn.id)
    assert (stored.status, stored.cancel_requested) == (AgentTurnStatus.CANCELLED, True)
    assert events.types(turn.id)[-1] is AgentEventType.TURN_CANCELLED
    assert AgentEventType.CANCELLATION_REQUESTED in events.types(turn.id)
    # and a later approval is refused
    with pytest.raises(Exception, match="CANCELLED, not waiting"):
        runner.resume(turn.id, AgentResumeCommand.approve_tool("r1"))


def test_cancel_uses_the_policy_reason_by_default(runner: AgentRunner) -> None:
    turn = runner.start(agent(Script()), "hi")

    cancelled = runner.cancel(turn.id)

    assert cancelled.status is AgentTurnStatus.CANCELLED
    assert cancelled.terminal_reason == "turn cancelled by caller"


def test_cancel_of_a_ready_turn_never_calls_the_model(runner: AgentRunner) -> None:
    script = Script()
    turn = runner.start(agent(script), "hi")

    runner.cancel(turn.id, reason="nevermind")

    assert runner.restore(turn.id).status is AgentTurnStatus.CANCELLED
    # the caller's copy from before the cancel is stale: stepping it is refused
    with pytest.raises(ConcurrentModificationError):
        runner.step(turn)
    assert script.calls == 0


def test_cancel_of_a_terminal_turn_changes_nothing(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    turn = runner.run(agent(Script("done")), "hi")
    version = store.peek(turn.id).version

    again = runner.cancel(turn.id)

    assert again.status is AgentTurnStatus.COMPLETED
    assert store.peek(turn.id).version == version
    assert store.peek(turn.id).cancel_requested is False
    assert not store.request_cancellation(turn.id)


def test_cancel_unknown_turn_raises(runner: AgentRunner) -> None:
    with pytest.raises(TurnNotFoundError):
        runner.cancel("missing")


def test_cancel_flag_survives_a_stale_save(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    # Given a turn read by a runner before anyone asked to cancel it
    turn = runner.start(agent(Script()), "hi")
    stale = store.load(turn.id)
    assert stale.cancel_requested is False

    # When cancellation is requested, then the stale copy is saved
    assert store.request_cancellation(turn.id, "stop")
    assert not store.request_cancellation(turn.id, "again")
    result = save(store, stale, stale.version)

    # Then the flag and its reason are still set, and the save says so
    assert result.cancel_requested is True
    assert result.version == stale.version + 1
    stored = store.load(turn.id)
    assert (stored.cancel_requested, stored.cancel_reason) == (True, "stop")


def test_runner_save_of_a_stale_turn_learns_the_flag(
    runner: AgentRunner, store: InMemoryAgentTurnStore, events: EventLog
) -> None:
    turn = runner.start(agent(Script()), "hi")
    store.request_cancellation(turn.id)

    runner.save_snapshot(turn)

    assert turn.state.cancel_requested is True
    # the request itself committed the event, once; the runner that learns of it adds none
    assert AgentEventType.CANCELLATION_REQUESTED not in events.types(turn.id)


def test_cancel_during_a_tool_stops_after_that_tool(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    # Given two tools where the first one cancels its own turn midway
    ran: list[str] = []

    @tool
    def first() -> str:
        """Cancel from inside."""
        ran.append("first")
        runner.cancel(AgentToolContext.current().turn_id, reason="user pressed stop")
        return "first done"

    @tool
    def second() -> str:
        """Must not run."""
        ran.append("second")
        return "second done"

    script = Script(ask(call("first", "c1"), call("second", "c2")))

    # When the turn runs
    turn = runner.run(agent(script, first, second), "go")

    # Then the first tool's result is kept, the second never runs, the turn is CANCELLED
    assert turn.status is AgentTurnStatus.CANCELLED
    assert turn.terminal_reason == "user pressed stop"
    assert ran == ["first"]
    assert [(m.call_id, m.content) for m in tool_messages(turn.messages)] == [
        ("c1", "first done"),
        ("c2", "Tool call was not completed: user pressed stop"),
    ]
    assert turn.tool_call_count == 1
    assert script.calls == 1
    assert store.load(turn.id).status is AgentTurnStatus.CANCELLED


def test_cancel_during_a_model_call_ends_before_its_tools(runner: AgentRunner) -> None:
    # Given a turn whose second model decision is cancelled while the model thinks
    ran: list[str] = []

    @tool
    def act(n: int) -> str:
        """Act."""
        ran.append(f"act {n}")
        return "ok"

    def decide_again(request: object) -> object:
        turn_id = next(iter(runner.store._records))  # type: ignore[attr-defined]
        runner.cancel(turn_id, reason="too slow")
        return ask(call("act", "c2", n=2))

    script = Script(ask(call("act", "c1", n=1)), decide_again)

    # When the turn runs
    turn = runner.run(agent(script, act), "go")

    # Then the second decision is never recorded (its commit met the cancel) and none of
    # its tools run: the history ends with the first tool's result and the closing answer
    assert turn.status is AgentTurnStatus.CANCELLED
    assert turn.terminal_reason == "too slow"
    assert ran == ["act 1"]
    assert [m.call_id for m in tool_messages(turn.messages)] == ["c1"]
    asked = [c.id for m in turn.messages if isinstance(m, AiMessage) for c in m.tool_calls]
    assert asked == ["c1"]
    assert isinstance(turn.messages[-1], AiMessage) and not turn.messages[-1].tool_calls
    assert script.calls == 2


def test_tool_sees_the_cancellation_request(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    seen: list[bool] = []

    @tool
    def poll() -> str:
        """Poll the flag."""
        ctx = AgentToolContext.current()
        seen.append(ctx.is_cancellation_requested())
        store.request_cancellation(ctx.turn_id, "halt")
        seen.append(ctx.is_cancellation_requested())
        return "stopped early"

    turn = runner.run(agent(Script(ask(call("poll"))), poll), "go")

    assert seen == [False, True]
    assert turn.status is AgentTurnStatus.CANCELLED
    assert turn.terminal_reason == "halt"


def test_cancel_of_a_retry_scheduled_turn(make_runner: Callable[..., AgentRunner]) -> None:
    runner = make_runner()
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=60.0))
    script = Script(ModelError("busy", retryable=True))
    turn = runner.run(agent(script), "hi", options=AgentTurnOptions(policy=policy))
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED

    cancelled = runner.cancel(turn.id)

    assert cancelled.status is AgentTurnStatus.CANCELLED
    assert cancelled.next_runnable_at is None and cancelled.suspension is None
    assert script.calls == 1


def test_cancel_of_a_leased_turn_is_left_to_its_worker(
    make_runner: Callable[..., AgentRunner], store: InMemoryAgentTurnStore
) -> None:
    # Given a turn held by a worker
    worker_runner, caller = make_runner(), make_runner()
    script = Script(then="never")
    turn = caller.start(agent(script), "hi")
    held = worker_runner.claim(turn.id, "worker-1")
    assert held is not None

    # When another process cancels it, after the claim's own reading went stale
    held.held_lease.fresh_until = 0.0  # type: ignore[union-attr]
    flagged = caller.cancel(turn.id, reason="admin stop")

    # Then only the flag is set; the worker ends the turn at its next check
    assert flagged.status is AgentTurnStatus.READY
    assert store.peek(turn.id).cancel_requested is True
    with worker_runner.holding(held):
        worker_runner.step(held)
    assert held.status is AgentTurnStatus.CANCELLED
    assert held.terminal_reason == "admin stop"
    assert script.calls == 0
    assert store.load(turn.id).status is AgentTurnStatus.CANCELLED


def test_a_step_right_after_its_claim_trusts_the_claims_reading(
    make_runner: Callable[..., AgentRunner], store: InMemoryAgentTurnStore
) -> None:
    # Given a claim that has just read the turn (cancel flag included)
    runner = make_runner()
    turn = runner.start(agent(Script(then="done")), "hi")
    held = runner.claim(turn.id, "worker-1")
    assert held is not None
    peeks: list[str] = []
    real_peek = store.peek
    store.peek = lambda turn_id: peeks.append(turn_id) or real_peek(turn_id)  # type: ignore[method-assign]
    # When the step follows at once
    with runner.holding(held):
        runner.step(held)
    # Then nothing was re-read: neither at the step entry nor after the final answer,
    # whose commit checks the cancel flag itself
    assert held.status is AgentTurnStatus.COMPLETED
    assert peeks == []
