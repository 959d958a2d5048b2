"""``turns list`` fits 80 columns (``--wide`` shows all); ``turns show`` prints the transcript."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentworker.cli.commands import app
from agentworker.settings import Settings
from agentworker.wiring import make_runner
from runner_core import AgentRunner, AgentTurnStatus
from tests.support.console_agents import INSTRUCTIONS

pytestmark = pytest.mark.redis

cli = CliRunner()


@pytest.fixture()
def runner(producer_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> AgentRunner:
    """A runner on the test's Redis with the console's agents; turns run in-process."""
    monkeypatch.setenv("AGENTWORKER_AGENT_LOADER", "tests.support.console_agents:loader")
    return make_runner(Settings())


def invoke(*args: str, columns: int = 80) -> tuple[int, str]:
    result = cli.invoke(app, list(args), env={"COLUMNS": str(columns)})
    return result.exit_code, result.output


def test_the_list_fits_80_columns_with_short_ids(runner: AgentRunner) -> None:
    waiting = runner.run("console-approval", "cancel A-17")
    done = runner.run("console-support", "where is A-17?")
    assert waiting.status is AgentTurnStatus.WAITING_FOR_APPROVAL

    code, out = invoke("turns", "list")

    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert waiting.id[:12] in out and done.id[:12] in out
    assert waiting.id not in out  # short ids
    assert "cancel_order" in out.replace("\n", "")  # what it waits for, folded


def test_wide_shows_every_column_and_whole_ids(runner: AgentRunner) -> None:
    turn = runner.run("console-approval", "cancel A-17")

    code, out = invoke("turns", "list", "--wide", columns=220)

    assert code == 0
    assert turn.id in out and "leased by" in out and "created" in out


def test_show_prints_the_transcript_the_page_shows(runner: AgentRunner) -> None:
    turn = runner.run("console-support", "where is A-17?")

    code, out = invoke("turns", "show", turn.id, columns=200)

    assert code == 0
    transcript = out.split("transcript:", 1)[1]
    assert "[user] user\n    where is A-17?" in transcript
    assert "[call] calls refund_quote (quote)" in transcript
    assert json.loads(transcript.split("(quote)\n", 1)[1].split("[result]")[0]) == {
        "order_id": "A-17",
        "amount": 19.5,
    }
    assert "[result] refund_quote returned (quote)\n    refund of 19.50 for A-17" in transcript
    assert "[final] final answer" in transcript
    assert INSTRUCTIONS in transcript  # this process loads the agent: its instructions too


def test_show_without_the_transcript(runner: AgentRunner) -> None:
    turn = runner.run("console-support", "where is A-17?")
    code, out = invoke("turns", "show", turn.id, "--no-transcript")
    assert code == 0 and "transcript:" not in out and "COMPLETED" in out
