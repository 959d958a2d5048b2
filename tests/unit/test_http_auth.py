"""Signatures, timestamps, bearer tokens and the request-id ledger of the HTTP API."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from collections.abc import Iterator

import pytest
from redis import asyncio as aioredis
from starlette.datastructures import Headers

from agentworker.http.auth import (
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Authenticator,
    Caller,
    RequestLedger,
    StoredResponse,
    fingerprint,
    sign,
    signed_headers,
)
from agentworker.http.errors import ApiError
from examples.local import RedisServer

SECRET = "s3cret"
NOW = 1_700_000_000.0
BODY = b'{"command": "approve_tool", "call_id": "c1"}'


def auth(token: str | None = "tok", secret: str | None = SECRET) -> Authenticator:
    return Authenticator(secret, token, window_seconds=300, clock=lambda: NOW)


def headers(**extra: str) -> Headers:
    return Headers(extra)


def signed(body: bytes = BODY, ts: float = NOW, request_id: str = "r1") -> Headers:
    return Headers(signed_headers(SECRET, body, request_id, int(ts)))


def refused(fn: object, *args: object) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


def test_the_signature_is_hmac_sha256_over_request_id_timestamp_and_body() -> None:
    expected = hmac.new(SECRET.encode(), b"r1.123." + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, "r1", 123, BODY) == "sha256=" + expected


def test_a_correctly_signed_call_is_accepted() -> None:
    caller = auth().write(signed(), BODY)
    assert caller.via == "signature" and caller.request_id == "r1"
    assert caller.remember_seconds == 301  # until the timestamp leaves the window


def test_the_bare_hex_signature_is_accepted_too() -> None:
    h = dict(signed())
    h[SIGNATURE_HEADER.lower()] = h[SIGNATURE_HEADER.lower()].removeprefix("sha256=")
    assert auth().write(Headers(h), BODY).via == "signature"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("tampered body", "invalid signature"),
        ("other secret", "invalid signature"),
        ("captured under a new request id", "invalid signature"),
        ("stale", "outside the 300s window"),
        ("future", "outside the 300s window"),
        ("no timestamp", TIMESTAMP_HEADER),
        ("bad timestamp", "Unix seconds"),
        ("no signature", SIGNATURE_HEADER),
        ("no request id", REQUEST_ID_HEADER),
        ("huge request id", REQUEST_ID_HEADER),
    ],
)
def test_bad_signed_calls_are_refused_with_401(case: str, message: str) -> None:
    h = dict(signed())
    body = BODY
    if case == "tampered body":
        body = BODY.replace(b"c1", b"c2")
    elif case == "other secret":
        h[SIGNATURE_HEADER.lower()] = sign("other", "r1", int(NOW), BODY)
    elif case == "captured under a new request id":
        h[REQUEST_ID_HEADER.lower()] = "r2"
    elif case in ("stale", "future"):
        ts = NOW - 301 if case == "stale" else NOW + 301
        h = dict(signed(ts=ts))
    elif case == "no timestamp":
        del h[TIMESTAMP_HEADER.lower()]
    elif case == "bad timestamp":
        h[TIMESTAMP_HEADER.lower()] = "yesterday"
    elif case == "no signature":
        del h[SIGNATURE_HEADER.lower()]
    elif case == "no request id":
        del h[REQUEST_ID_HEADER.lower()]
    elif case == "huge request id":
        h[REQUEST_ID_HEADER.lower()] = "x" * 201
    error = refused(auth().write, Headers(h), body)
    assert error.status == 401 and message in error.message


def test_the_window_edge_is_still_accepted() -> None:
    assert auth().write(signed(ts=NOW - 300), BODY).remember_seconds == 1


def test_a_bearer_token_replaces_the_signature_for_writes() -> None:
    caller = auth().write(headers(authorization="Bearer tok"), BODY)
    assert caller == Caller("token", None, 300)
    with_id = auth().write(headers(authorization="Bearer tok", **{REQUEST_ID_HEADER: "r9"}), BODY)
    assert with_id.request_id == "r9"


@pytest.mark.parametrize("value", ["Bearer nope", "Basic dG9rOg==", "Bearer "])
def test_a_wrong_token_is_refused_even_with_a_valid_signature(value: str) -> None:
    h = Headers({**dict(signed()), "authorization": value})
    assert refused(auth().write, h, BODY).status == 401


def test_without_a_secret_only_the_token_writes() -> None:
    error = refused(auth(secret=None).write, signed(), BODY)
    assert error.status == 401 and "bearer token" in error.message


def test_reads_are_open_without_a_token_and_need_it_with_one() -> None:
    assert auth(token=None).read(headers()).via == "open"
    assert auth().read(headers(authorization="Bearer tok")).via == "token"
    assert refused(auth().read, headers()).status == 401
    assert refused(auth().read, headers(authorization="Bearer bad")).status == 401


def test_the_fingerprint_ignores_the_timestamp_but_not_path_or_body() -> None:
    base = fingerprint("POST", "/turns/t/resume", BODY)
    assert base == fingerprint("POST", "/turns/t/resume", BODY)
    assert base != fingerprint("POST", "/turns/u/resume", BODY)
    assert base != fingerprint("POST", "/turns/t/resume", BODY + b" ")


# -- the ledger (needs redis-server) ------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    s = RedisServer(tmp_path_factory.mktemp("redis-auth"), appendonly=False).start()
    yield s
    s.stop()


def run_ledger(server: RedisServer, scenario: object) -> object:
    async def main() -> object:
        client = aioredis.Redis.from_url(server.url)
        try:
            return await scenario(RequestLedger(client, "ns-" + uuid.uuid4().hex[:6]))  # type: ignore[operator]
        finally:
            await client.aclose()

    return asyncio.run(main())


def caller(request_id: str = "r1") -> Caller:
    return Caller("signature", request_id, 60)


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
def test_an_abandoned_request_can_be_sent_again(server: RedisServer) -> None:
    async def scenario(ledger: RequestLedger) -> None:
        assert await ledger.begin(caller(), "fp") is None
        await ledger.abandon(caller())
        assert await ledger.begin(caller(), "fp") is None

    run_ledger(server, scenario)


@pytest.mark.redis
def test_ledger_entries_expire_with_the_window(server: RedisServer) -> None:
    async def scenario(ledger: RequestLedger) -> list[int]:
        await ledger.begin(caller(), "fp")
        await ledger.finish(caller(), "fp", StoredResponse(200, {}))
        keys = [k async for k in ledger.redis.scan_iter(f"{ledger.namespace}:http:*")]
        return [await ledger.redis.ttl(k) for k in keys]

    ttls = run_ledger(server, scenario)
    assert len(ttls) == 1 and all(0 < t <= 60 for t in ttls)  # type: ignore[union-attr]
