"""A turn waiting on several tool approvals, shown and answered over HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentworker.http import create_http_app
from agentworker.settings import Settings
from runner_core import AgentRunner, InMemoryAgentLoader
from stores import RedisAgentTurnStore
from tests.support.approvals import listed_calls, listing_both, refunds_agent
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

CREDENTIALS = [
    {"token": "acme", "tenant": "acme", "scopes": ["read", "write", "approve"]},
    {"token": "look", "tenant": "acme", "scopes": ["read", "write"]},
]
LEDGER: list[str] = []


@pytest.fixture
def settings(server: RedisServer) -> Settings:
    return Settings(
        redis_url=server.url,
        namespace="approvals-" + uuid.uuid4().hex[:8],
        credentials=json.dumps(CREDENTIALS),
    )


@pytest.fixture
def runner(server: RedisServer, settings: Settings) -> AgentRunner:
    LEDGER.clear()
    store = RedisAgentTurnStore(server.url, namespace=settings.namespace)
    loader = InMemoryAgentLoader([refunds_agent(LEDGER)])
    runner = AgentRunner(turn_store=store, agent_loader=loader)
    runner.dispatcher = lambda turn_id: runner.run_until_blocked(runner.restore(turn_id)) and None
    return runner


@pytest.fixture
def http(runner: AgentRunner, settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_http_app(runner, settings)) as client:
        client.headers["Authorization"] = "Bearer acme"
        yield client


def waiting(http: TestClient, runner: AgentRunner) -> str:
    created = http.post("/turns", json={"agent": "refunds", "input": "refund both"})
    assert created.status_code == 201, created.text
    turn_id = str(created.json()["id"])
    listing_both(runner.restore(turn_id))
    return turn_id


def resume(http: TestClient, turn_id: str, payload: dict[str, Any]) -> Any:
    return http.post(f"/turns/{turn_id}/resume", json=payload)


def test_the_turn_shows_every_waiting_call(http: TestClient, runner: AgentRunner) -> None:
    turn_id = waiting(http, runner)

    suspension = http.get(f"/turns/{turn_id}").json()["suspension"]

    assert suspension["metadata"]["calls"] == listed_calls()
    assert suspension["waiting_calls"] == listed_calls()
    listed = http.get("/turns?status=WAITING_FOR_APPROVAL").json()["turns"]
    assert [t["suspension"]["waiting_calls"] for t in listed] == [listed_calls()]


def test_approve_one_then_reject_the_other(http: TestClient, runner: AgentRunner) -> None:
    turn_id = waiting(http, runner)

    partial = resume(http, turn_id, {"command": "approve_tools", "call_ids": ["r1"]})
    assert partial.status_code == 200, partial.text
    assert partial.json()["status"] == "WAITING_FOR_APPROVAL"
    assert [c["call_id"] for c in partial.json()["suspension"]["waiting_calls"]] == ["r2"]
    assert LEDGER == []

    done = resume(http, turn_id, {"command": "reject_tools", "reasons": {"r2": "too large"}})
    assert done.status_code == 200, done.text
    assert http.get(f"/turns/{turn_id}").json()["status"] == "COMPLETED"
    assert LEDGER == ["1001"]
    log = runner.store.load(turn_id).resume_log
    assert [(e["kind"], e["call_ids"], e["metadata"]["credential"]) for e in log] == [
        ("APPROVE_TOOLS", ["r1"], "acme#0"),
        ("REJECT_TOOLS", ["r2"], "acme#0"),
    ]
    assert log[1]["reasons"] == {"r2": "too large"}


def test_a_call_that_is_not_waiting_is_409_naming_it(http: TestClient, runner: AgentRunner) -> None:
    turn_id = waiting(http, runner)
    version = runner.store.load(turn_id).version

    answer = resume(http, turn_id, {"command": "approve_tools", "call_ids": ["r1", "r9"]})

    assert answer.status_code == 409
    assert "'r9' is not one of the calls waiting" in answer.json()["error"]["message"]
    assert runner.store.load(turn_id).version == version


def test_answering_needs_the_approve_scope(http: TestClient, runner: AgentRunner) -> None:
    turn_id = waiting(http, runner)
    payload = {"command": "approve_tools", "call_ids": ["r1"]}

    answer = http.post(
        f"/turns/{turn_id}/resume", json=payload, headers={"Authorization": "Bearer look"}
    )

    assert answer.status_code == 403


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"command": "approve_tools"}, "call_ids"),
        ({"command": "approve_tools", "call_ids": []}, "call_ids"),
        ({"command": "approve_tools", "call_ids": "r1"}, "call_ids"),
        ({"command": "approve_tools", "call_ids": [""]}, "call_ids.0"),
        ({"command": "approve_tools", "call_ids": ["r"] * 101}, "call_ids"),
        ({"command": "approve_tools", "call_ids": ["x" * 257]}, "call_ids.0"),
        ({"command": "reject_tools"}, "reasons"),
        ({"command": "reject_tools", "reasons": {}}, "reasons"),
        ({"command": "reject_tools", "reasons": {"r1": 5}}, "reasons.r1"),
        ({"command": "reject_tools", "reasons": {"r1": "x" * 10_001}}, "reasons.r1"),
        ({"command": "approve_tool", "call_id": "r1", "call_ids": ["r2"]}, "call_ids"),
        ({"command": "approve_tools", "call_ids": ["r1"], "reasons": {"r2": ""}}, "reasons"),
    ],
)
def test_bad_batch_bodies_are_422_naming_the_field(
    http: TestClient, runner: AgentRunner, payload: dict[str, Any], field: str
) -> None:
    turn_id = waiting(http, runner)
    answer = resume(http, turn_id, payload)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
