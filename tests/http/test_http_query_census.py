"""The HTTP rows of the census: bad query parameters are 4xx naming the parameter.

Each case of ``tests.support.census.QUERIES`` gets its status, an error whose ``field`` is
the parameter, a short message whatever was sent, and leaves every turn as it was.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from agentworker.http import create_http_app
from agentworker.settings import Settings
from runner_core import AgentRunner, AgentTurnStatus, InMemoryAgentLoader
from tests.support.agents import approval_agent
from tests.support.census import QUERIES, QueryCase, cursor_of
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

TOKEN = {"Authorization": "Bearer rw"}
CREDENTIALS = [{"token": "rw", "tenant": "acme", "scopes": ["read", "write", "approve"]}]


@pytest.fixture
def runner() -> AgentRunner:
    runner = AgentRunner(agent_loader=InMemoryAgentLoader([approval_agent()]))
    runner.dispatcher = lambda turn_id: runner.run_until_blocked(runner.restore(turn_id)) and None
    return runner


@pytest.fixture
def http(runner: AgentRunner, server: RedisServer) -> Iterator[TestClient]:
    settings = Settings(
        redis_url=server.url,
        namespace="query-" + uuid.uuid4().hex[:8],
        credentials=json.dumps(CREDENTIALS),
    )
    with TestClient(create_http_app(runner, settings)) as client:
        yield client


@pytest.fixture
def waiting(http: TestClient, runner: AgentRunner) -> str:
    started = http.post("/turns", json={"agent": "pay-agent", "input": "pay 5"}, headers=TOKEN)
    turn_id: str = started.json()["id"]
    assert runner.store.load(turn_id).status is AgentTurnStatus.WAITING_FOR_APPROVAL
    return turn_id


def state(runner: AgentRunner) -> list[tuple[str, int, AgentTurnStatus]]:
    return sorted((t.turn_id, t.version, t.status) for t in runner.store.list_turns())


@pytest.mark.parametrize("case", QUERIES, ids=[case.id for case in QUERIES])
def test_a_bad_query_parameter_is_refused_naming_it(
    http: TestClient, runner: AgentRunner, waiting: str, case: QueryCase
) -> None:
    before = state(runner)
    url = case.path.replace("{id}", waiting) + (f"?{case.query}" if case.query else "")

    answer = http.get(url, headers={**TOKEN, **dict(case.headers)})

    assert answer.status_code == case.status, answer.text[:300]
    error = answer.json()["error"]
    assert error["field"] == case.field, error
    assert len(answer.text) < 400, answer.text[:500]
    assert state(runner) == before


def test_good_parameters_still_pass(http: TestClient, waiting: str) -> None:
    page = http.get("/turns?status=WAITING_FOR_APPROVAL&limit=200&root_only=true", headers=TOKEN)
    assert [t["id"] for t in page.json()["turns"]] == [waiting]
    at = http.get(f"/turns?created_before=1e12&cursor={cursor_of([1e12, ''])}", headers=TOKEN)
    assert [t["id"] for t in at.json()["turns"]] == [waiting]
    waited = http.get(f"/turns/{waiting}/wait?timeout=1e9", headers=TOKEN)
    assert waited.status_code == 200 and waited.headers["Agentworker-Wait"] == "reached"


def test_every_query_row_is_in_the_docs() -> None:
    table = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    for case in QUERIES:
        entry, bad = case.row.split(": ", 1)
        assert f"| `{entry}` | {bad} | {case.status}, `field` `{case.field}` |" in table, case.id
