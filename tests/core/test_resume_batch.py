"""Answering a suspension that lists several tool calls: any subset, all or nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runner_core import (
    AgentEventType,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnStatus,
    InMemoryAgentTurnStore,
    InvalidResumeError,
)
from runner_core.errors import InvalidArgumentError
from runner_core.resume import approval_calls, waiting_calls
from tests.support.approvals import CALLS, listed_calls, refunds_agent, unlisted, waiting_on_two
from tests.support.scripts import EventLog, content, tool_messages

E = AgentEventType
S = AgentTurnStatus


def test_the_suspension_lists_both_calls(runner: AgentRunner) -> None:
    turn = waiting_on_two(runner, [])

    suspension = turn.state.suspension
    assert suspension is not None and suspension.correlation_id == "r1"
    assert suspension.metadata["calls"] == listed_calls()
    assert [c["call_id"] for c in waiting_calls(turn.state)] == ["r1", "r2"]


def test_approve_one_then_reject_the_other(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    # Given a turn waiting on r1 and r2
    ledger: list[str] = []
    turn = waiting_on_two(runner, ledger)
    suspension = turn.state.suspension

    # When only r1 is approved, the turn keeps waiting on r2, with the same suspension
    partial = runner.resume(turn.id, AgentResumeCommand.approve_tool("r1").with_metadata(by="a"))
    stored = store.load(turn.id)
    assert partial.status is S.WAITING_FOR_APPROVAL
    assert stored.status is S.WAITING_FOR_APPROVAL and stored.suspension == suspension
    assert stored.approved_call_ids == ["r1"]
    assert stored.version == turn.state.version + 1
    assert [c["call_id"] for c in waiting_calls(stored)] == ["r2"]
    assert ledger == []

    # When r2 is rejected, the turn runs: r1 ran, r2 is a rejection, the model answers
    done = runner.resume(turn.id, AgentResumeCommand.reject_tool("r2", "too large"))
    assert done.status is S.COMPLETED and done.final_output == "Done."
    assert ledger == ["1001"]
    first, second = tool_messages(done.messages)
    assert (first.call_id, first.is_error) == ("r1", False)
    assert second.call_id == "r2" and content(second)["type"] == "tool_rejected"
    assert content(second)["message"] == "too large"
    assert [(e["kind"], e["call_ids"]) for e in done.state.resume_log] == [
        ("APPROVE_TOOL", ["r1"]),
        ("REJECT_TOOL", ["r2"]),
    ]
    assert done.state.resume_log[0]["metadata"] == {"by": "a"}
    assert done.state.approved_call_ids == [] and done.state.rejected_calls == {}


def test_approve_tools_answers_all_at_once(runner: AgentRunner) -> None:
    ledger: list[str] = []
    turn = waiting_on_two(runner, ledger)

    done = runner.resume(turn.id, AgentResumeCommand.approve_tools(["r2", "r1"]))

    assert done.status is S.COMPLETED
    assert ledger == ["1001", "1002"]
    assert [m.is_error for m in tool_messages(done.messages)] == [False, False]
    [log] = done.state.resume_log
    assert (log["kind"], log["call_ids"], log["correlation_id"]) == (
        "APPROVE_TOOLS",
        ["r2", "r1"],
        "r1",
    )


def test_reject_tools_answers_all_at_once(runner: AgentRunner) -> None:
    ledger: list[str] = []
    turn = waiting_on_two(runner, ledger)

    done = runner.resume(turn.id, AgentResumeCommand.reject_tools({"r1": "no", "r2": ""}))

    assert done.status is S.COMPLETED and ledger == []
    reasons = [content(m)["message"] for m in tool_messages(done.messages)]
    assert reasons == ["no", "rejected by reviewer"]
    [log] = done.state.resume_log
    assert log["reasons"] == {"r1": "no", "r2": "rejected by reviewer"}


def test_the_second_call_alone_may_be_answered_first(runner: AgentRunner) -> None:
    ledger: list[str] = []
    turn = waiting_on_two(runner, ledger)

    runner.resume(turn.id, AgentResumeCommand.reject_tools({"r2": "later"}))
    done = runner.resume(turn.id, AgentResumeCommand.approve_tools(["r1"]))

    assert done.status is S.COMPLETED and ledger == ["1001"]


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (AgentResumeCommand.approve_tools(["r1", "nope"]), "'nope'"),
        (AgentResumeCommand.approve_tool("nope"), "'nope'"),
        (AgentResumeCommand.reject_tools({"r2": "x", "ghost": "y"}), "'ghost'"),
        (AgentResumeCommand.approve_tools(["r1", "r1"]), "'r1'"),
        (AgentResumeCommand.approve_tools([]), "no call"),
        (AgentResumeCommand.reject_tools({}), "no call"),
    ],
)
def test_a_refused_answer_names_the_call_and_changes_nothing(
    runner: AgentRunner, store: InMemoryAgentTurnStore, command: AgentResumeCommand, named: str
) -> None:
    turn = waiting_on_two(runner, [])
    before = store.load(turn.id)

    with pytest.raises(InvalidResumeError, match=named):
        runner.resume(turn.id, command)

    assert store.load(turn.id).model_dump() == before.model_dump()


def test_an_answered_call_cannot_be_answered_again(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    turn = waiting_on_two(runner, [])
    runner.resume(turn.id, AgentResumeCommand.approve_tool("r1"))
    before = store.load(turn.id)

    with pytest.raises(InvalidResumeError, match="'r1' is already approved"):
        runner.resume(turn.id, AgentResumeCommand.reject_tools({"r1": "no", "r2": "no"}))
    with pytest.raises(InvalidResumeError, match="'r1' is already approved"):
        runner.resume(turn.id, AgentResumeCommand.approve_tool("r1"))

    assert store.load(turn.id).model_dump() == before.model_dump()


def test_a_partial_answer_is_recorded_not_resumed(runner: AgentRunner, events: EventLog) -> None:
    turn = waiting_on_two(runner, [])
    events.events.clear()

    runner.resume(turn.id, AgentResumeCommand.approve_tool("r2"))

    assert [e.type for e in events.events] == [E.SNAPSHOT_SAVED, E.TOOL_APPROVAL_RECORDED]
    recorded = events.events[-1].data
    assert recorded["approved"] == ["r2"] and recorded["rejected"] == {}
    assert recorded["waiting"] == ["r1"]

    events.events.clear()
    runner.resume(turn.id, AgentResumeCommand.reject_tool("r1", "no"))
    assert events.types(turn.id)[:2] == [E.SNAPSHOT_SAVED, E.TURN_RESUMED]
    assert E.TOOL_APPROVAL_RECORDED not in events.types(turn.id)


def test_a_partial_answer_sends_no_wake_up(
    store: InMemoryAgentTurnStore, make_runner: Callable[..., AgentRunner]
) -> None:
    sent: list[str] = []
    runner = make_runner(dispatcher=sent.append)
    turn = waiting_on_two(make_runner(), [])

    runner.submit_resume(turn.id, AgentResumeCommand.approve_tool("r1"))
    assert sent == []
    runner.submit_resume(turn.id, AgentResumeCommand.approve_tool("r2"))
    assert sent == [turn.id]
    assert store.load(turn.id).status is S.RUNNING


def test_a_single_call_suspension_without_a_list(runner: AgentRunner) -> None:
    # Given a turn suspended on its first call by an engine that listed no calls
    turn = runner.run(refunds_agent([], "one-refund", calls=CALLS[:1]), "refund")
    turn = unlisted(runner, turn)
    suspension = turn.state.suspension
    assert suspension is not None and "calls" not in suspension.metadata

    # Then it is a list of one: the correlation id with the metadata's tool and arguments
    assert approval_calls(suspension) == [
        {"call_id": "r1", "tool": "refund", "arguments": {"order_id": "1001", "amount": 20.0}}
    ]
    with pytest.raises(InvalidResumeError, match="'r2'"):
        runner.resume(turn.id, AgentResumeCommand.approve_tools(["r2"]))
    done = runner.resume(turn.id, AgentResumeCommand.approve_tools(["r1"]))
    assert done.status is S.COMPLETED


def test_bad_arguments_are_typed_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="call_ids") as caught:
        AgentResumeCommand.approve_tools("r1")
    assert caught.value.field == "call_ids"
    with pytest.raises(InvalidArgumentError, match="call_ids"):
        AgentResumeCommand.approve_tools(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="call_ids"):
        AgentResumeCommand.approve_tools([1])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="reasons"):
        AgentResumeCommand.reject_tools({"r1": 3})  # type: ignore[dict-item]
