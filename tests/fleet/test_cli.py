"""The ``agentworker`` CLI as an operator meets it: Redis down, JSON for scripts, approvals.

Turns are made in-process on a private redis-server; the CLI reads them through Typer's
runner with the same ``AGENTWORKER_*`` settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentworker.cli.commands import NOTHING_TO_DO, app
from agentworker.settings import Settings
from agentworker.wiring import create_app, make_runner
from runner_core import AgentRunner, AgentTurnStatus
from tests.support.approvals import listed_calls, listing_both
from tests.support.servers import RedisServer, free_port

pytestmark = pytest.mark.redis

LOADER = "tests.support.fleet_agents:loader"
ROOT = Path(__file__).resolve().parents[2]
# What the installed `agentworker` script runs, with this interpreter.
COMMAND = [sys.executable, "-c", "from agentworker.cli.main import main; main()"]
cli = CliRunner()


@pytest.fixture()
def env(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "AGENTWORKER_REDIS_URL": server.url,
        "AGENTWORKER_NAMESPACE": "cli-" + uuid.uuid4().hex[:8],
        "AGENTWORKER_AGENT_LOADER": LOADER,
        # Nothing consumes the wake-ups; a broker that accepts them keeps dispatch quick.
        "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{server.port}/1",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.fixture()
def runner(env: dict[str, str]) -> AgentRunner:
    settings = Settings()
    return make_runner(settings, create_app(settings))


def invoke(*args: str) -> tuple[int, str]:
    result = cli.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


# --- Redis down: one line, exit 1, for every command ------------------------------------

DOWN_COMMANDS = [
    ["turns", "list"],
    ["turns", "list", "--json"],
    ["turns", "show", "t1"],
    ["turns", "show", "t1", "--json"],
    ["turns", "tail", "t1", "--timeout", "1"],
    ["turns", "start", "e2e-tools", "go"],
    ["turns", "resume", "t1", "--approve", "c0"],
    ["turns", "cancel", "t1"],
    ["turns", "quarantined"],
    ["sweep"],
]


@pytest.mark.parametrize("command", DOWN_COMMANDS, ids=" ".join)
def test_redis_down_is_one_line_and_exit_1(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()  # nothing listens there
    monkeypatch.setenv("AGENTWORKER_REDIS_URL", f"redis://127.0.0.1:{port}/0")
    monkeypatch.setenv("AGENTWORKER_AGENT_LOADER", LOADER)
    code, out = invoke(*command)
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 1, out
    assert len(lines) == 1, out
    assert lines[0].startswith("error:") and f"127.0.0.1:{port}" in lines[0], out
    assert "Traceback" not in out


def test_the_installed_command_is_one_line_too() -> None:
    port = free_port()
    env = {"AGENTWORKER_REDIS_URL": f"redis://127.0.0.1:{port}/0", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [*COMMAND, "turns", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "unavailable" in done.stderr


# --- list -------------------------------------------------------------------------------


def test_list_json_has_times_and_what_a_turn_waits_for(runner: AgentRunner) -> None:
    waiting = runner.run("e2e-approval", "pay")
    done = runner.run("e2e-tools", "go")

    code, out = invoke("turns", "list", "--json")

    assert code == 0, out
    rows = {row["id"]: row for row in json.loads(out)}
    assert set(rows) == {waiting.id, done.id}
    row = rows[waiting.id]
    assert set(row) == {
        "id", "agent_id", "status", "version", "root_turn_id", "parent_turn_id",
        "conversation_id", "created_at", "updated_at", "lease_owner", "cancel_requested",
        "waiting_for",
    }  # fmt: skip
    assert row["status"] == "WAITING_FOR_APPROVAL"
    assert row["created_at"] <= row["updated_at"]
    assert row["waiting_for"]["type"] == "TOOL_APPROVAL"
    assert row["waiting_for"]["correlation_id"] == "c0"
    assert row["waiting_for"]["metadata"] == {
        "tool": "pay",
        "arguments": {"amount": 5.0},
        "calls": [{"call_id": "c0", "tool": "pay", "arguments": {"amount": 5.0}}],
    }
    assert rows[done.id]["status"] == "COMPLETED" and rows[done.id]["waiting_for"] is None


def test_list_table_shows_times_and_waiting_for(runner: AgentRunner) -> None:
    waiting = runner.run("e2e-approval", "pay")
    code, out = invoke("turns", "list")
    assert code == 0
    line = next(line for line in out.splitlines() if waiting.id in line)
    assert "approval of pay(amount=5.0)" in line
    assert "created" in out and "updated" in out and "waiting for" in out


@pytest.mark.parametrize("spelling", ["completed", "Completed", "COMPLETED"])
def test_status_is_case_insensitive(runner: AgentRunner, spelling: str) -> None:
    done = runner.run("e2e-tools", "go")
    waiting = runner.run("e2e-approval", "pay")
    code, out = invoke("turns", "list", "--status", spelling)
    assert code == 0, out
    assert done.id in out and waiting.id not in out


# --- show -------------------------------------------------------------------------------


def test_show_prints_the_waiting_tool_and_its_arguments(runner: AgentRunner) -> None:
    turn = runner.run("e2e-approval", "pay")
    code, out = invoke("turns", "show", turn.id)
    assert code == 0, out
    assert "waits for TOOL_APPROVAL" in out and "(c0)" in out
    assert "tool pay with arguments:" in out
    assert '"amount": 5.0' in out


def test_show_json_nests_children(runner: AgentRunner) -> None:
    parent = runner.run("e2e-parent", "three parts")
    code, out = invoke("turns", "show", parent.id, "--json")
    assert code == 0, out
    tree = json.loads(out)
    assert tree["id"] == parent.id and tree["status"] == "COMPLETED"
    assert tree["final_output"] == parent.final_output
    assert len(tree["children"]) == 3
    assert all(c["parent_turn_id"] == parent.id for c in tree["children"])
    assert all(c["status"] == "COMPLETED" and c["children"] == [] for c in tree["children"])


def test_show_json_of_a_waiting_turn_has_the_arguments(runner: AgentRunner) -> None:
    turn = runner.run("e2e-approval", "pay")
    code, out = invoke("turns", "show", turn.id, "--json")
    assert code == 0
    waiting = json.loads(out)["waiting_for"]
    assert waiting["metadata"]["arguments"] == {"amount": 5.0}


# --- start, cancel, resume --------------------------------------------------------------


def test_start_saves_a_ready_turn(runner: AgentRunner) -> None:
    code, out = invoke("turns", "start", "e2e-tools", "go", "--json", "--metadata", '{"k": 1}')
    assert code == 0, out
    turn = json.loads(out)
    assert turn["status"] == "READY" and turn["agent_id"] == "e2e-tools"
    assert runner.store.load(turn["id"]).metadata == {"k": 1}


def test_start_without_a_loader_says_what_to_set(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTWORKER_AGENT_LOADER")
    code, out = invoke("turns", "start", "e2e-tools", "go")
    assert code == 1 and "AGENTWORKER_AGENT_LOADER is not set" in out
    assert len(out.strip().splitlines()) == 1


def test_reading_needs_no_loader(runner: AgentRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    turn = runner.run("e2e-approval", "pay")
    monkeypatch.delenv("AGENTWORKER_AGENT_LOADER")
    code, out = invoke("turns", "show", turn.id)
    assert code == 0 and turn.id in out


def test_an_unknown_agent_is_one_line(runner: AgentRunner) -> None:
    code, out = invoke("turns", "start", "no-such-agent", "go")
    assert code == 1 and "no-such-agent" in out and len(out.strip().splitlines()) == 1


def test_cancelling_an_ended_turn_says_nothing_to_do(runner: AgentRunner) -> None:
    done = runner.run("e2e-tools", "go")
    version = runner.store.load(done.id).version
    code, out = invoke("turns", "cancel", done.id)
    assert code == NOTHING_TO_DO
    assert "nothing to do" in out and "already ended (COMPLETED)" in out
    assert runner.store.load(done.id).version == version


def test_cancelling_twice_says_nothing_to_do(runner: AgentRunner) -> None:
    turn = runner.start("e2e-tools", "nobody runs me")
    busy = runner.claim(turn.id, "busy-worker")  # a worker holds it: cancel asks
    assert busy is not None
    code, out = invoke("turns", "cancel", turn.id)
    assert code == 0 and "cancellation requested" in out
    code, out = invoke("turns", "cancel", turn.id)
    assert code == NOTHING_TO_DO and "already requested" in out
    runner.release(busy)


def test_resuming_an_ended_turn_says_nothing_to_do(runner: AgentRunner) -> None:
    done = runner.run("e2e-tools", "go")
    code, out = invoke("turns", "resume", done.id, "--continue")
    assert code == NOTHING_TO_DO and "already ended" in out


def test_a_refused_resume_is_one_line(runner: AgentRunner) -> None:
    turn = runner.run("e2e-approval", "pay")
    code, out = invoke("turns", "resume", turn.id, "--approve", "wrong")
    assert code == 1 and "cannot resume" in out and len(out.strip().splitlines()) == 1


def test_a_lost_wake_up_is_a_one_line_warning(runner: AgentRunner, env: dict[str, str]) -> None:
    # Given a turn to approve, and a broker nobody listens on (the store is up)
    turn = runner.run("e2e-approval", "pay")
    broken = {**os.environ, "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"}

    # When the operator approves it with the agentworker command
    done = subprocess.run(
        [*COMMAND, "turns", "resume", turn.id, "--approve", "c0"],
        env=broken,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )

    # Then the resume is saved, and the lost wake-up is one line, not a traceback
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 1 and warnings[0].startswith("warning: dispatching turn"), warnings
    assert "the sweeper will send it" in warnings[0]
    assert runner.store.load(turn.id).status is not AgentTurnStatus.WAITING_FOR_APPROVAL


def test_quarantined_lists_turns_moved_aside(runner: AgentRunner) -> None:
    from stores import RedisAgentTurnStore

    turn = runner.start("e2e-tools", "go")
    store = runner.store
    assert isinstance(store, RedisAgentTurnStore)
    assert invoke("turns", "quarantined")[1].strip() == "no quarantined turns"
    store.quarantine(turn.id, "body is not JSON")

    code, out = invoke("turns", "quarantined", "--json")

    assert code == 0
    [row] = json.loads(out)
    assert (row["turn_id"], row["reason"]) == (turn.id, "body is not JSON")


# --- several calls waiting for approval -------------------------------------------------


def waiting_on_two(runner: AgentRunner) -> str:
    return listing_both(runner.run("e2e-refunds", "refund both")).id


def test_list_and_show_every_waiting_call(runner: AgentRunner) -> None:
    turn_id = waiting_on_two(runner)

    code, out = invoke("turns", "list")
    assert code == 0, out
    line = next(line for line in out.splitlines() if turn_id in line)
    assert "approval of 2: refund(" in line
    code, out = invoke("turns", "list", "--json")
    [row] = [r for r in json.loads(out) if r["id"] == turn_id]
    assert row["waiting_for"]["waiting_calls"] == listed_calls()
    code, out = invoke("turns", "show", turn_id)
    assert "call r1: tool refund with arguments:" in out and '"order_id": "1001"' in out
    assert "call r2: tool refund with arguments:" in out and '"order_id": "1002"' in out


def test_resume_approves_one_then_rejects_the_other(runner: AgentRunner) -> None:
    turn_id = waiting_on_two(runner)

    code, out = invoke("turns", "resume", turn_id, "--approve", "r2", "--by", "alice")
    assert code == 0, out
    assert "WAITING_FOR_APPROVAL" in out and "still waiting on r1" in out
    code, out = invoke("turns", "resume", turn_id, "--reject", "r1", "--reason", "no")
    assert code == 0, out

    stored = runner.store.load(turn_id)
    assert stored.status is AgentTurnStatus.RUNNING
    assert (stored.approved_call_ids, stored.rejected_calls) == (["r2"], {"r1": "no"})
    assert [(e["kind"], e["metadata"]) for e in stored.resume_log] == [
        ("APPROVE_TOOL", {"by": "alice"}),
        ("REJECT_TOOL", {}),
    ]


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        (["--approve", "r1", "--approve", "r2"], "APPROVE_TOOLS"),
        (["--approve-all"], "APPROVE_TOOLS"),
        (["--reject", "r1", "--reject", "r2", "--reason", "no"], "REJECT_TOOLS"),
    ],
)
def test_resume_answers_several_calls_at_once(
    runner: AgentRunner, options: list[str], kind: str
) -> None:
    turn_id = waiting_on_two(runner)

    code, out = invoke("turns", "resume", turn_id, *options)

    assert code == 0, out
    stored = runner.store.load(turn_id)
    assert stored.status is AgentTurnStatus.RUNNING
    [entry] = stored.resume_log
    assert (entry["kind"], entry["call_ids"]) == (kind, ["r1", "r2"])


def test_a_refused_batch_changes_nothing(runner: AgentRunner) -> None:
    turn_id = waiting_on_two(runner)
    before = runner.store.load(turn_id)

    code, out = invoke("turns", "resume", turn_id, "--approve", "r1", "--approve", "r9")

    assert code == 1 and "'r9' is not one of the calls waiting" in out
    assert runner.store.load(turn_id).version == before.version
    code, out = invoke("turns", "resume", turn_id, "--approve", "r1", "--approve-all")
    assert code == 1 and "exactly one of" in out
