"""Hundreds of seeded schedules of the one-door model on both stores (thousands: make chaos).

The fan-out schedules kill workers while several calls of one response are in flight; the
last tests check, on every store, that concurrent calls are saved one commit per result
and that one suspension lists every call waiting for approval.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentRunner,
    AgentToolContext,
    AgentTurnStatus,
    AgentTurnStore,
    InMemoryAgentLoader,
    ToolMessage,
    tool,
)
from runner_core.testing import ScriptedModel, asks, tool_call
from tests.support.one_door import check, run_schedule
from tests.support.toolruns import CommitLog, Ledger, resolve_approvals

SCHEDULES = int(os.environ.get("ONE_DOOR_SCHEDULES", "120"))
FANOUT_SCHEDULES = int(os.environ.get("ONE_DOOR_FANOUT_SCHEDULES", "40"))


@pytest.mark.parametrize("block", range(4))
def test_the_one_door_invariants_hold_under_every_interleaving(
    make_store: Callable[[], AgentTurnStore], store_kind: str, block: int
) -> None:
    per_block = max(1, SCHEDULES // 4)
    for seed in range(block * per_block, (block + 1) * per_block):
        report, world, root, store = run_schedule(
            make_store, seed, crash_rate=0.01, blip_rate=0.02, late_rate=0.02
        )
        problems = check(report, world, root, store)
        assert not problems, f"{store_kind} seed {seed}: {problems}\n{report.describe()}"


def test_a_worker_killed_with_calls_in_flight_re_runs_only_those(
    make_store: Callable[[], AgentTurnStore], store_kind: str
) -> None:
    # Each schedule runs one response of FANOUT concurrent calls; workers die at store
    # calls (the commits of the first results among them) while others still run
    crashes_in_flight = 0
    for seed in range(FANOUT_SCHEDULES):
        report, world, root, store = run_schedule(
            make_store, seed, crash_rate=0.08, blip_rate=0.02, kind="fanout"
        )
        problems = check(report, world, root, store)
        assert not problems, f"{store_kind} seed {seed}: {problems}\n{report.describe()}"
        assert store.load(root).status.is_terminal
        crashes_in_flight += world.crashes_in_flight
    assert crashes_in_flight > 0, "no schedule killed a worker with calls in flight"


def test_concurrent_results_are_saved_one_commit_each_on_every_store(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given four 0.3 s I/O calls in one response, all allowed to run at once
    ledger = Ledger()

    @tool
    def nap(n: int) -> str:
        """Wait on I/O."""
        ledger.start(AgentToolContext.current().call_id)
        time.sleep(0.3)
        return f"slept {n}"

    log = CommitLog(make_store())
    runner = AgentRunner(
        turn_store=log,
        agent_loader=InMemoryAgentLoader(),
        policy=AgentExecutionPolicy(max_tool_concurrency=4),
    )
    calls = [tool_call("nap", i, n=k) for k, i in enumerate("abcd")]
    agent = Agent("napper", ScriptedModel(asks(*calls), then="done"), tools=[nap])
    turn = runner.start(agent, "go")
    runner.step(turn)

    # When one step runs them
    began = time.monotonic()
    runner.step(turn)
    took = time.monotonic() - began

    # Then they ran together and the store saw one commit per result
    assert took < 0.6, f"four 0.3 s calls took {took:.2f} s"
    assert sorted(log.answered_per_commit()) == [["a"], ["b"], ["c"], ["d"]]
    stored = log.inner.load(turn.id)
    assert stored.pending_tool_calls == []
    assert sorted(m.call_id for m in stored.messages if isinstance(m, ToolMessage)) == list("abcd")


def test_one_suspension_lists_every_waiting_call_on_every_store(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund (a person approves)."""
        ran.append(AgentToolContext.current().call_id)
        return f"refunded {amount}"

    store = make_store()
    runner = AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader())
    calls = [tool_call("refund", "r1", amount=5), tool_call("refund", "r2", amount=7)]
    agent = Agent("refunder", ScriptedModel(asks(*calls), then="done"), tools=[refund])
    turn = runner.run(agent, "go")

    stored = store.load(turn.id)
    assert stored.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert stored.suspension is not None and stored.suspension.correlation_id == "r1"
    assert [c["call_id"] for c in stored.suspension.metadata["calls"]] == ["r1", "r2"]

    resolve_approvals(store, turn.id, approved=["r1"], rejected={"r2": "no"})
    done = runner.run_until_blocked(runner.restore(turn.id))
    assert done.status is AgentTurnStatus.COMPLETED
    assert ran == ["r1"]
