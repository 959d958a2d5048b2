"""Concurrent tool calls of one model response: one writer, one commit per result."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentBudget,
    AgentEventType,
    AgentExecutionPolicy,
    AgentPlanningPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurnStatus,
    AiMessage,
    ConcurrentModificationError,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    LeaseLostError,
    ModelRequest,
    RetryPolicy,
    ToolErrorStrategy,
    ToolTimeoutError,
    tool,
)
from tests.support.scripts import EventLog, Script, agent, ask, call, tool_messages
from tests.support.toolruns import CommitLog, Ledger

S = AgentTurnStatus
INTERRUPTED = "Tool call was not completed"


@pytest.fixture
def log() -> CommitLog:
    """An in-memory store logging its commits."""
    return CommitLog(InMemoryAgentTurnStore())


def runner_on(store: Any, concurrency: int, **policy: Any) -> AgentRunner:
    return AgentRunner(
        turn_store=store,
        agent_loader=InMemoryAgentLoader(),
        policy=AgentExecutionPolicy(max_tool_concurrency=concurrency, **policy),
    )


def sleeper(ledger: Ledger, seconds: float, **options: Any) -> Any:
    @tool(**options)
    def nap(n: int) -> str:
        """Wait on I/O for a while."""
        call_id = AgentToolContext.current().call_id
        ledger.start(call_id)
        time.sleep(seconds)
        ledger.end(call_id)
        return f"slept {n}"

    return nap


def naps(*ids: str) -> list[Any]:
    return [call("nap", i, n=k) for k, i in enumerate(ids)]


def test_four_slow_calls_finish_together_in_one_step_each_result_its_own_commit(
    log: CommitLog,
) -> None:
    # Given four 0.3 s I/O calls in one response and max_tool_concurrency=4
    ledger = Ledger()
    runner = runner_on(log, 4)
    script = Script(ask(*naps("a", "b", "c", "d")), then="done")
    turn = runner.start(agent(script, sleeper(ledger, 0.3)), "go")
    runner.step(turn)  # the model's calls are recorded
    assert turn.state.phase.value == "TOOLS"

    # When one step runs the tools
    began = time.monotonic()
    runner.step(turn)
    took = time.monotonic() - began

    # Then they ran at once, in one step, and each result was saved by its own commit
    assert took < 0.6, f"four 0.3 s calls took {took:.2f} s"
    assert sorted(ledger.runs) == ["a", "b", "c", "d"]
    assert all(ledger.overlap("a", other) for other in "bcd")
    per_commit = log.answered_per_commit()
    assert sorted(per_commit) == [["a"], ["b"], ["c"], ["d"]]
    assert turn.state.pending_tool_calls == []
    runner.run_until_blocked(turn)
    assert turn.status is S.COMPLETED
    assert sorted(m.call_id for m in tool_messages(turn.messages)) == ["a", "b", "c", "d"]


def test_concurrency_one_runs_calls_one_after_another_in_order() -> None:
    ledger = Ledger()
    runner = runner_on(InMemoryAgentTurnStore(), 1)
    events = EventLog()
    runner.add_event_listener(events)
    script = Script(ask(*naps("a", "b", "c")), then="done")

    turn = runner.run(agent(script, sleeper(ledger, 0.02)), "go")

    assert turn.status is S.COMPLETED
    assert ledger.runs == ["a", "b", "c"]
    assert not any(ledger.overlap(x, y) for x, y in [("a", "b"), ("b", "c"), ("a", "c")])
    assert [m.call_id for m in tool_messages(turn.messages)] == ["a", "b", "c"]
    started = [e.data["call_id"] for e in events.of(AgentEventType.TOOL_STARTED)]
    assert started == ["a", "b", "c"]


def test_a_sequential_tool_is_a_barrier_among_concurrent_calls() -> None:
    # Given a, b, then a sequential s, then c, d, all allowed to run at once
    ledger = Ledger()
    nap = sleeper(ledger, 0.1)

    @tool(sequential=True)
    def settle() -> str:
        """Must run alone."""
        ledger.start("s")
        time.sleep(0.05)
        ledger.end("s")
        return "settled"

    runner = runner_on(InMemoryAgentTurnStore(), 0)
    calls = [*naps("a", "b"), call("settle", "s"), call("nap", "c", n=2), call("nap", "d", n=3)]
    turn = runner.run(agent(Script(ask(*calls), then="done"), nap, settle), "go")

    # Then the barrier ran after a and b ended, and c and d started after it ended
    assert turn.status is S.COMPLETED
    assert ledger.overlap("a", "b") and ledger.overlap("c", "d")
    assert max(ledger.ended["a"], ledger.ended["b"]) <= ledger.started["s"]
    assert ledger.ended["s"] <= min(ledger.started["c"], ledger.started["d"])


def test_refused_calls_are_answered_and_the_others_run_concurrently() -> None:
    ledger = Ledger()
    runner = runner_on(InMemoryAgentTurnStore(), 4)
    calls = [*naps("a", "b"), call("missing", "x"), call("nap", "y", n="not a number")]
    turn = runner.run(agent(Script(ask(*calls), then="done"), sleeper(ledger, 0.1)), "go")

    assert turn.status is S.COMPLETED
    assert sorted(ledger.runs) == ["a", "b"] and ledger.overlap("a", "b")
    answers = {m.call_id: m for m in tool_messages(turn.messages)}
    assert answers["x"].is_error and "unknown_tool" in answers["x"].content
    assert answers["y"].is_error and "invalid_arguments" in answers["y"].content
    assert not answers["a"].is_error and not answers["b"].is_error


def test_progress_from_concurrent_calls_reaches_listeners_one_at_a_time() -> None:
    inside = threading.Lock()
    overlapped: list[str] = []
    seen: list[str] = []

    def listener(event: Any) -> None:
        if event.type is not AgentEventType.TOOL_PROGRESS:
            return
        if not inside.acquire(blocking=False):
            overlapped.append(event.data["call_id"])
            return
        try:
            time.sleep(0.002)  # a slow listener: deliveries would overlap without the lock
            seen.append(event.data["call_id"])
        finally:
            inside.release()

    @tool
    def chatty(n: int) -> str:
        """Reports progress often."""
        ctx = AgentToolContext.current()
        for i in range(20):
            ctx.report_progress(f"{i}", i / 20)
        return "ok"

    runner = runner_on(InMemoryAgentTurnStore(), 4)
    runner.add_event_listener(listener)
    calls = [call("chatty", i, n=0) for i in "abcd"]
    turn = runner.run(agent(Script(ask(*calls), then="done"), chatty), "go")

    assert turn.status is S.COMPLETED
    assert overlapped == []
    assert sorted(set(seen)) == ["a", "b", "c", "d"] and len(seen) == 80


# -- defined behaviour when something happens among several calls --------------------------------
def test_cancel_while_calls_run_saves_what_finished_and_starts_nothing_new(
    log: CommitLog,
) -> None:
    # Given three calls, two at a time; the first asks to cancel the turn while the second runs
    ledger = Ledger()
    runner = runner_on(log, 2)
    canceller = AgentRunner(turn_store=log.inner, agent_loader=runner.loader)
    asked = threading.Event()

    @tool
    def work(n: int) -> str:
        """Works; the first one cancels the turn."""
        call_id = AgentToolContext.current().call_id
        ledger.start(call_id)
        if call_id == "a":
            canceller.cancel(AgentToolContext.current().turn_id, "stop now")
            asked.set()
        else:
            asked.wait(5)
            time.sleep(0.05)
        ledger.end(call_id)
        return f"worked {n}"

    calls = [call("work", i, n=k) for k, i in enumerate("abc")]
    turn = runner.run(agent(Script(ask(*calls), then="never"), work), "go")

    # Then both running calls were answered with their results, c never started,
    # and the turn ended CANCELLED with its history closed
    assert turn.status is S.CANCELLED
    assert sorted(ledger.runs) == ["a", "b"]
    answers = {m.call_id: m for m in tool_messages(turn.messages)}
    assert answers["a"].content == "worked 0" and answers["b"].content == "worked 1"
    assert answers["c"].is_error and INTERRUPTED in answers["c"].content
    assert turn.state.pending_tool_calls == []
    assert sorted(log.answered_per_commit()[:2]) == [["a"], ["b"]]


def test_fail_turn_waits_for_the_calls_in_flight_and_saves_their_results() -> None:
    # Given a fails at once while b still runs; c waits for a free slot
    ledger = Ledger()

    @tool
    def work(n: int) -> str:
        """Fails for a."""
        call_id = AgentToolContext.current().call_id
        ledger.start(call_id)
        if call_id == "a":
            raise RuntimeError("card declined")
        time.sleep(0.1)
        ledger.end(call_id)
        return f"worked {n}"

    runner = runner_on(InMemoryAgentTurnStore(), 2)
    calls = [call("work", i, n=k) for k, i in enumerate("abc")]
    turn = runner.run(agent(Script(ask(*calls), then="never"), work), "go")

    # Then b's result is kept, c never ran, and the turn failed with a's error
    assert turn.status is S.FAILED
    assert turn.state.error is not None and turn.state.error.message == "card declined"
    assert sorted(ledger.runs) == ["a", "b"]
    answers = {m.call_id: m for m in tool_messages(turn.messages)}
    assert answers["b"].content == "worked 1"
    assert INTERRUPTED in answers["a"].content and INTERRUPTED in answers["c"].content


def test_a_retryable_failure_among_several_retries_only_the_unanswered_calls() -> None:
    ledger = Ledger()
    failed: list[str] = []

    @tool
    def work(n: int) -> str:
        """The gateway times out once for a."""
        call_id = AgentToolContext.current().call_id
        ledger.start(call_id)
        if call_id == "a" and not failed:
            failed.append(call_id)
            raise ConnectionError("gateway timeout")
        time.sleep(0.05)
        return f"worked {n}"

    retry = RetryPolicy(max_retries=1, initial_delay=0.0)
    runner = runner_on(InMemoryAgentTurnStore(), 2, retry=retry)
    calls = [call("work", i, n=k) for k, i in enumerate("abc")]
    script = Script(ask(*calls), then="done")
    turn = runner.start(agent(script, work), "go")
    runner.step(turn)
    runner.step(turn)  # the tools: a fails, b is answered, c does not start

    assert turn.status is S.RETRY_SCHEDULED
    assert [c.id for c in turn.state.pending_tool_calls] == ["a", "c"]
    assert [m.call_id for m in tool_messages(turn.messages)] == ["b"]

    turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())
    assert turn.status is S.COMPLETED
    assert sorted(ledger.runs) == ["a", "a", "b", "c"]
    assert script.calls == 2


def test_return_error_to_model_answers_the_failed_call_and_runs_the_rest() -> None:
    @tool
    def work(n: int) -> str:
        """Fails for b."""
        if AgentToolContext.current().call_id == "b":
            raise RuntimeError("nope")
        return f"worked {n}"

    runner = runner_on(
        InMemoryAgentTurnStore(), 3, tool_error_strategy=ToolErrorStrategy.RETURN_ERROR_TO_MODEL
    )
    calls = [call("work", i, n=k) for k, i in enumerate("abc")]
    turn = runner.run(agent(Script(ask(*calls), then="done"), work), "go")

    assert turn.status is S.COMPLETED
    answers = {m.call_id: m for m in tool_messages(turn.messages)}
    assert answers["b"].is_error and "nope" in answers["b"].content
    assert answers["a"].content == "worked 0" and answers["c"].content == "worked 2"


def test_max_tool_calls_reserves_the_batch_runs_what_fits_then_stops() -> None:
    # Given a budget of two tool calls and three calls that could all run at once
    ledger = Ledger()
    budget = AgentBudget(max_tool_calls=2)
    runner = runner_on(InMemoryAgentTurnStore(), 3, budget=budget)
    script = Script(ask(*naps("a", "b", "c")), then="never")

    turn = runner.run(agent(script, sleeper(ledger, 0.05)), "go")

    # Then only the two that fit ran (together); the turn is out of budget
    assert turn.status is S.BUDGET_EXCEEDED
    assert sorted(ledger.runs) == ["a", "b"] and ledger.overlap("a", "b")
    assert turn.state.terminal_reason is not None
    assert "max_tool_calls" in turn.state.terminal_reason
    assert turn.tool_call_count == 2
    answers = {m.call_id: m for m in tool_messages(turn.messages)}
    assert answers["a"].content == "slept 0" and INTERRUPTED in answers["c"].content


def test_user_input_in_one_of_several_calls_suspends_after_the_others_finish() -> None:
    ledger = Ledger()

    @tool
    def ship(n: int) -> str:
        """Ships; a asks where to."""
        ctx = AgentToolContext.current()
        ledger.start(ctx.call_id)
        if ctx.call_id == "a":
            where = ctx.request_user_input("where to?")
            return f"shipped to {where}"
        time.sleep(0.1)
        ledger.end(ctx.call_id)
        return f"shipped {n}"

    runner = runner_on(InMemoryAgentTurnStore(), 3)
    calls = [call("ship", i, n=k) for k, i in enumerate("abc")]
    turn = runner.run(agent(Script(ask(*calls), then="done"), ship), "go")

    # Then the others were answered first and the turn waits for a's input
    assert turn.status is S.WAITING_FOR_USER
    assert turn.suspension is not None and turn.suspension.correlation_id == "a"
    assert [c.id for c in turn.state.pending_tool_calls] == ["a"]
    assert sorted(m.call_id for m in tool_messages(turn.messages)) == ["b", "c"]

    done = runner.resume(turn.id, AgentResumeCommand.user_input("Lyon", call_id="a"))
    assert done.status is S.COMPLETED
    assert sorted(ledger.runs) == ["a", "a", "b", "c"]
    answers = {m.call_id: m for m in tool_messages(done.messages)}
    assert answers["a"].content == "shipped to Lyon"


@pytest.fixture
def memory() -> Iterator[InMemoryAgentTurnStore]:
    yield InMemoryAgentTurnStore()


def test_a_lost_lease_mid_batch_commits_nothing_more_and_raises(
    memory: InMemoryAgentTurnStore,
) -> None:
    # Given worker A steps a batch without a heartbeat; worker B takes the turn over
    # while A's calls run
    ledger = Ledger()
    runner = runner_on(memory, 2)
    taken = threading.Event()

    @tool
    def work(n: int) -> str:
        """The first call sees the turn taken over."""
        call_id = AgentToolContext.current().call_id
        ledger.start(call_id)
        if call_id == "a":
            claimed = memory.claim(AgentToolContext.current().turn_id, "worker-B", later, 30_000)
            assert claimed is not None
            taken.set()
        else:
            taken.wait(5)
            time.sleep(0.05)
        ledger.end(call_id)
        return f"worked {n}"

    script = Script(ask(*[call("work", i, n=k) for k, i in enumerate("abc")]), then="done")
    turn = runner.start(agent(script, work), "go")
    runner.step(turn)
    held = runner.claim(turn.id, "worker-A")
    assert held is not None and held.held_lease is not None
    runner._keeper.drop(held.held_lease)
    later = memory.now() + 60.0
    before = memory.load(turn.id).version

    # When A's step runs the calls
    with pytest.raises((LeaseLostError, ConcurrentModificationError)):
        runner.step(held)

    # Then nothing A did after losing the lease is saved, not even once b has ended (b
    # may not have started at all: a call not started when the step is cut short never is)
    deadline = time.monotonic() + 5
    while "b" in ledger.runs and "b" not in ledger.ended and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    stored = memory.load(turn.id)
    assert stored.version == before + 1  # B's claim, nothing of A's step
    assert tool_messages(stored.messages) == []
    assert "a" in ledger.runs and set(ledger.runs) <= {"a", "b"}


def test_a_plan_call_among_concurrent_calls_waits_for_them_then_delegates() -> None:
    # Given one response with two I/O calls and a plan of one task for a helper agent
    ledger = Ledger()
    tasks = [{"id": "t1", "description": "check it"}]
    plan = call("create_task_plan", "p1", goal="g", tasks=tasks)

    def planner(request: ModelRequest) -> AiMessage:
        if any(m.call_id == "p1" for m in tool_messages(request.messages)):
            return AiMessage("the summary")
        return AiMessage(tool_calls=[*naps("a", "b"), plan])

    helper = Agent("helper", FunctionModel(lambda request: AiMessage("checked")))
    root = Agent(
        "planner",
        FunctionModel(planner),
        tools=[sleeper(ledger, 0.1)],
        sub_agents=["helper"],
        planning=AgentPlanningPolicy(),
    )
    runner = AgentRunner(
        agent_loader=InMemoryAgentLoader([helper, root]),
        policy=AgentExecutionPolicy(max_tool_concurrency=4),
    )

    # When the turn runs
    turn = runner.run(root, "go")

    # Then the two calls ran together, the plan's child ran, and the plan call was answered
    assert turn.status is S.COMPLETED and turn.final_output == "the summary"
    assert ledger.overlap("a", "b")
    assert turn.state.task_plan is not None
    assert turn.state.task_plan.tasks[0].status.value == "COMPLETED"
    assert sorted(m.call_id for m in tool_messages(turn.messages)) == ["a", "b", "p1"]


def test_a_turn_run_inside_a_concurrent_call_gets_tool_threads_of_its_own() -> None:
    # Given a tool that runs a whole turn of another agent with two calls of its own
    threads: dict[str, set[int]] = {"outer": set(), "inner": set()}

    @tool
    def probe(n: int) -> str:
        """Notes its thread."""
        threads["inner"].add(threading.get_ident())
        return "probed"

    def inner_model(request: ModelRequest) -> AiMessage:
        if tool_messages(request.messages):
            return AiMessage("inner done")
        return AiMessage(tool_calls=[call("probe", "x", n=0), call("probe", "y", n=1)])

    inner = Agent("inner", FunctionModel(inner_model), tools=[probe])
    nested = runner_on(InMemoryAgentTurnStore(), 4)

    @tool
    def delegate(n: int) -> str:
        """Runs a whole turn of another agent."""
        threads["outer"].add(threading.get_ident())
        time.sleep(0.1)  # both delegates hold a tool thread at once
        return nested.run(inner, f"job {n}").final_output or ""

    # When two such calls run concurrently
    runner = runner_on(InMemoryAgentTurnStore(), 2)
    calls = [call("delegate", i, n=k) for k, i in enumerate("ab")]
    turn = runner.run(agent(Script(ask(*calls), then="done"), delegate), "go")

    # Then both nested runs completed with their calls on tool threads while their callers
    # held two others: a nested run never waits for a thread that is waiting for it
    assert turn.status is S.COMPLETED
    assert [m.content for m in tool_messages(turn.messages)] == ["inner done", "inner done"]
    assert len(threads["outer"]) == 2
    assert threads["inner"] and threading.get_ident() not in threads["inner"]


def test_a_timed_out_call_among_several_takes_the_failure_path() -> None:
    # Given b times out (as invoke_tool reports it for timeout_behavior="fail") while a runs;
    # the strategy would send an ordinary error to the model, never a timeout
    ledger = Ledger()

    @tool
    def work(n: int) -> str:
        """Times out for b."""
        call_id = AgentToolContext.current().call_id
        ledger.start(call_id)
        if call_id == "b":
            raise ToolTimeoutError("work", 1.0, retryable=False)
        time.sleep(0.05)
        return f"worked {n}"

    runner = runner_on(
        InMemoryAgentTurnStore(), 2, tool_error_strategy=ToolErrorStrategy.RETURN_ERROR_TO_MODEL
    )
    calls = [call("work", i, n=k) for k, i in enumerate("ab")]
    turn = runner.run(agent(Script(ask(*calls), then="never"), work), "go")

    # Then a's result is kept and the turn failed with the timeout
    assert turn.status is S.FAILED
    assert turn.state.error is not None and turn.state.error.type == "ToolTimeoutError"
    answers = {m.call_id: m for m in tool_messages(turn.messages)}
    assert answers["a"].content == "worked 0" and INTERRUPTED in answers["b"].content
