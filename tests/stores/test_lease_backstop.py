"""The lease backstop: a step past its time limit and grace loses its lease, on every store.

A model call that hangs (the in-call deadline cannot stop a sync one) must not hold the
turn forever: the heartbeat stops renewing at the step's deadline plus grace, the lease
ends in the store, the sweeper finds the turn, and the stuck step's late writes are fenced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from agentworker.fleet.stepping import sweep_once
from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    LeaseLostError,
    ModelRequest,
)
from runner_core.worker import cut_leases, on_lease_cut, step_grace
from tests.support.wakeups import Broker

LIMIT = 0.3
LEASE = 5.0  # far longer than the step may take: only the backstop can end it early


class Hang:
    """A sync model that blocks until released (the first ``hangs`` calls), then answers."""

    def __init__(self, hangs: int = 1) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.hangs = hangs

    def __call__(self, request: ModelRequest) -> AiMessage:
        if self.hangs > 0:
            self.hangs -= 1
            self.entered.set()
            self.release.wait(10)
        return AiMessage("answered")


@pytest.fixture
def hang() -> Iterator[Hang]:
    model = Hang()
    yield model
    model.release.set()


def runner_of(make_store: Callable[[], AgentTurnStore], model: Hang, limit: float) -> AgentRunner:
    loader = InMemoryAgentLoader([Agent("hangs", FunctionModel(model))])
    return AgentRunner(
        turn_store=make_store(),
        agent_loader=loader,
        policy=AgentExecutionPolicy(lease_seconds=LEASE),
        dispatcher=Broker(),
        step_time_limit=limit,
    )


def test_a_step_past_its_limit_and_grace_loses_its_lease_and_is_fenced(
    make_store: Callable[[], AgentTurnStore], hang: Hang
) -> None:
    # Given a worker's runner with a step time limit, stepping a turn whose model hangs
    runner = runner_of(make_store, hang, LIMIT)
    cut: list[str] = []
    on_lease_cut(cut.append)
    cuts_before = cut_leases()
    turn = runner.start("hangs", "go")
    held = runner.claim(turn.id, "stuck")
    assert held is not None
    claimed_version = runner.store.peek(turn.id).version
    errors: list[BaseException] = []

    def step() -> None:
        try:
            with runner.holding(held):
                runner.step(held, release=True)
        except BaseException as exc:
            errors.append(exc)

    stepper = threading.Thread(target=step)
    stepper.start()
    assert hang.entered.wait(5)
    started = time.monotonic()

    # When the step stays stuck past its deadline and grace
    while runner.store.peek(turn.id).live_lease is not None and time.monotonic() - started < 4:
        time.sleep(0.02)
    ended_after = time.monotonic() - started

    # Then the lease ended in the store long before its own expiry, not before the limit
    assert runner.store.peek(turn.id).live_lease is None
    assert LIMIT <= ended_after + 0.05 and ended_after < LIMIT + step_grace(LIMIT) + 1.5
    # (the keeper tells its listeners right after the store ended the lease)
    deadline = time.monotonic() + 2
    while not cut and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cut == [turn.id] and cut_leases() == cuts_before + 1
    # and the sweeper finds the turn for another worker
    assert turn.id in runner.store.wakeups(runner.store.now(), 0.0, 100).lost
    # and once the stuck call returns, the step's writes are fenced
    hang.release.set()
    stepper.join(5)
    assert len(errors) == 1 and isinstance(errors[0], LeaseLostError), errors
    assert "time limit" in str(errors[0])
    stored = runner.store.peek(turn.id)
    assert stored.version == claimed_version and stored.status is AgentTurnStatus.READY


def test_the_turn_is_finished_by_the_next_claim(
    make_store: Callable[[], AgentTurnStore], hang: Hang
) -> None:
    runner = runner_of(make_store, hang, LIMIT)
    turn = runner.start("hangs", "go")
    held = runner.claim(turn.id, "stuck")
    assert held is not None
    stepper = threading.Thread(target=lambda: _step_quietly(runner, held))
    stepper.start()
    assert hang.entered.wait(5)
    deadline = time.monotonic() + 4
    while runner.store.peek(turn.id).live_lease is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    # When the sweeper wakes the turn and another worker claims it
    sweep_once(runner, lost_after=0.0)
    rescued = runner.claim(turn.id, "rescuer")
    assert rescued is not None
    with runner.holding(rescued):
        runner.step(rescued, release=True)
    # Then it completes, and the stuck step's answer never lands
    hang.release.set()
    stepper.join(5)
    final = runner.store.load(turn.id)
    assert final.status is AgentTurnStatus.COMPLETED and final.final_output == "answered"
    assert sum(m.role == "assistant" for m in final.messages) == 1


def test_a_step_within_its_limit_keeps_its_lease_renewed(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a short lease the heartbeat must renew, and a model slower than the lease
    loader = InMemoryAgentLoader([Agent("slow", FunctionModel(_slow))])
    runner = AgentRunner(
        turn_store=make_store(),
        agent_loader=loader,
        policy=AgentExecutionPolicy(lease_seconds=0.3),
        step_time_limit=5.0,
    )
    cuts_before = cut_leases()
    turn = runner.start("slow", "go")
    held = runner.claim(turn.id, "w")
    assert held is not None
    with runner.holding(held):
        runner.step(held, release=True)
    assert runner.store.load(turn.id).status is AgentTurnStatus.COMPLETED
    assert cut_leases() == cuts_before


def test_no_renewal_reaches_past_the_backstop(
    make_store: Callable[[], AgentTurnStore], hang: Hang
) -> None:
    # Given a lease renewed every 0.1 s and a step that hangs past its 0.3 s limit
    runner = runner_of(make_store, hang, LIMIT)
    runner.policy = AgentExecutionPolicy(lease_seconds=0.3)
    turn = runner.start("hangs", "go")
    claimed_at = runner.store.now()
    held = runner.claim(turn.id, "stuck")
    assert held is not None
    stepper = threading.Thread(target=lambda: _step_quietly(runner, held))
    stepper.start()
    assert hang.entered.wait(5)
    # When the heartbeat renews it while the step runs
    latest = 0.0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        control = runner.store.peek(turn.id)
        if control.live_lease is None:
            break
        latest = max(latest, control.live_lease.until)
        time.sleep(0.01)
    # Then no renewal set the lease's end past the deadline plus grace
    assert latest - claimed_at <= LIMIT + step_grace(LIMIT) + 0.2
    hang.release.set()
    stepper.join(5)


def _step_quietly(runner: AgentRunner, turn: object) -> None:
    from runner_core import AgentTurn

    assert isinstance(turn, AgentTurn)
    try:
        with runner.holding(turn):
            runner.step(turn, release=True)
    except LeaseLostError:
        pass


def _slow(request: ModelRequest) -> AiMessage:
    time.sleep(0.5)
    return AiMessage("answered")
