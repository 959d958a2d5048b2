"""Credentials, Standard Webhooks signatures, bound targets and the per-tenant request ledger."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime

import pytest
from redis import asyncio as aioredis
from standardwebhooks import Webhook
from starlette.datastructures import Headers

from agentworker.http.auth import (
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Authenticator,
    Caller,
    Pending,
    RequestLedger,
    StoredResponse,
    fingerprint,
    sign,
    signed_headers,
    target_of,
)
from agentworker.http.credentials import (
    ANY_TENANT,
    Credential,
    legacy_credentials,
    parse_credentials,
    secret_key,
)
from agentworker.http.errors import ApiError
from runner_core import ConfigurationError
from tests.support.servers import RedisServer

KEY = b"0123456789abcdef0123456789abcdef"
WHSEC = "whsec_" + base64.b64encode(KEY).decode()
NOW = 1_700_000_000.0
PATH = "/turns/t1/resume"
BODY = json.dumps(
    {"command": "approve_tool", "call_id": "c1", "target": target_of("POST", PATH)}
).encode()
CREDENTIALS = json.dumps(
    [
        {"token": "tok-acme", "tenant": "acme", "scopes": ["read", "write", "approve"]},
        {"token": "tok-acme-ro", "tenant": "acme", "scopes": ["read"]},
        {"secret": WHSEC, "tenant": "acme", "scopes": ["write", "approve"]},
        {"token": "tok-ops", "tenant": "*", "scopes": ["read"]},
    ]
)


def auth() -> Authenticator:
    return Authenticator(parse_credentials(CREDENTIALS), window_seconds=300, clock=lambda: NOW)


def signed(body: bytes = BODY, ts: float = NOW, request_id: str = "r1") -> Headers:
    return Headers(signed_headers(WHSEC, body, request_id, int(ts)))


def confirm(h: Headers, body: bytes = BODY, method: str = "POST", path: str = PATH) -> Caller:
    pending = auth().identify(h)
    assert isinstance(pending, Pending)
    return auth().confirm(pending, method, path, body)


def refused(fn: object, *args: object) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


def test_the_signature_is_standard_webhooks_v1_over_id_timestamp_and_body() -> None:
    digest = hmac.new(KEY, b"r1.123." + BODY, hashlib.sha256).digest()
    assert sign(KEY, "r1", 123, BODY) == "v1," + base64.b64encode(digest).decode()
    # The reference library computes the same signature from the same secret.
    expected = Webhook(WHSEC).sign("r1", datetime.fromtimestamp(123, UTC), BODY.decode())
    assert sign(KEY, "r1", 123, BODY) == expected


def test_a_call_signed_by_the_standard_webhooks_library_is_accepted() -> None:
    when = datetime.fromtimestamp(NOW, UTC)
    h = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(NOW)),
        "webhook-signature": Webhook(WHSEC).sign("msg_1", when, BODY.decode()),
    }
    caller = confirm(Headers(h))
    assert (caller.via, caller.tenant, caller.request_id) == ("signature", "acme", "msg_1")
    assert caller.scopes == {"write", "approve"}


def test_our_signed_headers_verify_with_the_standard_webhooks_library() -> None:
    h = signed_headers(WHSEC, BODY, "r7")
    assert Webhook(WHSEC).verify(BODY, h)["target"] == "POST /turns/t1/resume"


def test_several_signatures_are_accepted_during_a_rotation() -> None:
    h = dict(signed())
    h[SIGNATURE_HEADER] = f"v1,{base64.b64encode(b'old' * 11).decode()} {h[SIGNATURE_HEADER]}"
    assert confirm(Headers(h)).tenant == "acme"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("tampered body", "invalid signature"),
        ("other secret", "invalid signature"),
        ("captured under a new request id", "invalid signature"),
        ("sent to another turn", "must carry"),
        ("sent as another method", "must carry"),
        ("no target in the body", "must carry"),
        ("stale", "outside the 300s window"),
        ("future", "outside the 300s window"),
        ("no timestamp", TIMESTAMP_HEADER),
        ("bad timestamp", "Unix seconds"),
        ("no v1 signature", "no v1 signature"),
        ("no request id", REQUEST_ID_HEADER),
        ("huge request id", "1 to 200"),
    ],
)
def test_bad_signed_calls_are_refused_with_401(case: str, message: str) -> None:
    h = dict(signed())
    body, method, path = BODY, "POST", PATH
    if case == "tampered body":
        body = BODY.replace(b"c1", b"c2")
    elif case == "other secret":
        h[SIGNATURE_HEADER] = sign(b"other", "r1", int(NOW), BODY)
    elif case == "captured under a new request id":
        h[REQUEST_ID_HEADER] = "r2"
    elif case == "sent to another turn":
        path = "/turns/t2/resume"
    elif case == "sent as another method":
        method = "PUT"
    elif case == "no target in the body":
        body = b'{"command": "retry"}'
        h = dict(signed(body))
    elif case in ("stale", "future"):
        h = dict(signed(ts=NOW - 301 if case == "stale" else NOW + 301))
    elif case == "no timestamp":
        del h[TIMESTAMP_HEADER]
    elif case == "bad timestamp":
        h[TIMESTAMP_HEADER] = "yesterday"
    elif case == "no v1 signature":
        h[SIGNATURE_HEADER] = "v2,abc"
    elif case == "no request id":
        del h[REQUEST_ID_HEADER]
    elif case == "huge request id":
        h[REQUEST_ID_HEADER] = "x" * 201
    error = refused(confirm, Headers(h), body, method, path)
    assert error.status == 401 and message in error.message


def test_the_window_edge_is_still_accepted() -> None:
    assert confirm(signed(ts=NOW - 300)).request_id == "r1"


def test_a_token_carries_its_tenant_and_scopes_and_a_header_changes_nothing() -> None:
    caller = auth().identify(Headers({"authorization": "Bearer tok-acme", "x-tenant-id": "globex"}))
    assert isinstance(caller, Caller)
    assert (caller.tenant, caller.scopes) == ("acme", {"read", "write", "approve"})
    assert caller.may_see({"tenant_id": "acme"}) and not caller.may_see({"tenant_id": "globex"})
    assert not caller.may_see({})
    read_only = auth().identify(Headers({"authorization": "Bearer tok-acme-ro"}))
    assert isinstance(read_only, Caller)
    assert refused(read_only.need, "approve").status == 403


def test_an_operator_token_sees_every_tenant_or_picks_one() -> None:
    ops = auth().identify(Headers({"authorization": "Bearer tok-ops"}))
    assert isinstance(ops, Caller) and ops.every_tenant and ops.may_see({"tenant_id": "x"})
    picked = auth().identify(Headers({"authorization": "Bearer tok-ops", "x-tenant-id": "acme"}))
    assert isinstance(picked, Caller) and picked.tenant == "acme"


@pytest.mark.parametrize("value", ["Bearer nope", "Basic dG9rOg==", "Bearer "])
def test_a_wrong_token_is_refused_even_with_a_valid_signature(value: str) -> None:
    h = Headers({**dict(signed()), "authorization": value})
    assert refused(auth().identify, h).status == 401


def test_nothing_at_all_is_refused() -> None:
    assert refused(auth().identify, Headers({})).status == 401


def test_the_idempotency_key_is_the_token_callers_request_id() -> None:
    h = Headers({"authorization": "Bearer tok-acme", "idempotency-key": "k1"})
    caller = auth().identify(h)
    assert isinstance(caller, Caller) and caller.request_id == "k1"


@pytest.mark.parametrize(
    "raw",
    [
        "[1]",
        '[{"token": "t", "tenant": "a", "scopes": ["admin"]}]',
        '[{"token": "t", "tenant": "", "scopes": ["read"]}]',
        '[{"token": "t", "secret": "s", "tenant": "a", "scopes": ["read"]}]',
        '{"token": "t"}',
        "not json",
    ],
)
def test_bad_credentials_are_a_configuration_error(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="AGENTWORKER_CREDENTIALS"):
        parse_credentials(raw)


def test_legacy_settings_become_operator_credentials() -> None:
    token, secret = legacy_credentials("t", "raw-secret")
    assert (token.tenant, secret.tenant) == (ANY_TENANT, ANY_TENANT)
    assert secret.value == b"raw-secret" and secret_key(WHSEC) == KEY
    assert secret.scopes == {"write", "approve"}
    assert isinstance(token, Credential) and token.allows("read")


def test_the_fingerprint_ignores_the_timestamp_but_not_path_or_body() -> None:
    base = fingerprint("POST", "/turns/t/resume", BODY)
    assert base == fingerprint("POST", "/turns/t/resume", BODY)
    assert base != fingerprint("POST", "/turns/u/resume", BODY)
    assert base != fingerprint("POST", "/turns/t/resume", BODY + b" ")


# -- the ledger (needs redis-server) ------------------------------------------------------


def run_ledger(server: RedisServer, scenario: object) -> object:
    async def main() -> object:
        client = aioredis.Redis.from_url(server.url)
        try:
            ledger = RequestLedger(client, "ns-" + uuid.uuid4().hex[:6], 60)
            return await scenario(ledger)  # type: ignore[operator]
        finally:
            await client.aclose()

    return asyncio.run(main())


def caller(request_id: str = "r1", tenant: str = "acme") -> Caller:
    return Caller("signature", tenant, frozenset({"write"}), "test", request_id)


@pytest.mark.redis
def test_the_same_request_again_gets_the_first_answer(server: RedisServer) -> None:
    async def scenario(ledger: RequestLedger) -> None:
        assert await ledger.begin(caller(), "fp") is None
        with pytest.raises(ApiError, match="still being processed") as busy:
            await ledger.begin(caller(), "fp")
        assert busy.value.status == 409
        await ledger.finish(caller(), "fp", StoredResponse(200, {"id": "t"}))
        assert await ledger.begin(caller(), "fp") == StoredResponse(200, {"id": "t"})

    run_ledger(server, scenario)


@pytest.mark.redis
def test_a_request_id_reused_for_another_request_is_a_replay(server: RedisServer) -> None:
    async def scenario(ledger: RequestLedger) -> None:
        assert await ledger.begin(caller(), "fp") is None
        await ledger.finish(caller(), "fp", StoredResponse(200, {}))
        with pytest.raises(ApiError, match="already used") as replay:
            await ledger.begin(caller(), "other path or body")
        assert replay.value.status == 409
        assert await ledger.begin(caller("r2"), "fp") is None  # a new id is a new request

    run_ledger(server, scenario)


@pytest.mark.redis
def test_request_ids_are_per_tenant(server: RedisServer) -> None:
    async def scenario(ledger: RequestLedger) -> None:
        assert await ledger.begin(caller(tenant="acme"), "fp") is None
        await ledger.finish(caller(tenant="acme"), "fp", StoredResponse(201, {"id": "acme's"}))
        # Another tenant reusing the id and body gets nothing of acme's: its own new request.
        assert await ledger.begin(caller(tenant="globex"), "fp") is None

    run_ledger(server, scenario)


@pytest.mark.redis
def test_an_abandoned_request_can_be_sent_again(server: RedisServer) -> None:
    async def scenario(ledger: RequestLedger) -> None:
        assert await ledger.begin(caller(), "fp") is None
        await ledger.abandon(caller())
        assert await ledger.begin(caller(), "fp") is None

    run_ledger(server, scenario)


@pytest.mark.redis
def test_ledger_entries_expire(server: RedisServer) -> None:
    async def scenario(ledger: RequestLedger) -> list[int]:
        await ledger.begin(caller(), "fp")
        await ledger.finish(caller(), "fp", StoredResponse(200, {}))
        client, namespace = ledger.records.redis, ledger.records.keys.namespace
        keys = [k async for k in client.scan_iter(f"{namespace}:http:*")]
        return [await client.ttl(k) for k in keys]

    ttls = run_ledger(server, scenario)
    assert len(ttls) == 1 and all(0 < t <= 60 for t in ttls)  # type: ignore[union-attr]
