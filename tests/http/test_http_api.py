"""The rest of the API: listing with cursors, long-poll wait, idempotent starts, OpenAPI,
health, and 503 / readiness with a Redis that is stopped and started again."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentworker.http import create_http_app, listing
from agentworker.http.openapi import TurnPage, TurnView, openapi_document
from agentworker.settings import Settings
from runner_core import AgentResumeCommand, AgentRunner, InMemoryAgentLoader
from stores import RedisAgentTurnStore
from tests.support.agents import approval_agent
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

CREDENTIALS = [
    {"token": "acme", "tenant": "acme", "scopes": ["read", "write", "approve"]},
    {"token": "globex", "tenant": "globex", "scopes": ["read", "write", "approve"]},
    {"token": "ops", "tenant": "*", "scopes": ["read"]},
]


@pytest.fixture
def settings(server: RedisServer) -> Settings:
    return Settings(
        redis_url=server.url,
        namespace="api-" + uuid.uuid4().hex[:8],
        credentials=json.dumps(CREDENTIALS),
    )


@pytest.fixture
def runner(server: RedisServer, settings: Settings) -> AgentRunner:
    store = RedisAgentTurnStore(server.url, namespace=settings.namespace)
    runner = AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader([approval_agent()]))
    runner.dispatcher = lambda turn_id: runner.run_until_blocked(runner.restore(turn_id)) and None
    return runner


@pytest.fixture
def http(runner: AgentRunner, settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_http_app(runner, settings)) as client:
        yield client


def auth(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def start(http: TestClient, token: str = "acme", **extra: Any) -> dict[str, Any]:
    answer = http.post(
        "/turns", json={"agent": "pay-agent", "input": "pay 5", **extra}, headers=auth(token)
    )
    assert answer.status_code in (200, 201), answer.text
    return dict(answer.json())


def test_listing_pages_newest_first_with_a_cursor(http: TestClient) -> None:
    ids = [start(http)["id"] for _ in range(5)]
    start(http, "globex")
    seen, cursor = [], None
    while True:
        query = "/turns?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = http.get(query, headers=auth("acme")).json()
        TurnPage.model_validate(page)
        seen += [t["id"] for t in page["turns"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))  # acme's five, newest first, none of globex's


def test_a_tenant_whose_turns_are_older_than_a_page_can_look_at_reaches_them(
    http: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given acme's three turns, then more of globex's than a page looks at
    monkeypatch.setattr(listing, "SCAN_CAP", 10)
    acme = [start(http)["id"] for _ in range(3)]
    for _ in range(25):
        start(http, "globex")

    # When acme lists: the first pages come back short, each with a cursor to go on
    seen, cursor, pages = [], None, 0
    while True:
        query = "/turns?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = http.get(query, headers=auth("acme")).json()
        seen += [t["id"] for t in page["turns"]]
        cursor, pages = page["next_cursor"], pages + 1
        if cursor is None:
            break

    # Then every one of acme's turns is reached, newest first, once
    assert seen == list(reversed(acme))
    assert pages >= 3  # 25 of globex's at 10 a page before the first of acme's


def test_listing_filters(http: TestClient, runner: AgentRunner) -> None:
    waiting, done = start(http)["id"], start(http)["id"]
    runner.resume(done, AgentResumeCommand.approve_tool("c1"))
    start(http, "globex")

    def ids(query: str, token: str = "acme") -> set[str]:
        answer = http.get(f"/turns?{query}", headers=auth(token))
        assert answer.status_code == 200, answer.text
        return {t["id"] for t in answer.json()["turns"]}

    assert ids("status=COMPLETED") == {done}
    assert ids("status=WAITING_FOR_APPROVAL") == {waiting}
    assert ids("agent=pay-agent&root_only=true") == {waiting, done}
    assert ids("agent=nobody") == set()
    assert ids(f"tree={done}") == {done}
    created = runner.store.load(done).created_at
    assert ids(f"created_after={created}") == {done}
    assert ids(f"created_before={created}") == {waiting}
    assert ids(f"updated_after={time.time() + 60}") == set()
    assert len(ids("tenant=globex", "ops")) == 1 and len(ids("", "ops")) == 3
    assert http.get("/turns?tenant=globex", headers=auth("acme")).status_code == 403
    bad = http.get("/turns?limit=0", headers=auth("acme"))
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "limit"
    assert http.get("/turns?cursor=nonsense", headers=auth("acme")).status_code == 422


def test_wait_returns_when_the_turn_blocks_or_ends(http: TestClient, runner: AgentRunner) -> None:
    turn_id = start(http)["id"]
    blocked = http.get(f"/turns/{turn_id}/wait?timeout=5", headers=auth("acme"))
    assert blocked.headers["Agentworker-Wait"] == "reached"
    assert blocked.json()["status"] == "WAITING_FOR_APPROVAL"

    t0 = time.monotonic()
    timed_out = http.get(f"/turns/{turn_id}/wait?until=ended&timeout=0.5", headers=auth("acme"))
    assert timed_out.headers["Agentworker-Wait"] == "timeout"
    assert 0.4 < time.monotonic() - t0 < 3

    timer = threading.Timer(0.5, runner.resume, (turn_id, AgentResumeCommand.approve_tool("c1")))
    timer.start()
    ended = http.get(f"/turns/{turn_id}/wait?until=ended&timeout=10", headers=auth("acme"))
    timer.join()
    assert ended.headers["Agentworker-Wait"] == "reached"
    assert ended.json()["status"] == "COMPLETED"


def test_a_start_with_a_turn_id_never_makes_two_turns(http: TestClient) -> None:
    turn_id = "order-42-" + uuid.uuid4().hex[:8]
    first = http.post(
        "/turns",
        json={"agent": "pay-agent", "input": "pay 5", "turn_id": turn_id},
        headers=auth("acme"),
    )
    again = http.post(
        "/turns",
        json={"agent": "pay-agent", "input": "pay 5", "turn_id": turn_id},
        headers=auth("acme"),
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] == turn_id
    # Another tenant cannot take over (or learn about) the id.
    taken = http.post(
        "/turns",
        json={"agent": "pay-agent", "input": "x", "turn_id": turn_id},
        headers=auth("globex"),
    )
    assert taken.status_code == 409 and taken.json()["error"]["field"] == "turn_id"
    listed = http.get("/turns", headers=auth("acme")).json()["turns"]
    assert [t["id"] for t in listed] == [turn_id]


def test_an_idempotency_key_gives_the_first_answer_again(http: TestClient) -> None:
    body = {"agent": "pay-agent", "input": "pay 5"}
    first = http.post("/turns", json=body, headers=auth("acme", **{"Idempotency-Key": "k-1"}))
    again = http.post("/turns", json=body, headers=auth("acme", **{"Idempotency-Key": "k-1"}))
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(http.get("/turns", headers=auth("acme")).json()["turns"]) == 1


def test_the_openapi_document_is_generated_from_the_schemas(http: TestClient) -> None:
    document = http.get("/openapi.json").json()  # public: it grants nothing
    assert document == json.loads(json.dumps(openapi_document()))
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    assert {"StartBody", "ResumeBody", "CancelBody", "TurnView", "TurnPage", "ErrorBody"} <= set(
        schemas
    )
    assert "turn_id" in schemas["StartBody"]["properties"]
    assert set(document["paths"]) >= {
        "/turns",
        "/turns/{turn_id}",
        "/turns/{turn_id}/wait",
        "/turns/{turn_id}/resume",
        "/turns/{turn_id}/cancel",
        "/turns/{turn_id}/events",
        "/healthz",
        "/readyz",
    }
    text = json.dumps(document)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/components/schemas/')[1:]}:
        assert ref in schemas, ref
    # What the API answers is what the document says.
    TurnView.model_validate(start(http))


def shape(document: dict[str, Any]) -> dict[str, Any]:
    """What the API is, without how a pydantic version renders JSON Schema."""
    return {
        "paths": {path: sorted(ops) for path, ops in document["paths"].items()},
        "schemas": {
            name: (sorted(schema.get("properties", {})), sorted(schema.get("required", [])))
            for name, schema in document["components"]["schemas"].items()
        },
    }


def test_the_checked_in_openapi_document_is_current() -> None:
    path = Path(__file__).parents[2] / "docs" / "openapi.json"
    checked_in = json.loads(path.read_text())
    hint = "run: python -m agentworker.http.openapi > docs/openapi.json"
    assert shape(checked_in) == shape(openapi_document()), hint


def test_health_is_public_and_readiness_follows_the_store(
    tmp_path: Path, settings: Settings
) -> None:
    # Given the app's Redis is down when it starts
    redis = RedisServer(tmp_path, appendonly=True)
    local = settings.model_copy(update={"redis_url": redis.url})

    def build() -> AgentRunner:
        store = RedisAgentTurnStore(redis.url, namespace=local.namespace, connect_timeout=0.5)
        runner = AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader([approval_agent()]))
        runner.dispatcher = lambda t: runner.run_until_blocked(runner.restore(t)) and None
        return runner

    with TestClient(create_http_app(build, local)) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        down = http.get("/readyz")
        assert down.status_code == 503 and down.headers["Retry-After"] == "5"
        refused = http.post(
            "/turns", json={"agent": "pay-agent", "input": "x"}, headers=auth("acme")
        )
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        assert refused.json()["error"]["type"] == "StoreUnavailableError"
        assert "127.0.0.1" not in refused.text  # the URL stays in the log

        # When Redis comes up, the app is ready and serves
        redis.start()
        try:
            assert http.get("/readyz").status_code == 200
            turn_id = start(http)["id"]

            # When it stops again, calls answer 503 with Retry-After, not 500
            redis.stop()
            gone = http.get(f"/turns/{turn_id}", headers=auth("acme"))
            assert gone.status_code == 503 and gone.headers["Retry-After"] == "5"
            assert http.get("/readyz").status_code == 503

            # And once it is back (same data dir), so is the turn
            redis.start()
            assert http.get("/readyz").status_code == 200
            back = http.get(f"/turns/{turn_id}", headers=auth("acme"))
            assert back.status_code == 200, back.text
        finally:
            redis.stop()
