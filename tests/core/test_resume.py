"""Restore and resume: blocked statuses through the store, refused resumes, crash recovery."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurn,
    AgentTurnOptions,
    AgentTurnPhase,
    AgentTurnSnapshot,
    AgentTurnStatus,
    ConcurrentModificationError,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    InvalidResumeError,
    ModelError,
    RetryPolicy,
    Suspension,
    SuspensionType,
    TurnNotFoundError,
    UserMessage,
    load_snapshot,
    tool,
)
from runner_core.resume import apply_resume
from tests.support.commits import save
from tests.support.scripts import Script, agent, ask, call, tool_messages


class Crash(BaseException):
    """Stands in for the process dying in the middle of a step."""


def approval_turn(runner: AgentRunner, ledger: list[str]) -> AgentTurn:
    @tool(requires_approval=True)
    def refund(amount: float) -> str:
        """Refund."""
        ledger.append(AgentToolContext.current().idempotency_key)
        return "refunded"

    script = Script(ask(call("refund", "r1", amount=10.0)), then="done")
    turn = runner.run(agent(script, refund), "refund")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    return turn


def form_turn(runner: AgentRunner) -> AgentTurn:
    @tool
    def ask_address() -> str:
        """Ask."""
        return str(AgentToolContext.current().request_user_input("address?"))

    turn = runner.run(agent(Script(ask(call("ask_address", "f1")), then="ok"), ask_address), "go")
    assert turn.status is AgentTurnStatus.WAITING_FOR_USER
    return turn


def retry_turn(runner: AgentRunner, delay: float = 60.0) -> AgentTurn:
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=1, initial_delay=delay))
    script = Script(ModelError("busy", retryable=True), then="ok")
    turn = runner.run(agent(script), "go", options=AgentTurnOptions(policy=policy))
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    return turn


def child_wait_snapshot(runner: AgentRunner, store: InMemoryAgentTurnStore) -> AgentTurnSnapshot:
    runner.loader.register(agent(Script(then="ok")))  # type: ignore[attr-defined]
    now = store.now()
    snapshot = AgentTurnSnapshot(
        id="parent-1",
        agent_id="support",
        agent_version="1",
        root_turn_id="parent-1",
        status=AgentTurnStatus.WAITING_FOR_CHILD,
        messages=[UserMessage("plan it")],
        suspension=Suspension(
            type=SuspensionType.CHILD,
            correlation_id="child-1",
            message="waiting for child-1",
            metadata={"child_turn_ids": ["child-1"]},
        ),
        created_at=now,
        updated_at=now,
    )
    save(store, snapshot, -1)
    return snapshot.model_copy(update={"version": 0})


@pytest.mark.parametrize("blocked", ["user", "approval", "retry", "child"])
def test_every_blocked_status_round_trips_through_the_store(
    runner: AgentRunner, store: InMemoryAgentTurnStore, blocked: str
) -> None:
    # Given a turn blocked in each of the four ways
    if blocked == "child":
        expected = child_wait_snapshot(runner, store)
    else:
        make = {
            "user": form_turn,
            "approval": lambda r: approval_turn(r, []),
            "retry": retry_turn,
        }[blocked]
        expected = make(runner).to_snapshot()
    assert expected.status.is_blocked and expected.suspension is not None

    # When it is restored (as a cold process would)
    restored = runner.restore(expected.id)

    # Then it is exactly what was saved, and survives its own JSON too
    assert restored.to_snapshot() == expected
    assert load_snapshot(store.load(expected.id).model_dump_json()) == expected


def test_mismatched_resumes_are_refused_and_change_nothing(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    ledger: list[str] = []
    turn = approval_turn(runner, ledger)
    before = store.load(turn.id)

    wrong = [
        AgentResumeCommand.approve_tool("not-r1"),
        AgentResumeCommand.reject_tool("not-r1"),
        AgentResumeCommand.user_input({"a": 1}, "r1"),
        AgentResumeCommand.retry(),
        AgentResumeCommand.continue_turn(),
        AgentResumeCommand.child_completed("child-1"),
    ]
    for command in wrong:
        with pytest.raises(InvalidResumeError) as caught:
            runner.resume(turn.id, command)
        assert caught.value.turn_id == turn.id

    after = store.load(turn.id)
    assert after == before
    assert (after.version, after.status) == (before.version, AgentTurnStatus.WAITING_FOR_APPROVAL)
    assert ledger == []


def test_wrong_call_id_message_names_both_ids(runner: AgentRunner) -> None:
    turn = approval_turn(runner, [])

    with pytest.raises(InvalidResumeError, match="'nope' is not the one waiting \\('r1'\\)"):
        runner.resume(turn.id, AgentResumeCommand.approve_tool("nope"))


def test_user_input_for_another_call_is_refused(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    turn = form_turn(runner)
    version = store.peek(turn.id).version

    with pytest.raises(InvalidResumeError, match="did not ask for input"):
        runner.resume(turn.id, AgentResumeCommand.user_input("x", "other"))
    with pytest.raises(InvalidResumeError, match="text or a dict"):
        runner.resume(turn.id, AgentResumeCommand.user_input(42, "f1"))  # type: ignore[arg-type]

    assert store.peek(turn.id).version == version
    assert store.peek(turn.id).status is AgentTurnStatus.WAITING_FOR_USER


def test_retry_before_due_is_refused_but_continue_works(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    turn = retry_turn(runner, delay=60.0)
    before = store.load(turn.id)

    with pytest.raises(InvalidResumeError, match="not due"):
        runner.resume(turn.id, AgentResumeCommand.retry())
    assert store.load(turn.id) == before

    done = runner.resume(turn.id, AgentResumeCommand.continue_turn())
    assert done.status is AgentTurnStatus.COMPLETED
    assert done.final_output == "ok"


def test_duplicate_resume_is_refused(runner: AgentRunner, store: InMemoryAgentTurnStore) -> None:
    # Given an approval submitted once (made runnable, not yet run)
    ledger: list[str] = []
    turn = approval_turn(runner, ledger)
    first = runner.submit_resume(turn.id, AgentResumeCommand.approve_tool("r1"))
    assert first.status is AgentTurnStatus.RUNNING
    version = store.peek(turn.id).version

    # When the same approval arrives again
    with pytest.raises(InvalidResumeError, match="not waiting"):
        runner.submit_resume(turn.id, AgentResumeCommand.approve_tool("r1"))

    # Then nothing changed, and the turn still runs the tool once
    assert store.peek(turn.id).version == version
    done = runner.run_until_blocked(runner.restore(turn.id))
    assert done.status is AgentTurnStatus.COMPLETED
    assert ledger == [f"{turn.id}:r1"]
    with pytest.raises(InvalidResumeError, match="COMPLETED, not waiting"):
        runner.resume(turn.id, AgentResumeCommand.approve_tool("r1"))


def test_only_one_of_two_concurrent_resumes_wins(
    loader: InMemoryAgentLoader,
) -> None:
    # Given a store whose loads wait until both resumers have read the waiting turn
    class MeetingStore(InMemoryAgentTurnStore):
        barrier: threading.Barrier | None = None

        def load(self, turn_id: str) -> AgentTurnSnapshot:
            snapshot = super().load(turn_id)
            barrier = self.barrier
            if barrier is not None and threading.current_thread().name.startswith("resumer"):
                self.barrier = None if barrier.n_waiting == 1 else barrier
                barrier.wait(timeout=5)
            return snapshot

    store = MeetingStore()
    ledger: list[str] = []
    runners = [AgentRunner(store, loader), AgentRunner(store, loader)]
    turn = approval_turn(runners[0], ledger)
    store.barrier = threading.Barrier(2)

    # When two runners approve it at the same moment
    outcomes: dict[str, Any] = {}

    def resume(name: str, r: AgentRunner) -> None:
        try:
            outcomes[name] = r.resume(turn.id, AgentResumeCommand.approve_tool("r1")).status
        except Exception as exc:  # noqa: BLE001 - the loser's error is the result
            outcomes[name] = exc

    threads = [
        threading.Thread(target=resume, args=(f"resumer-{i}", r), name=f"resumer-{i}")
        for i, r in enumerate(runners)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)

    # Then exactly one wins, the other gets a version conflict, the refund runs once
    results = list(outcomes.values())
    assert results.count(AgentTurnStatus.COMPLETED) == 1
    [loser] = [r for r in results if isinstance(r, BaseException)]
    assert isinstance(loser, ConcurrentModificationError)
    assert ledger == [f"{turn.id}:r1"]
    assert store.load(turn.id).status is AgentTurnStatus.COMPLETED


def test_two_restored_copies_resumed_in_turn_second_conflicts(
    make_runner: Callable[..., AgentRunner], store: InMemoryAgentTurnStore
) -> None:
    a, b = make_runner(), make_runner()
    turn = approval_turn(a, [])
    copy_a, copy_b = a.restore(turn.id), b.restore(turn.id)

    apply_resume(copy_a.state, AgentResumeCommand.approve_tool("r1"), store.now())
    apply_resume(copy_b.state, AgentResumeCommand.approve_tool("r1"), store.now())
    a.save_snapshot(copy_a)
    with pytest.raises(ConcurrentModificationError) as caught:
        b.save_snapshot(copy_b)

    assert (caught.value.expected, caught.value.actual) == (turn.version, turn.version + 1)
    assert store.load(turn.id).resume_log == copy_a.state.resume_log


def test_completed_tool_is_not_repeated_after_a_crash_between_tools(
    store: InMemoryAgentTurnStore, loader: InMemoryAgentLoader
) -> None:
    # Given a model asking for two tools at once, the second of which kills the process once
    runs = {"charge": 0, "email": 0}

    @tool
    def charge() -> str:
        """Charge the card."""
        runs["charge"] += 1
        return "charged"

    @tool
    def email() -> str:
        """Send a receipt."""
        runs["email"] += 1
        if runs["email"] == 1:
            raise Crash()
        return "sent"

    script = Script(ask(call("charge", "c1"), call("email", "c2")), "all done")
    crashing = AgentRunner(store, loader)
    with pytest.raises(Crash):
        crashing.run(agent(script, charge, email), "buy")

    # When a fresh runner restores the turn from the store and runs it to the end
    stored = store.load(next(iter(store._records)))
    assert (stored.status, stored.phase) == (AgentTurnStatus.RUNNING, AgentTurnPhase.TOOLS)
    assert [c.id for c in stored.pending_tool_calls] == ["c2"]
    fresh = AgentRunner(store, loader)
    done = fresh.run_until_blocked(fresh.restore(stored.id))

    # Then the charge ran exactly once and its saved result was kept
    assert done.status is AgentTurnStatus.COMPLETED
    assert runs == {"charge": 1, "email": 2}
    assert [m.call_id for m in tool_messages(done.messages)] == ["c1", "c2"]
    assert done.tool_call_count == 2
    assert script.calls == 2


def test_crash_during_the_model_call_repeats_only_the_model(
    store: InMemoryAgentTurnStore, loader: InMemoryAgentLoader
) -> None:
    answers: list[Any] = [Crash(), "recovered"]

    def model(request: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    script = Script(model, model)
    crashing = AgentRunner(store, loader)
    with pytest.raises(Crash):
        crashing.run(agent(script), "hi")

    turn_id = next(iter(store._records))
    fresh = AgentRunner(store, loader)
    done = fresh.run_until_blocked(fresh.restore(turn_id))

    assert done.status is AgentTurnStatus.COMPLETED
    assert done.final_output == "recovered"
    assert script.calls == 2


def test_retry_reruns_the_same_pending_tool_without_a_new_model_decision(
    runner: AgentRunner,
) -> None:
    # Given a tool that times out once, and two retries allowed
    trace: list[str] = []

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        trace.append(f"tool {AgentToolContext.current().idempotency_key}")
        if len(trace) == 2:
            raise TimeoutError("upstream slow")
        return "page"

    def decide(request: Any) -> Any:
        trace.append("model")
        return ask(call("fetch", "f1", url="https://x"))

    def answer(request: Any) -> Any:
        trace.append("model")
        return "got it"

    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=0.01))
    script = Script(decide, answer)

    # When the tool fails, the turn schedules a retry in phase TOOLS with the call intact
    turn = runner.run(agent(script, fetch), "fetch", options=AgentTurnOptions(policy=policy))
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.phase is AgentTurnPhase.TOOLS
    assert [c.id for c in turn.pending_tool_calls] == ["f1"]
    assert turn.suspension is not None and turn.suspension.resume_phase is AgentTurnPhase.TOOLS
    assert turn.error is not None and "upstream slow" in str(turn.error)
    assert tool_messages(turn.messages) == []

    # Then continuing re-runs that same call with the same idempotency key
    done = runner.resume(turn.id, AgentResumeCommand.continue_turn())
    key = f"{turn.id}:f1"
    assert trace == ["model", f"tool {key}", f"tool {key}", "model"]
    assert done.status is AgentTurnStatus.COMPLETED
    assert (done.retry_count, done.iteration_count, done.tool_call_count) == (1, 2, 1)
    assert [m.content for m in tool_messages(done.messages)] == ["page"]


def test_due_retry_of_a_tool_runs_via_retry_command(runner: AgentRunner) -> None:
    calls: list[str] = []

    @tool
    def fetch() -> str:
        """Fetch."""
        calls.append(AgentToolContext.current().idempotency_key)
        if len(calls) == 1:
            raise ConnectionError("reset")
        return "page"

    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=1, initial_delay=0.01))
    script = Script(ask(call("fetch", "f1")), "ok")
    turn = runner.run(agent(script, fetch), "go", options=AgentTurnOptions(policy=policy))
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED

    time.sleep(0.02)
    done = runner.resume(turn.id, AgentResumeCommand.retry())

    assert done.status is AgentTurnStatus.COMPLETED
    assert calls == [f"{turn.id}:f1", f"{turn.id}:f1"]
    assert script.calls == 2


def test_resume_unknown_turn_raises(runner: AgentRunner) -> None:
    with pytest.raises(TurnNotFoundError):
        runner.resume("nope", AgentResumeCommand.continue_turn())
