"""Issue 14's security items, one test (or a few) each, against the real ASGI app.

1. Credentials are checked before the body is read; bodies, inputs and metadata are bounded.
2. A request acts on its credential's tenant only: reads, resumes and request ids.
3. A signature is bound to the method and path (and the tenant is the secret's).
4. A Standard Webhooks library signs inbound calls we accept (outbound: test_webhooks).
5. Flower is not reachable anonymously in compose: tests/unit/test_deploy_files.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from standardwebhooks import Webhook
from starlette.testclient import TestClient

from agentworker.http import create_http_app, signed_headers, target_of
from agentworker.settings import Settings
from runner_core import AgentRunner, InMemoryAgentLoader
from tests.support.agents import approval_agent
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

ACME_SECRET = "whsec_" + base64.b64encode(b"acme-signing-key-0123456789abcd").decode()
GLOBEX_SECRET = "whsec_" + base64.b64encode(b"globex-signing-key-0123456789ab").decode()
CREDENTIALS = [
    {"token": "acme-rw", "tenant": "acme", "scopes": ["read", "write", "approve"]},
    {"token": "acme-ro", "tenant": "acme", "scopes": ["read"]},
    {"token": "globex-rw", "tenant": "globex", "scopes": ["read", "write", "approve"]},
    {"secret": ACME_SECRET, "tenant": "acme", "scopes": ["write", "approve"]},
    {"secret": GLOBEX_SECRET, "tenant": "globex", "scopes": ["write", "approve"]},
]
LIMIT = 64 * 1024


@pytest.fixture
def settings(server: RedisServer) -> Settings:
    return Settings(
        redis_url=server.url,
        namespace="sec-" + uuid.uuid4().hex[:8],
        credentials=json.dumps(CREDENTIALS),
        http_max_body_bytes=LIMIT,
        http_max_input_chars=1000,
        http_max_metadata_bytes=200,
        http_body_timeout_seconds=0.5,
    )


@pytest.fixture
def runner() -> AgentRunner:
    runner = AgentRunner(agent_loader=InMemoryAgentLoader([approval_agent()]))
    runner.dispatcher = lambda turn_id: runner.run_until_blocked(runner.restore(turn_id)) and None
    return runner


@pytest.fixture
def http(runner: AgentRunner, settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_http_app(runner, settings)) as client:
        yield client


def bearer(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def start(http: TestClient, token: str = "acme-rw", **extra: Any) -> str:
    body = {"agent": "pay-agent", "input": "pay 5", **extra}
    answer = http.post("/turns", json=body, headers=bearer(token))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def signed_post(
    http: TestClient, secret: str, path: str, payload: dict[str, Any], msg_id: str, **extra: str
) -> Any:
    body = json.dumps({**payload, "target": target_of("POST", path)}).encode()
    return http.post(path, content=body, headers={**signed_headers(secret, body, msg_id), **extra})


# -- 1. before the body; limits ----------------------------------------------------------


def asgi_call(
    app: Any,
    headers: list[tuple[bytes, bytes]],
    chunks: list[bytes],
    stall: bool = False,
    client: str = "127.0.0.1",
) -> tuple[int, int, dict[str, Any]]:
    """Call the app once; (status, how many body messages it read, JSON answer)."""
    received = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received < len(chunks):
            received += 1
            more = stall or received < len(chunks)
            return {"type": "http.request", "body": chunks[received - 1], "more_body": more}
        await asyncio.sleep(3600)  # a client that announced more and sends nothing
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "path": "/turns",
        "raw_path": b"/turns",
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "headers": headers,
        "client": (client, 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, received, json.loads(body or b"{}")


def test_an_anonymous_100_mb_post_is_refused_before_one_byte_is_read(
    runner: AgentRunner, settings: Settings
) -> None:
    app = create_http_app(runner, settings)
    chunk = b"x" * (1 << 20)
    status, read, answer = asgi_call(app, [(b"content-length", b"104857600")], [chunk] * 100)
    assert (status, read) == (401, 0)
    assert answer["error"]["type"] == "Unauthorized"


def test_a_wrong_token_is_refused_before_the_body_too(
    runner: AgentRunner, settings: Settings
) -> None:
    app = create_http_app(runner, settings)
    status, read, _ = asgi_call(app, [(b"authorization", b"Bearer guess")], [b"{}"])
    assert (status, read) == (401, 0)


def test_guessing_tokens_is_throttled_per_address_before_any_credential_is_read(
    runner: AgentRunner, settings: Settings
) -> None:
    app = create_http_app(runner, settings.model_copy(update={"http_auth_failures_per_minute": 3}))

    def call(client: str, token: str | None) -> tuple[int, int, dict[str, Any]]:
        auth = [(b"authorization", f"Bearer {token}".encode())] if token else []
        return asgi_call(app, auth, [b"{}"], client=client)

    # Given a guesser at one address and a caller at another, both on the same process
    assert [call("10.0.0.1", f"guess-{n}")[0] for n in range(3)] == [401, 401, 401]
    # When the guesser goes on: refused before its credential or body is looked at, even
    # the right token (its budget for the minute is spent)
    status, read, answer = call("10.0.0.1", "guess-4")
    assert (status, read, answer["error"]["type"]) == (429, 0, "TooManyRequests")
    assert call("10.0.0.1", "acme-rw")[0] == 429
    # Then the other address is served, and requests with no credential at all count nothing
    assert call("10.0.0.2", "acme-rw")[0] == 422  # authenticated; the body is not a turn
    assert [call("10.0.0.3", None)[0] for _ in range(5)] == [401] * 5


def test_the_console_sign_in_is_throttled_too(runner: AgentRunner, settings: Settings) -> None:
    app = create_http_app(runner, settings.model_copy(update={"http_auth_failures_per_minute": 2}))
    with TestClient(app, follow_redirects=False) as client:
        wrong = [client.post("/console/login", data={"token": "guess"}) for _ in range(2)]
        assert [r.status_code for r in wrong] == [401, 401]
        blocked = client.post("/console/login", data={"token": "acme-rw"})
        assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) >= 1
        assert "too many failed credentials" in blocked.text


def test_an_announced_body_over_the_limit_is_413_unread(
    runner: AgentRunner, settings: Settings
) -> None:
    app = create_http_app(runner, settings)
    headers = [(b"authorization", b"Bearer acme-rw"), (b"content-length", str(LIMIT + 1).encode())]
    status, read, answer = asgi_call(app, headers, [b"x" * (LIMIT + 1)])
    assert (status, read) == (413, 0)
    assert answer["error"]["type"] == "PayloadTooLargeError"


def test_a_streamed_body_is_cut_off_at_the_limit(runner: AgentRunner, settings: Settings) -> None:
    app = create_http_app(runner, settings)
    chunks = [b"x" * 16384] * 100  # no Content-Length: chunked, 1.6 MB in 16 KiB pieces
    status, read, _ = asgi_call(app, [(b"authorization", b"Bearer acme-rw")], chunks)
    assert status == 413 and read == LIMIT // 16384 + 1


def test_a_body_announced_and_not_sent_is_given_up_after_the_body_timeout(
    runner: AgentRunner, settings: Settings
) -> None:
    app = create_http_app(runner, settings)
    headers = [(b"authorization", b"Bearer acme-rw"), (b"content-length", b"60000")]
    status, read, answer = asgi_call(app, headers, [b"{" * 1000, b" "], stall=True)
    assert status == 408 and read == 2 and answer["error"]["type"] == "RequestTimeout"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"input": "x" * 1001}, "input"),
        ({"metadata": {"blob": "y" * 300}}, "metadata"),
    ],
)
def test_inputs_and_metadata_over_their_limits_are_422(
    http: TestClient, payload: dict[str, Any], field: str
) -> None:
    body = {"agent": "pay-agent", "input": "x", **payload}
    answer = http.post("/turns", json=body, headers=bearer("acme-rw"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == {
        "type": "PayloadTooLargeError",
        "message": answer.json()["error"]["message"],
        "field": field,
    }


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_in_metadata_are_422(http: TestClient, constant: str) -> None:
    body = '{"agent": "pay-agent", "input": "x", "metadata": {"score": CONSTANT}}'
    body = body.replace("CONSTANT", constant)
    answer = http.post("/turns", content=body.encode(), headers=bearer("acme-rw"))
    assert answer.status_code == 422, answer.text
    assert "finite" in answer.json()["error"]["message"]


# -- 2. tenants ---------------------------------------------------------------------------


def test_reads_need_a_credential_and_a_tenant_header_grants_nothing(http: TestClient) -> None:
    turn_id = start(http)
    assert http.get(f"/turns/{turn_id}").status_code == 401
    assert http.get(f"/turns/{turn_id}", headers={"X-Tenant-Id": "acme"}).status_code == 401
    assert http.get("/turns", headers={"X-Tenant-Id": "acme"}).status_code == 401
    assert http.get(f"/turns/{turn_id}/events", headers={"X-Tenant-Id": "acme"}).status_code == 401
    assert http.get(f"/turns/{turn_id}", headers=bearer("acme-ro")).status_code == 200


def test_another_tenants_turn_is_not_found_for_reads_resumes_and_cancels(
    http: TestClient, runner: AgentRunner
) -> None:
    turn_id = start(http)
    before = runner.store.load(turn_id).version
    other = bearer("globex-rw", **{"X-Tenant-Id": "acme"})
    assert http.get(f"/turns/{turn_id}", headers=other).status_code == 404
    assert http.get(f"/turns/{turn_id}/events", headers=other).status_code == 404
    assert http.get(f"/turns/{turn_id}/wait?timeout=0", headers=other).status_code == 404
    resume = {"command": "approve_tool", "call_id": "c1"}
    assert http.post(f"/turns/{turn_id}/resume", json=resume, headers=other).status_code == 404
    assert http.post(f"/turns/{turn_id}/cancel", headers=other).status_code == 404
    signed = signed_post(http, GLOBEX_SECRET, f"/turns/{turn_id}/resume", resume, "m-1")
    assert signed.status_code == 404
    assert runner.store.load(turn_id).version == before
    assert [t["id"] for t in http.get("/turns", headers=other).json()["turns"]] == []


def test_scopes_limit_what_a_tenants_credential_does(http: TestClient) -> None:
    turn_id = start(http)
    read_only = bearer("acme-ro")
    assert (
        http.post(
            "/turns", json={"agent": "pay-agent", "input": "x"}, headers=read_only
        ).status_code
        == 403
    )
    resume = {"command": "approve_tool", "call_id": "c1"}
    assert http.post(f"/turns/{turn_id}/resume", json=resume, headers=read_only).status_code == 403
    # A signing secret without the read scope cannot read.
    assert (
        http.get(f"/turns/{turn_id}", headers=signed_headers(ACME_SECRET, b"", "m-r")).status_code
        == 401
    )


def test_a_request_id_is_per_tenant(http: TestClient, runner: AgentRunner) -> None:
    payload = {"agent": "pay-agent", "input": "pay 5"}
    acme = http.post("/turns", json=payload, headers=bearer("acme-rw", **{"Idempotency-Key": "k"}))
    globex = http.post(
        "/turns", json=payload, headers=bearer("globex-rw", **{"Idempotency-Key": "k"})
    )
    assert acme.status_code == globex.status_code == 201
    assert "Idempotent-Replayed" not in globex.headers
    assert acme.json()["id"] != globex.json()["id"]
    assert runner.store.load(globex.json()["id"]).metadata["tenant_id"] == "globex"


# -- 3. the signature is bound to method and path; the tenant is the secret's --------------


def test_a_signed_call_refused_once_cannot_be_moved_to_another_turn(
    http: TestClient, runner: AgentRunner
) -> None:
    mine, other = start(http), start(http)
    resume = {"command": "approve_tool", "call_id": "c1"}
    body = json.dumps({**resume, "target": target_of("POST", f"/turns/{mine}/resume")}).encode()
    headers = signed_headers(ACME_SECRET, body, "m-bound")
    # The same signed bytes sent to another turn's path: refused, nothing changes.
    moved = http.post(f"/turns/{other}/resume", content=body, headers=headers)
    assert moved.status_code == 401 and "target" in moved.json()["error"]["message"]
    assert runner.store.load(other).status.value == "WAITING_FOR_APPROVAL"
    # ... and to another endpoint of the same turn.
    assert http.post(f"/turns/{mine}/cancel", content=body, headers=headers).status_code == 401
    assert http.post(f"/turns/{mine}/resume", content=body, headers=headers).status_code == 200


def test_a_signed_call_acts_for_the_secrets_tenant_whatever_the_header_says(
    http: TestClient, runner: AgentRunner
) -> None:
    payload = {"agent": "pay-agent", "input": "pay 5"}
    answer = signed_post(http, ACME_SECRET, "/turns", payload, "m-t", **{"X-Tenant-Id": "globex"})
    assert answer.status_code == 201, answer.text
    assert runner.store.load(answer.json()["id"]).metadata["tenant_id"] == "acme"


# -- 4. a Standard Webhooks library signs what we accept -------------------------------------


def test_a_resume_signed_by_the_standard_webhooks_library_is_applied(
    http: TestClient, runner: AgentRunner
) -> None:
    turn_id = start(http)
    path = f"/turns/{turn_id}/resume"
    body = json.dumps({"command": "approve_tool", "call_id": "c1", "target": f"POST {path}"})
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "msg_2Lx",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(ACME_SECRET).sign("msg_2Lx", now, body),
        "content-type": "application/json",
    }
    answer = http.post(path, content=body.encode(), headers=headers)
    assert answer.status_code == 200, answer.text
    assert runner.store.load(turn_id).status.value == "COMPLETED"
    again = http.post(path, content=body.encode(), headers=headers)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"


def test_the_console_cookie_writes_only_with_the_console_header(http: TestClient) -> None:
    turn_id = start(http)
    http.cookies.set("agentworker_token", "acme-rw")
    try:
        assert http.get(f"/turns/{turn_id}").status_code == 200
        resume = {"command": "approve_tool", "call_id": "c1"}
        # A cross-site form can send the cookie but not a custom header: refused.
        forged = http.post(f"/turns/{turn_id}/resume", json=resume)
        assert forged.status_code == 403 and "console" in forged.json()["error"]["message"]
        headers = {"x-agentworker-console": "1"}
        ok = http.post(f"/turns/{turn_id}/resume", json=resume, headers=headers)
        assert ok.status_code == 200, ok.text
    finally:
        http.cookies.clear()


def test_deliveries_are_tenant_checked(http: TestClient) -> None:
    turn_id = start(http)
    assert http.get(f"/turns/{turn_id}/deliveries", headers=bearer("acme-ro")).json() == {
        "deliveries": []
    }
    assert http.get(f"/turns/{turn_id}/deliveries", headers=bearer("globex-rw")).status_code == 404


def test_console_pages_cannot_be_framed_and_load_only_their_own_assets(http: TestClient) -> None:
    login = http.get("/console/login")
    assert login.status_code == 200
    assert "frame-ancestors 'none'" in login.headers["Content-Security-Policy"]
    assert login.headers["X-Frame-Options"] == "DENY"
    anonymous = http.get("/console", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/console/login"
    page = http.get("/console", headers=bearer("acme-ro"))
    assert page.status_code == 200 and page.headers["X-Frame-Options"] == "DENY"


def test_an_input_over_its_limit_is_counted_in_characters(http: TestClient) -> None:
    # 600 two-byte characters are 1,200 bytes but within the 1,000-character limit
    fits = http.post(
        "/turns", json={"agent": "pay-agent", "input": "é" * 600}, headers=bearer("acme-rw")
    )
    assert fits.status_code != 422, fits.text
    over = http.post(
        "/turns", json={"agent": "pay-agent", "input": "é" * 1001}, headers=bearer("acme-rw")
    )
    assert over.status_code == 422
    assert over.json()["error"]["message"] == (
        "input is 1001 characters or more; the limit is 1000"
    )
