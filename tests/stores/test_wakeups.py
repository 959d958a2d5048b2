"""Wake-ups: a queued one is known, so the sweeper re-sends only what is really lost.

On every store: a backlog, a refused dispatch, a lost message, a due retry and a dead
worker, each with the sweeper running far more often than anything completes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentworker.fleet.stepping import step_once, sweep_once
from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelRequest,
    RetryPolicy,
    ToolCall,
    ToolMessage,
    tool,
)
from tests.support.commits import save
from tests.support.wakeups import Broker, fleet

S = AgentTurnStatus


def test_a_backlog_never_multiplies_wake_ups(make_store: Callable[[], AgentTurnStore]) -> None:
    # Given 40 turns waiting in a broker that one slow worker drains 5 messages at a time
    broker = Broker()
    runner = fleet(make_store, broker)
    turns = [runner.start("looker", f"go {i}").id for i in range(40)]
    steps = 0
    # When the sweeper runs between every few steps with an aggressive lost-wake-up setting
    for _ in range(200):
        sweep_once(runner, lost_after=0.0)
        for turn_id in broker.queue[:5]:
            if step_once(runner, turn_id, "w1") not in ("not-runnable", "not-found", "fenced"):
                steps += 1
        del broker.queue[:5]
        if not broker.queue:
            break
    # Then every turn finished and the sweeper added (almost) nothing
    assert all(runner.store.load(t).status is S.COMPLETED for t in turns)
    assert steps == 40 * 5  # model, tool, model, tool, model
    assert broker.sent / steps <= 1.2, (broker.sent, steps)


def test_a_refused_dispatch_leaves_the_turn_to_the_sweeper(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    broker = Broker()
    runner = fleet(make_store, broker)
    broker.refuse = True
    turn = runner.start("looker", "go")  # saved; its wake-up refused (and logged)
    assert broker.queue == []
    broker.refuse = False
    time.sleep(0.01)  # the sweeper's estimate of the server clock is good to a millisecond

    report = sweep_once(runner, lost_after=0.0)

    assert report.lost == 1 and broker.queue == [turn.id]
    sweep_once(runner, lost_after=0.0)
    assert broker.queue == [turn.id]  # queued now: not sent twice


def test_a_lost_message_is_sent_again_once_its_mark_runs_out(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    broker = Broker()
    runner = fleet(make_store, broker)
    runner.store.requeue_after = 0.2  # type: ignore[attr-defined]
    turn = runner.start("looker", "go")
    broker.queue.clear()  # the broker lost it

    sweep_once(runner, lost_after=0.0)
    assert broker.queue == []  # still trusted
    time.sleep(0.25)
    sweep_once(runner, lost_after=0.0)
    assert broker.queue == [turn.id]


def test_marks_set_before_a_broker_gap_are_forgotten_and_later_ones_kept(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given two turns queued, then the broker connection breaks (their messages may be
    # gone), then a third turn queued after the gap
    broker = Broker()
    runner = fleet(make_store, broker)
    before = [runner.start("looker", f"go {i}").id for i in range(2)]
    time.sleep(0.02)
    gap = runner.store.now()
    time.sleep(0.02)
    after = runner.start("looker", "later").id
    broker.queue.clear()  # all three messages are gone, but only two were in the gap

    # When a worker reconnects and forgets the marks set before the gap
    assert runner.store.forget_queued(gap) == 2
    assert runner.store.forget_queued(gap) == 0  # nothing left to forget

    # Then the sweeper re-sends those two (once), never the one marked after the gap
    time.sleep(0.01)  # (the sweeper's clock estimate is good to a millisecond)
    sweep_once(runner, lost_after=0.0)
    assert sorted(broker.queue) == sorted(before)
    sweep_once(runner, lost_after=0.0)
    assert sorted(broker.queue) == sorted(before)
    assert after not in broker.queue


def test_a_forgotten_mark_waits_lost_after_for_a_message_that_survived(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a queued turn whose message survived the gap
    broker = Broker()
    runner = fleet(make_store, broker)
    turn = runner.start("looker", "go").id
    time.sleep(0.01)
    runner.store.forget_queued(runner.store.now())
    # When the sweeper runs with a lost-wake-up setting longer than the claim takes
    sweep_once(runner, lost_after=60.0)
    # Then nothing is re-sent: the surviving message is served first
    assert broker.queue == [turn]
    assert step_once(runner, broker.queue.pop(), "w1") == "RUNNING"


def test_a_due_retry_is_sent_once(make_store: Callable[[], AgentTurnStore]) -> None:
    failures = [ConnectionError("timeout")]

    @tool
    def flaky() -> str:
        """Fails once."""
        if failures:
            raise failures.pop()
        return "ok"

    def answer(request: ModelRequest) -> AiMessage:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AiMessage("done")
        return AiMessage(tool_calls=[ToolCall(id="c1", name="flaky", arguments={})])

    broker = Broker()
    loader = InMemoryAgentLoader([Agent("flaky", FunctionModel(answer), tools=[flaky])])
    runner = AgentRunner(turn_store=make_store(), agent_loader=loader, dispatcher=broker)
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=0.05))
    turn = runner.start("flaky", "go", options=AgentTurnOptions(policy=policy))
    step_once(runner, broker.queue.pop(0), "w1")
    step_once(runner, broker.queue.pop(0), "w1")
    stored = runner.store.load(turn.id)
    assert stored.status is S.RETRY_SCHEDULED and broker.queue == [], (stored.status, broker.queue)

    assert sweep_once(runner, lost_after=60).due == 0  # not due yet
    time.sleep(0.06)
    assert sweep_once(runner, lost_after=60).due == 1
    assert sweep_once(runner, lost_after=60).due == 0  # its wake-up is queued
    assert broker.queue == [turn.id]
    step_once(runner, broker.queue.pop(0), "w1")
    step_once(runner, broker.queue.pop(0), "w1")
    assert runner.store.load(turn.id).status is S.COMPLETED


def test_a_dead_workers_turn_is_sent_again_after_its_lease(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    broker = Broker()
    runner = fleet(make_store, broker)
    runner.policy = AgentExecutionPolicy(lease_seconds=0.1)
    turn = runner.start("looker", "go")
    broker.queue.clear()
    held = runner.claim(turn.id, "dies")  # and never releases: a SIGKILL
    assert held is not None
    runner._keeper.drop(held.held_lease)  # type: ignore[arg-type]

    assert sweep_once(runner, lost_after=0.0).lost == 0  # the lease is live
    time.sleep(0.15)
    assert sweep_once(runner, lost_after=0.0).lost == 1
    assert broker.queue == [turn.id]


def test_a_sweep_sees_what_is_due_among_many_blocked_turns(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    from tests.support.stores import snap

    store = make_store()
    now = store.now()
    for _ in range(300):
        save(store, snap(status=S.WAITING_FOR_APPROVAL), -1)
    retry = snap(status=S.RETRY_SCHEDULED, next_runnable_at=now - 1)
    lost = snap()
    future = snap(status=S.RETRY_SCHEDULED, next_runnable_at=now + 3600)
    for s in (retry, lost, future):
        save(store, s, -1)

    found = store.wakeups(store.now() + 0.01, lost_after=0.0)

    assert found.due == [retry.id]
    assert set(found.lost) == {retry.id, lost.id}
    later = store.wakeups(store.now() + 7200, lost_after=0.0)
    assert future.id in later.due  # a sweep after a visit still sees what comes due later


def test_a_sweeps_cost_follows_what_is_due_not_what_is_live(redis_store: Any) -> None:
    from tests.support.stores import snap

    store = redis_store

    def sweep_cost(blocked: int) -> int:
        for _ in range(blocked):
            save(store, snap(status=S.WAITING_FOR_APPROVAL), -1)
        due = [snap(status=S.RETRY_SCHEDULED, next_runnable_at=store.now() - 1) for _ in range(5)]
        for s in due:
            save(store, s, -1)
        store.wakeups(store.now(), 10.0)  # a process's first sweep also backfills
        before = _commands(store)
        found = store.wakeups(store.now() - 0.5, 10.0)
        assert sorted(found.due) == sorted(s.id for s in due)
        store.mark_queued(found.due)  # (as the sweeper does once it sent them)
        return _commands(store) - before

    few = sweep_cost(20)
    many = sweep_cost(2000)

    # the same few commands whether 20 or 2,020 blocked trees are stored (before: one
    # script call per tree and sweep)
    assert many <= few + 5, (few, many)
    assert many < 150, many


def _commands(store: Any) -> int:
    from tests.support.stores import commands_served

    return sum(commands_served(store.redis).values())


def test_tags_with_nothing_due_never_crowd_out_one_that_is(redis_store: Any) -> None:
    from tests.support.stores import snap

    store = redis_store
    # Given 1,200 trees that ended (their due-index entries are stale) and one READY turn
    for _ in range(1200):
        s = snap()
        save(store, s, -1)
        s.status = S.COMPLETED
        save(store, s, 0)
    ready = snap()
    save(store, ready, -1)

    # When pollers claim a few times, each visit clears what it found stale
    claimed = []
    for _ in range(5):
        claimed = store.claim_runnable("w", store.now(), 1000, 1)
        if claimed:
            break

    assert [s.id for s in claimed] == [ready.id]
