"""Bad input over HTTP: 4xx that name the field, never an echo of what was sent.

The HTTP rows of the census (docs/limits.md): NaN and Infinity name ``metadata``, a
20,000-character id is not echoed by the 404, the library's typed errors become 422s that
name their field, and nothing is stored by a refused call.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentworker.http import create_http_app
from agentworker.http.errors import error_body, status_of
from agentworker.settings import Settings
from runner_core import (
    AgentRunner,
    AgentTurnStatus,
    InMemoryAgentLoader,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    PayloadTooLargeError,
)
from tests.support.agents import approval_agent
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
        namespace="bad-" + uuid.uuid4().hex[:8],
        credentials=json.dumps(CREDENTIALS),
    )
    with TestClient(create_http_app(runner, settings)) as client:
        yield client


def _turn_count(runner: AgentRunner) -> int:
    return len(runner.store._records)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("constant", "where"),
    [
        ("NaN", '{"score": CONSTANT}'),
        ("Infinity", '{"nested": {"list": [1, CONSTANT]}}'),
        ("-Infinity", '{"score": CONSTANT}'),
        ("1e999", '{"score": CONSTANT}'),
        ("NaN", '{"deep": ' + "[" * 600 + "CONSTANT" + "]" * 600 + "}"),
    ],
    ids=["NaN", "Infinity in a list", "-Infinity", "1e999", "NaN 600 levels deep"],
)
def test_nan_or_infinity_in_metadata_is_a_422_naming_metadata(
    http: TestClient, runner: AgentRunner, constant: str, where: str
) -> None:
    metadata = where.replace("CONSTANT", constant)
    body = '{"agent": "pay-agent", "input": "x", "metadata": ' + metadata + "}"

    answer = http.post("/turns", content=body.encode(), headers=TOKEN)

    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "metadata"
    assert error["message"].startswith("metadata: ")
    assert "finite" in error["message"]
    assert _turn_count(runner) == 0


def test_nan_beside_a_value_too_deep_to_read_is_a_422(
    http: TestClient, runner: AgentRunner
) -> None:
    tree = "[" * 200_000 + "]" * 200_000
    body = '{"agent": "pay-agent", "input": "x", "metadata": {"score": NaN, "tree": ' + tree + "}}"

    answer = http.post("/turns", content=body.encode(), headers=TOKEN)

    assert answer.status_code == 422, answer.text[:300]
    assert "finite" in answer.json()["error"]["message"]
    assert _turn_count(runner) == 0


def test_nan_in_resume_metadata_names_metadata(http: TestClient, runner: AgentRunner) -> None:
    started = http.post("/turns", json={"agent": "pay-agent", "input": "pay 5"}, headers=TOKEN)
    turn_id = started.json()["id"]
    before = runner.store.load(turn_id)
    body = b'{"command": "approve_tool", "call_id": "c1", "metadata": {"x": NaN}}'

    answer = http.post(f"/turns/{turn_id}/resume", content=body, headers=TOKEN)

    assert answer.status_code == 422 and answer.json()["error"]["field"] == "metadata"
    after = runner.store.load(turn_id)
    assert (after.version, after.status) == (before.version, AgentTurnStatus.WAITING_FOR_APPROVAL)


@pytest.mark.parametrize(
    ("levels", "field"),
    [(500, "metadata"), (200_000, None)],
    ids=["deeper than the library keeps", "deeper than a JSON reader goes"],
)
def test_deeply_nested_metadata_is_a_422_and_stores_nothing(
    http: TestClient, runner: AgentRunner, levels: int, field: str | None
) -> None:
    metadata = '{"tree": ' + "[" * levels + "]" * levels + "}"
    body = '{"agent": "pay-agent", "input": "x", "metadata": ' + metadata + "}"

    answer = http.post("/turns", content=body.encode(), headers=TOKEN)

    assert answer.status_code == 422, answer.text[:300]
    assert len(answer.text) < 400
    assert answer.json()["error"].get("field") == field
    assert _turn_count(runner) == 0


def test_a_deeply_nested_resume_is_a_422_and_changes_nothing(
    http: TestClient, runner: AgentRunner
) -> None:
    started = http.post("/turns", json={"agent": "pay-agent", "input": "pay 5"}, headers=TOKEN)
    turn_id = started.json()["id"]
    before = runner.store.load(turn_id)
    tree = "[" * 200_000 + "]" * 200_000
    body = '{"command": "approve_tool", "call_id": "c1", "metadata": {"x": ' + tree + "}}"

    answer = http.post(f"/turns/{turn_id}/resume", content=body.encode(), headers=TOKEN)

    assert answer.status_code == 422, answer.text[:300]
    after = runner.store.load(turn_id)
    assert (after.version, after.status) == (before.version, AgentTurnStatus.WAITING_FOR_APPROVAL)


def test_a_deeply_nested_cursor_is_not_a_cursor(http: TestClient) -> None:
    cursor = base64.urlsafe_b64encode(b"[" * 3_000 + b"]" * 3_000).decode().rstrip("=")

    answer = http.get(f"/turns?cursor={cursor}", headers=TOKEN)

    assert answer.status_code == 422, answer.text[:300]
    assert answer.json()["error"]["field"] == "cursor"


@pytest.mark.parametrize("path", ["/turns/{id}", "/turns/{id}/events", "/turns/{id}/cancel"])
def test_a_20000_character_id_is_not_echoed(http: TestClient, path: str) -> None:
    turn_id = "q" * 20_000
    url = path.replace("{id}", turn_id)

    answer = (
        http.post(url, headers=TOKEN) if url.endswith("cancel") else http.get(url, headers=TOKEN)
    )

    assert answer.status_code == 404, answer.text[:300]
    assert len(answer.text) < 400
    assert "20000 chars" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("error", "field"),
    [
        (InvalidArgumentError("metadata key 'a': set is not JSON", field="metadata"), "metadata"),
        (InvalidArgumentTypeError("input must be str", field="input"), "input"),
        (PayloadTooLargeError("input", 2_000_000, 1_048_576, "input"), "input"),
    ],
    ids=["InvalidArgumentError", "InvalidArgumentTypeError", "PayloadTooLargeError"],
)
def test_the_librarys_typed_errors_are_422_naming_their_field(error: Exception, field: str) -> None:
    assert status_of(error) == 422
    body: dict[str, Any] = error_body(error)["error"]
    assert (body["type"], body["field"]) == (type(error).__name__, field)


def test_a_20000_character_agent_id_is_not_echoed(http: TestClient, runner: AgentRunner) -> None:
    body = {"agent": "a" * 20_000, "input": "x"}

    answer = http.post("/turns", json=body, headers=TOKEN)

    assert answer.status_code == 422 and answer.json()["error"]["field"] == "agent"
    assert len(answer.text) < 400
    assert _turn_count(runner) == 0
