"""Who may call: HMAC-signed webhooks, an optional bearer token, and request-id replay rules.

A signed call sends ``X-Agentworker-Timestamp`` (Unix seconds), ``X-Agentworker-Request-Id``
and ``X-Agentworker-Signature: sha256=<hex>``, the HMAC-SHA256 under the webhook secret of
``f"{request_id}.{timestamp}.{body}"`` (the Standard Webhooks layout). The request id is
signed so a captured call cannot be replayed under a fresh id. The same request id again
with the same method, path and body gets the first answer; with anything else it is a
replay (409).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from redis import asyncio as aioredis

from agentworker.http.errors import ApiError, unauthorized

SIGNATURE_HEADER = "X-Agentworker-Signature"
TIMESTAMP_HEADER = "X-Agentworker-Timestamp"
REQUEST_ID_HEADER = "X-Agentworker-Request-Id"
TENANT_HEADER = "X-Tenant-Id"
MAX_REQUEST_ID = 200


def sign(secret: str, request_id: str, timestamp: int | str, body: bytes) -> str:
    """The signature header value of a call: ``sha256=<hex>``."""
    message = f"{request_id}.{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(
    secret: str, body: bytes, request_id: str, timestamp: int | None = None
) -> dict[str, str]:
    """The three headers of a signed call (for clients and tests)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        TIMESTAMP_HEADER: str(ts),
        REQUEST_ID_HEADER: request_id,
        SIGNATURE_HEADER: sign(secret, request_id, ts, body),
    }


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: how, and the request id it sent."""

    via: str
    request_id: str | None = None
    #: How long the request id (and signature) must be remembered, in seconds.
    remember_seconds: int = 300


class Authenticator:
    """Checks bearer tokens and webhook signatures; raises ``ApiError(401)``."""

    def __init__(
        self,
        secret: str | None,
        token: str | None,
        window_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.secret = secret
        self.token = token
        self.window = window_seconds
        self.clock = clock

    def read(self, headers: Mapping[str, str]) -> Caller:
        """Reads need the bearer token when one is configured."""
        if self.token is None:
            return Caller("open")
        self._check_token(headers)
        return Caller("token")

    def write(self, headers: Mapping[str, str], body: bytes) -> Caller:
        """Writes need the bearer token or a valid signature."""
        request_id = _request_id(headers)
        if headers.get("authorization") is not None:
            self._check_token(headers)
            return Caller("token", request_id, math.ceil(self.window))
        if self.secret is None:
            raise unauthorized("missing credentials: send a bearer token")
        if request_id is None:
            raise unauthorized(f"missing {REQUEST_ID_HEADER} header")
        timestamp = self._check_timestamp(headers.get(TIMESTAMP_HEADER))
        self._check_signature(headers.get(SIGNATURE_HEADER), request_id, timestamp, body)
        remember = math.ceil(timestamp + self.window - self.clock()) + 1
        return Caller("signature", request_id, max(1, remember))

    def _check_token(self, headers: Mapping[str, str]) -> None:
        scheme, _, value = (headers.get("authorization") or "").partition(" ")
        if self.token is None or scheme.lower() != "bearer":
            raise unauthorized("missing or unsupported credentials")
        if not hmac.compare_digest(value.strip().encode(), self.token.encode()):
            raise unauthorized("invalid bearer token")

    def _check_timestamp(self, raw: str | None) -> int:
        if raw is None:
            raise unauthorized(f"missing {TIMESTAMP_HEADER} header")
        try:
            timestamp = int(raw)
        except ValueError:
            raise unauthorized(f"{TIMESTAMP_HEADER} must be Unix seconds") from None
        if abs(self.clock() - timestamp) > self.window:
            raise unauthorized(f"timestamp outside the {self.window:.0f}s window")
        return timestamp

    def _check_signature(
        self, raw: str | None, request_id: str, timestamp: int, body: bytes
    ) -> None:
        assert self.secret is not None
        if not raw:
            raise unauthorized(f"missing {SIGNATURE_HEADER} header")
        given = raw.strip().removeprefix("sha256=")
        expected = sign(self.secret, request_id, timestamp, body).removeprefix("sha256=")
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise unauthorized("invalid signature")


def _request_id(headers: Mapping[str, str]) -> str | None:
    value = headers.get(REQUEST_ID_HEADER)
    if value is None:
        return None
    if not 0 < len(value) <= MAX_REQUEST_ID:
        raise unauthorized(f"{REQUEST_ID_HEADER} must be 1 to {MAX_REQUEST_ID} characters")
    return value


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes two deliveries "the same request" (the timestamp is not part of it)."""
    return hashlib.sha256(f"{method} {path}\n".encode() + body).hexdigest()


@dataclass(frozen=True)
class StoredResponse:
    """The first answer to a request id, given again to a repeated delivery."""

    status: int
    body: dict[str, Any]


class RequestLedger:
    """Request ids already seen, with their answers, in Redis (SET NX, expiring)."""

    def __init__(self, client: aioredis.Redis, namespace: str) -> None:
        self.redis = client
        self.namespace = namespace

    def _key(self, request_id: str) -> str:
        return f"{self.namespace}:http:request:{request_id}"

    async def begin(self, caller: Caller, print_: str) -> StoredResponse | None:
        """Claim the request id; the stored answer if it was answered, 409 on a replay."""
        assert caller.request_id is not None
        key = self._key(caller.request_id)
        record = json.dumps({"fingerprint": print_, "state": "pending"})
        if await self.redis.set(key, record, nx=True, ex=caller.remember_seconds):
            return None
        seen = json.loads(_text(await self.redis.get(key)) or "{}")
        if seen.get("fingerprint") != print_:
            raise ApiError(409, f"request id {caller.request_id!r} was already used")
        if seen.get("state") != "done":
            raise ApiError(409, f"request {caller.request_id!r} is still being processed")
        return StoredResponse(int(seen["status"]), seen["body"])

    async def finish(self, caller: Caller, print_: str, answer: StoredResponse) -> None:
        """Store the answer for repeated deliveries (same TTL as the claim)."""
        assert caller.request_id is not None
        record = {"fingerprint": print_, "state": "done", **asdict(answer)}
        await self.redis.set(
            self._key(caller.request_id), json.dumps(record), xx=True, keepttl=True
        )

    async def abandon(self, caller: Caller) -> None:
        """Forget the claim after a server error, so the sender's retry runs again."""
        assert caller.request_id is not None
        await self.redis.delete(self._key(caller.request_id))


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
