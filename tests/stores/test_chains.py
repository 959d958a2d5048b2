"""Chained steps: a step task goes on with its turn while it can run at once, on every store.

Each chained step is fenced and committed on its own under the lease its claim took (the
commits keep it, renewed, with no claim between steps); the chain ends where a new
message would not have been sent at once (an approval, a retry, a child, the end), when its
time is up, or when someone else holds the turn; a cancel lands between two steps.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentworker.fleet.stepping import step_once
from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelRequest,
    RetryPolicy,
    StoreUnavailableError,
    ToolCall,
    ToolMessage,
    tool,
)
from tests.support.wakeups import Broker, fleet

S = AgentTurnStatus
LONG = 60.0


def calls_then_answer(tool_name: str, calls: int) -> FunctionModel:
    """A model that asks for ``tool_name`` once per step, ``calls`` times, then answers."""

    def answer(request: ModelRequest) -> AiMessage:
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        if done < calls:
            return AiMessage(tool_calls=[ToolCall(id=f"c{done}", name=tool_name, arguments={})])
        return AiMessage("done")

    return FunctionModel(answer)


def committed_steps(runner: AgentRunner, turn_id: str) -> int:
    return runner.store.load(turn_id).step_count


def test_a_chain_takes_a_turn_to_its_end_on_one_message(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    broker = Broker()
    runner = fleet(make_store, broker)
    turn = runner.start("looker", "go").id
    assert broker.queue == [turn]

    assert step_once(runner, broker.queue.pop(), "w1", chain_seconds=LONG) == "COMPLETED"

    assert broker.queue == [] and broker.sent == 1  # only the start's wake-up
    assert committed_steps(runner, turn) == 5  # model, tool, model, tool, model


def test_a_chain_claims_once_and_asks_the_store_nothing_between_its_steps(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a fleet runner whose store counts every call the chain makes
    broker = Broker()
    runner = fleet(make_store, broker)
    turn = runner.start("looker", "go").id
    store = runner.store
    calls: list[str] = []
    for name in ("claim", "peek", "commit", "release_lease", "renew_lease"):
        real = getattr(store, name)
        setattr(store, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))

    # When one message takes the turn to its end
    assert step_once(runner, broker.queue.pop(), "w1", chain_seconds=LONG) == "COMPLETED"

    # Then one claim, then one commit per step: no claim, peek or release in between (a
    # slow machine may take the claim's reading as too old for the first step)
    first = calls.index("commit")
    assert calls[:first] in (["claim"], ["claim", "peek"])
    assert calls[first:] == ["commit"] * 5
    assert committed_steps(runner, turn) == 5


def test_no_chain_is_one_step_per_message(make_store: Callable[[], AgentTurnStore]) -> None:
    broker = Broker()
    runner = fleet(make_store, broker)
    turn = runner.start("looker", "go").id
    outcomes = []
    while broker.queue:
        outcomes.append(step_once(runner, broker.queue.pop(0), "w1", chain_seconds=0.0))
    assert outcomes == ["RUNNING"] * 4 + ["COMPLETED"]
    assert broker.sent == 5 and committed_steps(runner, turn) == 5


def test_a_chain_ends_when_its_time_is_up_and_sends_the_next_wake_up(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    @tool
    def slow() -> str:
        """Takes 300 ms."""
        time.sleep(0.3)
        return "ok"

    broker = Broker()
    loader = InMemoryAgentLoader([Agent("slow", calls_then_answer("slow", 3), tools=[slow])])
    runner = AgentRunner(turn_store=make_store(), agent_loader=loader, dispatcher=broker)
    turn = runner.start("slow", "go").id
    broker.queue.clear()

    # the model step is quick (well under the 200 ms) and chains into the first tool step,
    # which uses up the time
    assert step_once(runner, turn, "w1", chain_seconds=0.2) == "RUNNING"
    assert committed_steps(runner, turn) == 2
    assert broker.queue == [turn]  # the rest goes through the broker, marked queued
    assert runner.store.wakeups(runner.store.now() + 1, 0.0, 10).lost == []


def test_a_chain_stops_where_no_wake_up_would_be_sent(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    failures = [ConnectionError("timeout")]

    @tool(requires_approval=True)
    def pay() -> str:
        """Needs an approval."""
        return "paid"

    @tool
    def flaky() -> str:
        """Fails once."""
        if failures:
            raise failures.pop()
        return "ok"

    broker = Broker()
    loader = InMemoryAgentLoader(
        [
            Agent("payer", calls_then_answer("pay", 1), tools=[pay]),
            Agent("flaky", calls_then_answer("flaky", 1), tools=[flaky]),
        ]
    )
    runner = AgentRunner(turn_store=make_store(), agent_loader=loader, dispatcher=broker)
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=30))
    payer = runner.start("payer", "go").id
    flaky_turn = runner.start("flaky", "go", options=AgentTurnOptions(policy=policy)).id
    broker.queue.clear()

    assert step_once(runner, payer, "w1", chain_seconds=LONG) == "WAITING_FOR_APPROVAL"
    assert step_once(runner, flaky_turn, "w1", chain_seconds=LONG) == "RETRY_SCHEDULED"
    assert broker.queue == []  # parked: a resume or the sweeper wakes them

    runner.submit_resume(payer, AgentResumeCommand.approve_tool("c0"))
    assert broker.queue == [payer]
    assert step_once(runner, broker.queue.pop(), "w1", chain_seconds=LONG) == "COMPLETED"


def test_a_cancel_from_another_actor_lands_between_two_chained_steps(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a chain whose tool step is running while an operator cancels the turn
    running, cancelled = threading.Event(), threading.Event()
    ran: list[str] = []

    @tool
    def work() -> str:
        """Signals, then waits for the cancel."""
        ran.append("work")
        running.set()
        assert cancelled.wait(10)
        return "ok"

    broker = Broker()
    loader = InMemoryAgentLoader([Agent("worker", calls_then_answer("work", 5), tools=[work])])
    runner = AgentRunner(turn_store=make_store(), agent_loader=loader, dispatcher=broker)
    operator = AgentRunner(turn_store=make_store(), agent_loader=loader, dispatcher=broker)
    turn = runner.start("worker", "go").id
    broker.queue.clear()

    def cancel() -> None:
        assert running.wait(10)
        operator.cancel(turn, "stop")
        cancelled.set()

    canceller = threading.Thread(target=cancel)
    canceller.start()
    # When the chain goes on after the tool step
    outcome = step_once(runner, turn, "w1", chain_seconds=LONG)
    canceller.join()

    # Then the next chained step ends the turn and no further tool ran; the cancel's own
    # wake-up finds nothing left to do
    assert outcome == "CANCELLED"
    assert ran == ["work"]
    assert runner.store.load(turn).status is S.CANCELLED
    assert broker.queue == [turn]
    assert step_once(runner, broker.queue.pop(), "w1", chain_seconds=LONG) == "not-runnable"


@pytest.mark.parametrize("seed", range(6))
def test_a_chain_never_steps_a_turn_another_worker_holds(
    make_store: Callable[[], AgentTurnStore], seed: int
) -> None:
    # Given two workers with chains, each handed the same wake-up (a duplicate delivery),
    # racing on one turn whose tools record each run; seeded jitter inside every call
    rng = random.Random(seed)
    runs: list[str] = []
    lock = threading.Lock()

    @tool
    def record(n: int) -> str:
        """Records its run."""
        time.sleep(rng.random() * 0.003)
        with lock:
            runs.append(f"c{n}")
        return "ok"

    def answer(request: ModelRequest) -> AiMessage:
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        time.sleep(rng.random() * 0.003)
        if done < 6:
            return AiMessage(
                tool_calls=[ToolCall(id=f"c{done}", name="record", arguments={"n": done})]
            )
        return AiMessage("done")

    broker = Broker()
    loader = InMemoryAgentLoader([Agent("rec", FunctionModel(answer), tools=[record])])
    runners = [
        AgentRunner(turn_store=make_store(), agent_loader=loader, dispatcher=broker)
        for _ in range(2)
    ]
    turn = runners[0].start("rec", "go").id
    outcomes: list[str] = []

    def work(runner: AgentRunner, worker: str) -> None:
        # each worker serves the wake-up it is handed again until the turn has ended
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if runner.store.peek(turn).status.is_terminal:
                return
            outcomes.append(step_once(runner, turn, worker, chain_seconds=LONG))

    threads = [threading.Thread(target=work, args=(r, f"w{i}")) for i, r in enumerate(runners)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then every tool call ran exactly once and the turn took its 13 steps once each
    assert runners[0].store.load(turn).status is S.COMPLETED, outcomes
    assert sorted(runs) == [f"c{n}" for n in range(6)], runs
    assert committed_steps(runners[0], turn) == 13


def test_a_failure_right_after_the_claim_gives_the_lease_back(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a step task whose second clock reading (after the claim) fails, as a Redis
    # blip does when the store re-reads TIME
    broker = Broker()
    runner = fleet(make_store, broker)
    turn = runner.start("looker", "go").id
    readings = {"n": 0}
    real_now = runner.store.now

    def now() -> float:
        readings["n"] += 1
        if readings["n"] == 2:
            raise StoreUnavailableError("redis://test", ConnectionError("reset"))
        return real_now()

    runner.store.now = now  # type: ignore[method-assign]
    # When the task fails there
    with pytest.raises(StoreUnavailableError):
        step_once(runner, turn, "w1", chain_seconds=LONG)
    runner.store.now = real_now  # type: ignore[method-assign]

    # Then the lease is given back, not kept alive by the heartbeat: the next wake-up runs
    assert runner.store.load(turn).lease is None
    assert step_once(runner, turn, "w2", chain_seconds=LONG) == "COMPLETED"


def test_a_step_failing_after_a_kept_lease_still_sends_the_wake_up(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a chain whose second step raises (a Redis blip) after the first kept the lease
    broker = Broker()
    runner = fleet(make_store, broker)
    turn = runner.start("looker", "go").id
    broker.queue.clear()
    steps = {"n": 0}
    real_step = runner.step

    def step(held: Any, *, release: bool = False) -> Any:
        steps["n"] += 1
        if steps["n"] == 2:
            raise StoreUnavailableError("redis://test", ConnectionError("reset"))
        return real_step(held, release=release)

    runner.step = step  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError):
        step_once(runner, turn, "w1", chain_seconds=LONG)

    # Then the kept lease is given back and a wake-up is sent for the turn
    assert broker.queue == [turn]
    assert runner.store.peek(turn).lease is None
    runner.step = real_step  # type: ignore[method-assign]
    assert step_once(runner, broker.queue.pop(), "w1", chain_seconds=LONG) == "COMPLETED"
