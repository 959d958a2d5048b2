"""``agentworker http ...``: the CLI answering the inbox through the HTTP API's client."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import uvicorn
from typer.testing import CliRunner

from agentworker.cli.commands import app
from agentworker.client import AgentworkerClient
from agentworker.http import create_http_app
from agentworker.settings import Settings
from runner_core import AgentRunner, InMemoryAgentLoader
from tests.support.agents import approval_agent
from tests.support.approvals import listing_both, refunds_agent
from tests.support.servers import RedisServer, free_port

pytestmark = pytest.mark.redis

CREDENTIALS = [
    {"token": "acme", "tenant": "acme", "scopes": ["read", "write", "approve"]},
    {"token": "acme-ro", "tenant": "acme", "scopes": ["read"]},
]
LEDGER: list[str] = []


@pytest.fixture
def runner() -> AgentRunner:
    LEDGER.clear()
    loader = InMemoryAgentLoader([approval_agent(), refunds_agent(LEDGER)])
    runner = AgentRunner(agent_loader=loader)
    runner.dispatcher = lambda t: runner.run_until_blocked(runner.restore(t)) and None
    return runner


@pytest.fixture
def url(server: RedisServer, runner: AgentRunner) -> Iterator[str]:
    settings = Settings(
        redis_url=server.url,
        namespace="cli-" + uuid.uuid4().hex[:8],
        credentials=json.dumps(CREDENTIALS),
    )
    port = free_port()
    config = uvicorn.Config(create_http_app(runner, settings), port=port, log_level="warning")
    app_server = uvicorn.Server(config)
    thread = threading.Thread(target=app_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not app_server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    app_server.should_exit = True
    thread.join(10)


def test_the_cli_lists_the_inbox_and_approves_over_http(url: str) -> None:
    turn = AgentworkerClient(url, token="acme").start("pay-agent", "pay 5")
    cli = CliRunner()
    env = {"AGENTWORKER_API_URL": url, "AGENTWORKER_API_TOKEN": "acme"}

    listed = cli.invoke(app, ["http", "inbox", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    [waiting] = json.loads(listed.output)
    assert waiting["id"] == turn.id
    assert waiting["suspension"]["metadata"] == {
        "tool": "pay",
        "arguments": {"amount": 5},
        "calls": [{"call_id": "c1", "tool": "pay", "arguments": {"amount": 5}}],
    }

    table = cli.invoke(app, ["http", "inbox"], env=env)
    assert turn.id in table.output and "pay" in table.output

    refused = cli.invoke(app, ["http", "approve", turn.id, "c1", "--token", "acme-ro"], env=env)
    assert refused.exit_code == 1 and "approve" in refused.output

    approved = cli.invoke(app, ["http", "approve", turn.id, "c1", "--reason", "ok"], env=env)
    assert approved.exit_code == 0, approved.output
    ended = cli.invoke(app, ["http", "wait", turn.id, "--until", "ended"], env=env)
    assert f"{turn.id}: COMPLETED" in ended.output


def test_an_unreachable_api_is_one_line(url: str) -> None:
    answer = CliRunner().invoke(
        app, ["http", "inbox", "--url", "http://127.0.0.1:9", "--token", "x"]
    )
    assert answer.exit_code == 1 and "does not answer" in answer.output


def waiting_on_two(url: str, runner: AgentRunner) -> str:
    turn = AgentworkerClient(url, token="acme").start("refunds", "refund both")
    listing_both(runner.restore(turn.id))
    return turn.id


def test_the_client_answers_part_then_the_rest(url: str, runner: AgentRunner) -> None:
    client = AgentworkerClient(url, token="acme")
    turn_id = waiting_on_two(url, runner)

    partial = client.reject_tools(turn_id, {"r2": "no"})
    assert partial.status == "WAITING_FOR_APPROVAL"
    assert [c["call_id"] for c in (partial.suspension or {})["waiting_calls"]] == ["r1"]

    client.approve_tools(turn_id, ["r1"])
    done = client.wait(turn_id, "ended", 10)
    assert done.status == "COMPLETED" and LEDGER == ["1001"]
    kinds = [e["kind"] for e in runner.store.load(turn_id).resume_log]
    assert kinds == ["REJECT_TOOLS", "APPROVE_TOOLS"]


def test_the_inbox_lists_every_waiting_call(url: str, runner: AgentRunner) -> None:
    turn_id = waiting_on_two(url, runner)
    env = {"AGENTWORKER_API_URL": url, "AGENTWORKER_API_TOKEN": "acme", "COLUMNS": "200"}

    table = CliRunner().invoke(app, ["http", "inbox"], env=env)

    assert table.exit_code == 0, table.output
    rows = [line for line in table.output.splitlines() if turn_id in line]
    assert len(rows) == 2
    assert "r1" in rows[0] and "1001" in rows[0] and "r2" in rows[1] and "1002" in rows[1]


def test_the_cli_approves_one_then_the_rest_with_all(url: str, runner: AgentRunner) -> None:
    turn_id = waiting_on_two(url, runner)
    cli = CliRunner()
    env = {"AGENTWORKER_API_URL": url, "AGENTWORKER_API_TOKEN": "acme"}

    first = cli.invoke(app, ["http", "approve", turn_id, "r2"], env=env)
    assert first.exit_code == 0, first.output
    assert "WAITING_FOR_APPROVAL (still waiting on r1)" in first.output

    both = cli.invoke(app, ["http", "approve", turn_id, "r1", "--all"], env=env)
    assert both.exit_code == 2 and "not both" in both.output

    rest = cli.invoke(app, ["http", "approve", turn_id, "--all"], env=env)
    assert rest.exit_code == 0, rest.output
    assert AgentworkerClient(url, token="acme").wait(turn_id, "ended", 10).status == "COMPLETED"
    assert sorted(LEDGER) == ["1001", "1002"]


def test_the_cli_rejects_several_calls(url: str, runner: AgentRunner) -> None:
    turn_id = waiting_on_two(url, runner)
    env = {"AGENTWORKER_API_URL": url, "AGENTWORKER_API_TOKEN": "acme"}

    answer = CliRunner().invoke(
        app, ["http", "reject", turn_id, "r1", "r2", "--reason", "not today"], env=env
    )

    assert answer.exit_code == 0, answer.output
    log = runner.store.load(turn_id).resume_log
    assert [(e["kind"], e["reasons"]) for e in log] == [
        ("REJECT_TOOLS", {"r1": "not today", "r2": "not today"})
    ]
    assert LEDGER == []
