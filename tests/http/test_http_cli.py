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
from tests.support.servers import RedisServer, free_port

pytestmark = pytest.mark.redis

CREDENTIALS = [
    {"token": "acme", "tenant": "acme", "scopes": ["read", "write", "approve"]},
    {"token": "acme-ro", "tenant": "acme", "scopes": ["read"]},
]


@pytest.fixture
def url(server: RedisServer) -> Iterator[str]:
    settings = Settings(
        redis_url=server.url,
        namespace="cli-" + uuid.uuid4().hex[:8],
        credentials=json.dumps(CREDENTIALS),
    )
    runner = AgentRunner(agent_loader=InMemoryAgentLoader([approval_agent()]))
    runner.dispatcher = lambda t: runner.run_until_blocked(runner.restore(t)) and None
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
    assert waiting["suspension"]["metadata"] == {"tool": "pay", "arguments": {"amount": 5}}

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
