"""Every status change goes through ``status.move`` and follows ``status.TRANSITIONS``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

import runner_core.status as status_module
from runner_core import (
    AgentBudget,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurnOptions,
    ModelError,
    RetryPolicy,
    tool,
)
from runner_core.errors import IllegalTransitionError
from runner_core.status import TRANSITIONS, move
from runner_core.status import AgentTurnStatus as S
from tests.support.scripts import Script, agent, ask, call
from tests.support.stores import snap

Arrow = tuple[S, S]


class _Recording(Mapping[S, frozenset[S]]):
    """``TRANSITIONS`` that notes every arrow ``move`` asks about."""

    def __init__(self, seen: set[Arrow]) -> None:
        self.seen = seen

    def __getitem__(self, old: S) -> frozenset[S]:
        return _Targets(old, TRANSITIONS[old], self.seen)

    def __iter__(self) -> Iterator[S]:
        return iter(TRANSITIONS)

    def __len__(self) -> int:
        return len(TRANSITIONS)


class _Targets(frozenset[S]):
    def __new__(cls, old: S, allowed: frozenset[S], seen: set[Arrow]) -> _Targets:
        made = super().__new__(cls, allowed)
        made.old, made.seen = old, seen  # type: ignore[attr-defined]
        return made

    def __contains__(self, new: object) -> bool:
        self.seen.add((self.old, new))  # type: ignore[attr-defined]
        return super().__contains__(new)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> set[Arrow]:
    arrows: set[Arrow] = set()
    monkeypatch.setattr(status_module, "TRANSITIONS", _Recording(arrows))
    return arrows


@tool(requires_approval=True)
def refund(amount: float) -> str:
    """Refund (a person approves first)."""
    return f"refunded {amount}"


@tool
def where() -> str:
    """Ask the user where to go."""
    return str(AgentToolContext.current().request_user_input("Where to?"))


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"


def _walk(runner: AgentRunner) -> None:
    """Turns that between them take every arrow of the README's diagram."""
    runner.run(agent(Script("hi"), id="plain"), "hi")  # READY -> RUNNING -> COMPLETED

    waits = runner.run(agent(Script(ask(call("refund", amount=1.0)), "done"), refund), "pay")
    runner.resume(waits.id, AgentResumeCommand.approve_tool("c1"))
    refused = runner.run(agent(Script(ask(call("refund", amount=2.0))), refund, id="r2"), "pay")
    runner.cancel(refused.id)  # WAITING_FOR_APPROVAL -> CANCELLED

    form = runner.run(agent(Script(ask(call("where")), "ok"), where, id="form"), "go")
    runner.resume(form.id, AgentResumeCommand.user_input("home"))

    flaky = agent(Script(ModelError("blip", retryable=True), "ok"), id="flaky")
    retries = AgentTurnOptions(policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=1)))
    later = runner.run(flaky, "hi", options=retries)
    runner.resume(later.id, AgentResumeCommand.continue_turn())
    runner.run(agent(Script(ModelError("no")), id="broken"), "hi")  # RUNNING -> FAILED

    loop = Script(then=ask(call("noop")))
    runner.run(agent(loop, noop, id="loop", max_iterations=1), "hi")
    steps = AgentTurnOptions(policy=AgentExecutionPolicy(max_steps=1))
    runner.run(agent(Script(ask(call("noop"))), noop, id="steps"), "hi", options=steps)
    spend = AgentExecutionPolicy(budget=AgentBudget(max_tool_calls=0))
    budget = AgentTurnOptions(policy=spend)
    runner.run(agent(Script(ask(call("noop"))), noop, id="spend"), "hi", options=budget)

    idle = runner.start(agent(Script(), id="idle"), "hi")
    runner.cancel(idle.id)  # READY -> CANCELLED


def test_the_suites_turns_take_only_arrows_of_the_table(
    runner: AgentRunner, seen: set[Arrow]
) -> None:
    _walk(runner)

    allowed = {(old, new) for old, news in TRANSITIONS.items() for new in news}
    assert seen <= allowed
    diagram = {
        (S.READY, S.RUNNING),
        (S.READY, S.CANCELLED),
        (S.RUNNING, S.WAITING_FOR_APPROVAL),
        (S.WAITING_FOR_APPROVAL, S.RUNNING),
        (S.WAITING_FOR_APPROVAL, S.CANCELLED),
        (S.RUNNING, S.WAITING_FOR_USER),
        (S.WAITING_FOR_USER, S.RUNNING),
        (S.RUNNING, S.RETRY_SCHEDULED),
        (S.RETRY_SCHEDULED, S.RUNNING),
        (S.RUNNING, S.COMPLETED),
        (S.RUNNING, S.FAILED),
        (S.RUNNING, S.MAX_ITERATIONS_REACHED),
        (S.RUNNING, S.MAX_STEPS_REACHED),
        (S.RUNNING, S.BUDGET_EXCEEDED),
    }
    assert diagram <= seen, diagram - seen


def test_an_arrow_the_table_lacks_is_refused_and_changes_nothing() -> None:
    st = snap("t", status=S.COMPLETED)

    with pytest.raises(IllegalTransitionError, match="COMPLETED -> RUNNING"):
        move(st, S.RUNNING)
    assert st.status is S.COMPLETED
    with pytest.raises(IllegalTransitionError):
        move(snap("u"), S.COMPLETED)  # READY ends only through RUNNING (or a cancel)


def test_no_status_may_follow_an_end_and_every_live_one_can_be_cancelled() -> None:
    for old, news in TRANSITIONS.items():
        assert (not news) is old.is_terminal
        if not old.is_terminal:
            assert S.CANCELLED in news and S.FAILED in news
    assert set(TRANSITIONS) == set(S)
