"""AgentWorker, the in-process poller: claim, step under the lease, release."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from runner_core import (
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AgentWorker,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    ModelError,
    RetryPolicy,
    tool,
)
from tests.support.scripts import EventLog, Script, agent, ask, call


def test_worker_runs_started_turns_to_completion(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    # Given five started turns and a dispatcher that records them
    dispatched: list[str] = []
    runner.dispatcher = dispatched.append
    ran: list[str] = []

    @tool
    def noop(n: int) -> str:
        """Nothing."""
        ran.append(str(n))
        return "ok"

    def model(request: object) -> object:
        messages = request.messages  # type: ignore[attr-defined]
        if messages[-1].role == "tool":
            return "done"
        return ask(call("noop", n=int(messages[-1].text)))

    a = agent(Script(then=model), noop)
    ids = [runner.start(a, str(i)).id for i in range(5)]
    assert dispatched == ids

    # When a worker polls until idle
    steps = AgentWorker(runner, worker_id="w1").run_until_idle()

    # Then every turn completed, each tool ran once, and no lease is left behind
    assert steps == 15
    for turn_id in ids:
        stored = store.load(turn_id)
        assert stored.status is AgentTurnStatus.COMPLETED
        assert stored.final_output == "done"
        assert store.peek(turn_id).lease is None
    assert sorted(ran) == ["0", "1", "2", "3", "4"]


def test_an_unloadable_agent_leaves_the_turn_for_a_worker_that_has_it(
    store: InMemoryAgentTurnStore, make_runner: Callable[..., AgentRunner]
) -> None:
    # Given a turn started by a producer that knows the agent (a rolling deploy)
    producer = make_runner()
    turn = producer.start(agent(Script("done"), id="billing"), "hi")

    # When a worker whose loader lacks the agent polls
    old_worker = AgentRunner(store, InMemoryAgentLoader())
    steps = AgentWorker(old_worker, worker_id="old").run_until_idle()

    # Then the turn is left as it was, lease given back, for a worker that has the agent
    assert steps == 0
    stored = store.load(turn.id)
    assert stored.status is AgentTurnStatus.READY and stored.lease is None
    assert AgentWorker(producer, worker_id="new").run_until_idle() == 1
    assert store.load(turn.id).status is AgentTurnStatus.COMPLETED


def test_a_turn_no_worker_can_load_for_the_grace_period_fails_once(
    store: InMemoryAgentTurnStore, make_runner: Callable[..., AgentRunner]
) -> None:
    producer = make_runner()
    turn = producer.start(agent(Script(), id="billing"), "hi")
    worker_runner = AgentRunner(store, InMemoryAgentLoader())
    worker_runner.unloadable_grace_seconds = 0.0  # it has waited long enough
    log = EventLog()
    worker_runner.add_event_listener(log)

    steps = AgentWorker(worker_runner, worker_id="w1").run_until_idle()

    assert steps == 0
    stored = store.load(turn.id)
    assert stored.status is AgentTurnStatus.FAILED
    assert stored.terminal_reason == "agent 'billing' version '1' not found"
    assert stored.error is not None and stored.error.type == "AgentNotFoundError"
    assert store.peek(turn.id).lease is None
    assert log.types(turn.id)[-1] is AgentEventType.TURN_FAILED
    assert store.claim_runnable("w2", store.now(), 1000, 10) == []


def test_worker_leaves_blocked_turns_alone(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def refund() -> str:
        """Refund."""
        ran.append("refund")
        return "ok"

    turn = runner.start(agent(Script(ask(call("refund", "r1")), "refunded"), refund), "go")
    worker = AgentWorker(runner, worker_id="w1")

    worker.run_until_idle()
    assert store.load(turn.id).status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert ran == []

    runner.submit_resume(turn.id, AgentResumeCommand.approve_tool("r1"))
    worker.run_until_idle()
    assert store.load(turn.id).status is AgentTurnStatus.COMPLETED
    assert ran == ["refund"]


def test_worker_picks_up_a_due_retry(runner: AgentRunner, store: InMemoryAgentTurnStore) -> None:
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=1, initial_delay=0.02))
    script = Script(ModelError("busy", retryable=True), "ok")
    turn = runner.start(agent(script), "hi", options=AgentTurnOptions(policy=policy))
    worker = AgentWorker(runner, worker_id="w1")

    worker.run_until_idle()
    assert store.load(turn.id).status is AgentTurnStatus.RETRY_SCHEDULED
    assert worker.run_once() == 0  # not due yet

    time.sleep(0.03)
    worker.run_until_idle()
    assert store.load(turn.id).status is AgentTurnStatus.COMPLETED
    assert script.calls == 2


def test_worker_finalizes_a_cancel_requested_turn(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    script = Script()
    turn = runner.start(agent(script), "hi")
    store.request_cancellation(turn.id, "shutdown")

    AgentWorker(runner, worker_id="w1").run_until_idle()

    stored = store.load(turn.id)
    assert (stored.status, stored.terminal_reason) == (AgentTurnStatus.CANCELLED, "shutdown")
    assert script.calls == 0


def test_run_forever_stops_when_asked(runner: AgentRunner, store: InMemoryAgentTurnStore) -> None:
    turn = runner.start(agent(Script("ok")), "hi")
    stop = threading.Event()
    worker = AgentWorker(runner, worker_id="w1")
    thread = threading.Thread(target=worker.run_forever, args=(stop, 0.005))
    thread.start()

    deadline = time.monotonic() + 5
    while store.load(turn.id).status is not AgentTurnStatus.COMPLETED:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    stop.set()
    thread.join(timeout=2)

    assert not thread.is_alive()


def test_a_wake_up_lost_with_the_store_down_is_sent_with_the_next_one() -> None:
    from runner_core import AgentRunner, InMemoryAgentTurnStore

    class Flaky(InMemoryAgentTurnStore):
        down = False

        def unmark_queued(self, turn_id: str) -> None:
            if self.down:
                raise ConnectionError("store down")
            super().unmark_queued(turn_id)

    sent: list[str] = []
    broker_down = [True]

    def dispatcher(turn_id: str) -> None:
        if broker_down[0]:
            raise ConnectionError("broker down")
        sent.append(turn_id)

    store = Flaky()
    runner = AgentRunner(turn_store=store, dispatcher=dispatcher)
    from tests.support.scripts import Script, agent

    store.down = True
    first = runner.start(agent(Script("hi")), "one")  # saved, marked; its wake-up failed
    store.down = False
    broker_down[0] = False
    second = runner.start(agent(Script("hi")), "two")

    assert sent == [second.id, first.id]  # the kept one went out with the next


def test_a_describing_dispatcher_is_told_the_agent_and_a_plain_one_only_the_turn(
    runner: AgentRunner,
) -> None:
    # Given a dispatcher that can describe a wake-up, then a plain callable
    told: list[tuple[str, ...]] = []

    class Describing:
        def __call__(self, turn_id: str) -> None:
            told.append((turn_id,))

        def send_for(self, turn_id: str, agent_id: str) -> None:
            told.append((turn_id, agent_id))

    runner.dispatcher = Describing()
    first = runner.start(agent(Script("hi")), "a")
    runner.dispatcher = lambda turn_id: told.append(("plain", turn_id))
    second = runner.start(agent(Script("hi")), "b")

    # Then the first heard the agent with the turn, the second the turn alone
    assert told == [(first.id, first.state.agent_id), ("plain", second.id)]
