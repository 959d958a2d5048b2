"""The ``agentworker`` CLI through Typer's runner, against a real Redis with real turns."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agentworker.cli.commands import app
from agentworker.settings import Settings
from agentworker.wiring import make_runner
from runner_core import AgentResumeCommand, AgentRunner, AgentTurnStatus

pytestmark = pytest.mark.redis

cli = CliRunner()


@pytest.fixture()
def runner(producer_env: dict[str, str], redis_server: object) -> AgentRunner:
    """A runner on the test's Redis (with the event bridge); turns run in-process here."""
    return make_runner(Settings())


def invoke(*args: str) -> tuple[int, str]:
    result = cli.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_list_filters_by_status_and_agent(runner: AgentRunner) -> None:
    waiting = runner.run("e2e-approval", "pay")
    done = runner.run("e2e-tools", "go")
    assert waiting.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert done.status is AgentTurnStatus.COMPLETED

    code, out = invoke("turns", "list")
    assert code == 0 and waiting.id in out and done.id in out

    code, out = invoke("turns", "list", "--status", "WAITING_FOR_APPROVAL")
    assert code == 0 and waiting.id in out and done.id not in out

    code, out = invoke("turns", "list", "--agent", "e2e-tools")
    assert code == 0 and done.id in out and waiting.id not in out


def test_show_draws_the_tree_with_children(runner: AgentRunner) -> None:
    parent = runner.run("e2e-parent", "three parts")
    assert parent.status is AgentTurnStatus.COMPLETED
    children = runner.store.children_of(parent.id)

    code, out = invoke("turns", "show", parent.id)

    assert code == 0
    assert len(children) == 3 and all(child in out for child in children)
    assert out.count("COMPLETED phase MODEL") == 4  # the root and its three children
    assert "parts: COMPLETED, COMPLETED, COMPLETED" in out


def test_resume_approves_with_audit_metadata_and_refuses_a_wrong_call(
    runner: AgentRunner,
) -> None:
    turn = runner.run("e2e-approval", "pay")
    before = runner.store.peek(turn.id).version

    code, out = invoke("turns", "resume", turn.id, "--approve", "not-the-call")
    assert code == 1 and "cannot resume" in out
    assert runner.store.peek(turn.id).version == before

    code, out = invoke("turns", "resume", turn.id, "--approve", "c0", "--by", "alice")
    assert code == 0 and "RUNNING" in out
    stored = runner.store.load(turn.id)
    assert stored.resume_log[-1]["metadata"] == {"by": "alice"}
    assert runner.run_until_blocked(runner.restore(turn.id)).final_output == "done: paid 5.0"


def test_resume_with_form_input(runner: AgentRunner) -> None:
    turn = runner.run("e2e-form", "ship")
    code, _ = invoke("turns", "resume", turn.id, "--input", '{"city": "Bergen"}')
    assert code == 0
    final = runner.run_until_blocked(runner.restore(turn.id))
    assert final.final_output == 'done: shipping to {"city": "Bergen"}'


def test_resume_needs_exactly_one_command(runner: AgentRunner) -> None:
    turn = runner.run("e2e-approval", "pay")
    code, out = invoke("turns", "resume", turn.id)
    assert code == 1 and "exactly one" in out


def test_cancel_finalizes_a_waiting_turn(runner: AgentRunner) -> None:
    turn = runner.run("e2e-approval", "pay")
    code, out = invoke("turns", "cancel", turn.id, "--reason", "operator stop")
    assert code == 0 and "CANCELLED" in out
    stored = runner.store.load(turn.id)
    assert stored.status is AgentTurnStatus.CANCELLED
    assert "operator stop" in (stored.messages[-1].text or "")  # type: ignore[union-attr]


def test_tail_prints_the_tree_until_the_root_ends(runner: AgentRunner) -> None:
    turn = runner.run("e2e-approval", "pay")
    runner.resume(turn.id, AgentResumeCommand.approve_tool("c0"))

    code, out = invoke("turns", "tail", turn.id, "--timeout", "5")

    assert code == 0
    lines = [line for line in out.splitlines() if line.strip()]
    assert "SNAPSHOT_SAVED" in lines[0] and "TURN_COMPLETED" in lines[-1]
    assert any("TOOL_APPROVAL_REQUESTED" in line for line in lines)


def test_unknown_turn_is_a_clear_error(runner: AgentRunner) -> None:
    for command in (
        ["turns", "show", "nope"],
        ["turns", "cancel", "nope"],
        ["turns", "resume", "nope", "--approve", "c0"],
    ):
        code, out = invoke(*command)
        assert code == 1 and "'nope' not found" in out, (command, out)


def test_sweep_reports_what_it_woke(runner: AgentRunner) -> None:
    runner.start("e2e-tools", "nobody runs me")  # a READY turn, young: not lost yet
    code, out = invoke("sweep")
    assert code == 0 and "due 0  lost 0  repaired 0" in out
