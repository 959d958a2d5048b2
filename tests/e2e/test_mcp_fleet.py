"""MCP toolsets on real ``celery worker`` processes: both transports, and a killed worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from runner_core import AgentTurnSnapshot, AgentTurnStatus, ToolMessage  # noqa: E402
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
def fleet_env(
    fleet_env: dict[str, str], mcp_server: HttpServer, server_files: ServerFiles
) -> dict[str, str]:
    return {
        **fleet_env,
        "AGENTWORKER_AGENT_LOADER": "tests.support.mcp_agents:loader",
        "MCP_E2E_URL": mcp_server.url,
        "MCP_E2E_DIR": str(server_files.log.parent),
    }


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
