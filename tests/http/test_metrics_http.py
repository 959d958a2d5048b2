"""``GET /metrics`` of the HTTP app: an operator credential's read; anyone else is refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("prometheus_client")

from starlette.testclient import TestClient  # noqa: E402

from agentworker.http import create_http_app  # noqa: E402
from agentworker.settings import Settings  # noqa: E402
from runner_core import AgentRunner, InMemoryAgentLoader, InMemoryAgentTurnStore  # noqa: E402
from tests.support.observed import agents, memory_fail_once  # noqa: E402

CREDENTIALS = [
    {"token": "acme", "tenant": "acme", "scopes": ["read", "write"]},
    {"token": "ops", "tenant": "*", "scopes": ["read"]},
    {"token": "ops-write", "tenant": "*", "scopes": ["write"]},
]


@pytest.fixture()
def http() -> Iterator[TestClient]:
    settings = Settings(
        namespace="metrics-" + uuid.uuid4().hex[:8], credentials=json.dumps(CREDENTIALS)
    )
    store = InMemoryAgentTurnStore()
    runner = AgentRunner(store, InMemoryAgentLoader(agents(memory_fail_once())))
    runner.start("obs-root", "go")
    yield TestClient(create_http_app(runner, settings))  # no lifespan: /metrics needs no Redis


def test_an_operator_reads_the_metrics(http: TestClient) -> None:
    answer = http.get("/metrics", headers={"Authorization": "Bearer ops"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    assert 'agentworker_turns{state="live"} 1.0' in answer.text


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Bearer acme"}, 403),  # a tenant sees its own turns, not the fleet
        ({"Authorization": "Bearer ops-write"}, 403),  # no read scope
    ],
)
def test_anyone_else_is_refused(http: TestClient, headers: dict[str, str], status: int) -> None:
    answer = http.get("/metrics", headers=headers)
    assert answer.status_code == status, answer.text
    assert "agentworker_" not in answer.text
