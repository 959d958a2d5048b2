"""MCP toolsets on real ``celery worker`` processes: both transports, and a killed worker."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from runner_core import (  # noqa: E402
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentTurnStatus,
    RetryPolicy,
    ToolMessage,
)
from tests.support.fleet_fixtures import drive, producer  # noqa: E402
from tests.support.mcp_agents import files  # noqa: E402
from tests.support.mcp_fixtures import HttpServer, ServerFiles  # noqa: E402
from tests.support.servers import Fleet  # noqa: E402

pytestmark = pytest.mark.e2e


@pytest.fixture()
def server_files(tmp_path: Path) -> ServerFiles:
    return files(tmp_path)


@pytest.fixture()
def mcp_server(server_files: ServerFiles) -> Iterator[HttpServer]:
    server = HttpServer(server_files).start()
    try:
        yield server
    finally:
        server.release()
        server.stop()


@pytest.fixture()
def late_server(server_files: ServerFiles) -> Iterator[HttpServer]:
    """A server the test starts late (not yet listening)."""
    server = HttpServer(server_files)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def fleet_env(
    fleet_env: dict[str, str],
    mcp_server: HttpServer,
    late_server: HttpServer,
    server_files: ServerFiles,
) -> dict[str, str]:
    return {
        **fleet_env,
        "AGENTWORKER_AGENT_LOADER": "tests.support.mcp_agents:loader",
        "MCP_E2E_URL": mcp_server.url,
        "MCP_E2E_LATE_URL": late_server.url,
        "MCP_E2E_DIR": str(server_files.log.parent),
    }


def wait_status(
    runner: AgentRunner, turn_id: str, status: AgentTurnStatus, timeout: float = 60
) -> AgentTurnSnapshot:
    deadline = time.monotonic() + timeout
    while True:
        s = runner.store.load(turn_id)
        if s.status is status:
            return s
        assert time.monotonic() < deadline, f"turn {turn_id} is {s.status.value}, not {status}"
        time.sleep(0.05)


def kill_stdio_servers(files: ServerFiles, spare: HttpServer) -> None:
    """SIGKILL the stdio servers the workers started (not the HTTP server)."""
    keep = spare.proc.pid if spare.proc is not None else None
    for pid in {e["pid"] for e in files.entries("start")} - {keep}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def results(snapshot: AgentTurnSnapshot) -> list[str]:
    return [m.content for m in snapshot.messages if isinstance(m, ToolMessage)]


def test_turns_list_call_and_complete_on_both_transports(
    fleet: Fleet, producer_env: dict[str, str], server_files: ServerFiles
) -> None:
    # Given a worker, and turns on a stdio server, an HTTP server and an approval
    fleet.start_worker("w1")
    fleet.wait_ready()
    runner = producer()
    ids = [runner.start(agent, "go").id for agent in ("mcp-stdio", "mcp-http", "mcp-approval")]

    # When they run (drive approves the charge)
    final = drive(runner, ids, timeout=90)

    # Then each completed with the servers' answers, every call carrying its key
    stdio, http, approval = (final[i] for i in ids)
    for snapshot in (stdio, http):
        assert snapshot.status is AgentTurnStatus.COMPLETED, snapshot.terminal_reason
        assert [json.loads(r) for r in results(snapshot)] == [
            {"result": 3},
            {"result": "charged 7"},
        ]
        assert set(snapshot.tool_fingerprints) == {"add", "charge"}
    assert approval.status is AgentTurnStatus.COMPLETED, approval.terminal_reason
    assert [json.loads(r) for r in results(approval)] == [{"result": "charged 9"}]
    keys = {e["key"] for e in server_files.entries("call")}
    assert keys == {f"{t}:c0" for t in ids} | {f"{t}:c1" for t in ids[:2]}


def test_a_call_sent_again_after_a_kill_is_deduplicated_by_the_server(
    fleet: Fleet, producer_env: dict[str, str], server_files: ServerFiles
) -> None:
    # Given a worker whose call the server has executed but not yet answered
    fleet.start_worker("victim")
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()
    turn = runner.start("mcp-hold", "go")
    server_files.wait_for("done", "hold")

    # When the worker is killed before it could commit the result
    fleet.kill_worker("victim")
    server_files.release.touch()
    fleet.start_worker("rescuer")

    # Then the call is sent again with the same key, the server deduplicates it, and the
    # turn completes with the result of the one execution
    final = drive(runner, [turn.id], timeout=60)[turn.id]
    assert final.status is AgentTurnStatus.COMPLETED, final.terminal_reason
    assert [json.loads(r) for r in results(final)] == [{"result": "held h"}]
    key = f"{turn.id}:c0"
    assert [e["key"] for e in server_files.entries("call", "hold")] == [key, key]
    assert [e["key"] for e in server_files.entries("done", "hold")] == [key]
    assert [e["key"] for e in server_files.entries("deduplicated", "hold")] == [key]


def test_servers_restarted_while_a_turn_waits_are_reached_again(
    fleet: Fleet, producer_env: dict[str, str], server_files: ServerFiles, mcp_server: HttpServer
) -> None:
    # Given two turns waiting for approval after a first step on each transport
    fleet.start_worker("w1")
    fleet.wait_ready()
    runner = producer()
    http = runner.start("mcp-http-two", "go").id
    stdio = runner.start("mcp-stdio-gated", "go").id
    wait_status(runner, http, AgentTurnStatus.WAITING_FOR_APPROVAL)
    wait_status(runner, stdio, AgentTurnStatus.WAITING_FOR_APPROVAL)

    # When both servers restart before the next step
    mcp_server.restart()
    kill_stdio_servers(server_files, mcp_server)

    # Then, approved, both turns complete on the new servers
    final = drive(runner, [http, stdio], timeout=60)
    assert final[http].status is AgentTurnStatus.COMPLETED, final[http].terminal_reason
    assert [json.loads(r) for r in results(final[http])] == [
        {"result": 3},
        {"result": "charged 7"},
    ]
    assert final[stdio].status is AgentTurnStatus.COMPLETED, final[stdio].terminal_reason
    assert [json.loads(r) for r in results(final[stdio])] == [{"result": 4}]
    callers = [e["pid"] for e in server_files.entries("call") if e["key"].startswith(http)]
    assert len(set(callers)) == 2


def test_a_server_that_is_down_is_retried_until_it_is_back(
    fleet: Fleet, producer_env: dict[str, str], late_server: HttpServer
) -> None:
    # Given a worker, beat, and a turn on a server that is not up
    fleet.start_worker("w1")
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()
    retrying = AgentTurnOptions(
        policy=AgentExecutionPolicy(
            retry=RetryPolicy(max_retries=20, initial_delay=0.5, multiplier=1)
        )
    )
    turn = runner.start("mcp-late", "go", options=retrying)

    # When it runs, it is scheduled for a retry naming the server
    waiting = wait_status(runner, turn.id, AgentTurnStatus.RETRY_SCHEDULED)
    assert waiting.suspension is not None
    assert "MCP server 'late-billing' is unavailable" in waiting.suspension.message

    # Then, the server up, a retry completes the turn
    late_server.start()
    final = drive(runner, [turn.id], timeout=60)[turn.id]
    assert final.status is AgentTurnStatus.COMPLETED, final.terminal_reason
    assert [json.loads(r) for r in results(final)] == [{"result": 10}]


def test_a_schema_changed_while_a_turn_waits_fails_it_naming_the_tool(
    fleet: Fleet, producer_env: dict[str, str], server_files: ServerFiles, mcp_server: HttpServer
) -> None:
    # Given a turn whose call to add waits for approval on a stdio server
    fleet.start_worker("w1")
    fleet.wait_ready()
    runner = producer()
    turn = runner.start("mcp-stdio-gated", "go")
    waiting = wait_status(runner, turn.id, AgentTurnStatus.WAITING_FOR_APPROVAL)
    assert set(waiting.tool_fingerprints) == {"add"}

    # When the server comes back with another schema for add, and the call is approved
    server_files.schema.write_text("v2")
    kill_stdio_servers(server_files, mcp_server)
    runner.submit_resume(turn.id, AgentResumeCommand.approve_tool("c0"))

    # Then the turn fails with the typed refusal naming the tool; the server never ran it
    final = wait_status(runner, turn.id, AgentTurnStatus.FAILED)
    assert final.error is not None and final.error.type == "ToolSchemaChangedError"
    assert "tool 'add' of server 'test-tools' changed its schema" in (final.terminal_reason or "")
    assert [e for e in server_files.entries("call", "add") if e["key"].startswith(turn.id)] == []


def test_prefork_children_open_their_own_sessions(
    fleet: Fleet, producer_env: dict[str, str], server_files: ServerFiles
) -> None:
    # Given a prefork worker with two children
    fleet.start_worker("forks", concurrency=2, pool="prefork")
    fleet.wait_ready()
    runner = producer()

    # When they run stdio turns side by side
    ids = [runner.start("mcp-stdio", "go").id for _ in range(4)]
    final = drive(runner, ids, timeout=90)

    # Then every turn completed, each call from a server its child started for itself
    assert all(s.status is AgentTurnStatus.COMPLETED for s in final.values()), final
    starts = {e["pid"] for e in server_files.entries("start")}
    callers = {e["pid"] for e in server_files.entries("call") if e["tool"] == "add"}
    assert callers <= starts and len(starts) <= 3  # the HTTP server and one per child
