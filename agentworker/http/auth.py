"""Who may call, for which tenant, and what: bearer tokens, Standard Webhooks signatures.

Every request but the health checks needs a credential (``credentials.py``): a bearer token
(``Authorization: Bearer <token>``, or the console's cookie) or a signature. A credential
carries its tenant; a request acts on that tenant only, whatever headers it sends.

Signed calls follow the Standard Webhooks specification: ``webhook-id`` (the request id),
``webhook-timestamp`` (Unix seconds) and ``webhook-signature: v1,<base64>`` (several,
space separated, during a rotation), the HMAC-SHA256 of ``f"{id}.{timestamp}.{body}"``.
The signed body must name what the call does: a top-level ``"target": "POST /turns/x/resume"``
equal to the request's method and path, so a signature cannot be moved to another turn
or endpoint. The tenant is the secret's, never a header.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from redis import asyncio as aioredis

from agentworker.http.credentials import ANY_TENANT, Credential
from agentworker.http.errors import ApiError, unauthorized
from agentworker.notify.signing import secret_key
from agentworker.notify.signing import sign as sign
from runner_core.errors import shorten
from stores.redis import Keyspace, RequestRecords

SIGNATURE_HEADER = "webhook-signature"
TIMESTAMP_HEADER = "webhook-timestamp"
REQUEST_ID_HEADER = "webhook-id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: The request id header of bearer-token calls before Idempotency-Key (still accepted).
LEGACY_REQUEST_ID_HEADER = "X-Agentworker-Request-Id"
#: Lets an operator credential (tenant ``*``) act as one tenant; ignored for anyone else.
TENANT_HEADER = "X-Tenant-Id"
#: The console's session cookie: the bearer token, HttpOnly and SameSite=Strict.
COOKIE_NAME = "agentworker_token"
MAX_REQUEST_ID = 200


def signed_headers(
    secret: bytes | str, body: bytes, request_id: str, timestamp: int | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers of a signed call (for clients and tests).

    ``secret``: the key bytes, or a secret as configured (``whsec_<base64>`` is decoded).
    """
    key = secret_key(secret) if isinstance(secret, str) else secret
    ts = int(time.time()) if timestamp is None else timestamp
    return {
        REQUEST_ID_HEADER: request_id,
        TIMESTAMP_HEADER: str(ts),
        SIGNATURE_HEADER: sign(key, request_id, ts, body),
    }


def target_of(method: str, path: str) -> str:
    """What a signed body's ``target`` must say: ``"POST /turns/abc/resume"``."""
    return f"{method.upper()} {path}"


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: its credential's tenant and scopes, and its request id."""

    via: str
    tenant: str
    scopes: frozenset[str]
    name: str = ""
    request_id: str | None = None

    def need(self, scope: str) -> None:
        """``ApiError(403)`` unless the credential carries ``scope``."""
        if scope not in self.scopes:
            raise ApiError(403, f"this credential lacks the {scope!r} scope")

    @property
    def every_tenant(self) -> bool:
        """True for an operator credential acting for all tenants."""
        return self.tenant == ANY_TENANT

    def may_see(self, metadata: Mapping[str, Any]) -> bool:
        """True when a turn with this metadata belongs to the caller's tenant."""
        return self.every_tenant or metadata.get("tenant_id") == self.tenant

    def stamp(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """A new turn's metadata with the caller's tenant; 403 if it names another."""
        if self.every_tenant:
            return metadata
        given = metadata.get("tenant_id")
        if given is not None and given != self.tenant:
            raise ApiError(403, "metadata.tenant_id differs from the credential's tenant")
        return {**metadata, "tenant_id": self.tenant}


@dataclass(frozen=True)
class Pending:
    """A signed call whose headers are in order; the body decides (``Authenticator.confirm``)."""

    request_id: str
    timestamp: int
    signatures: tuple[bytes, ...]


class Authenticator:
    """Checks credentials from headers alone, then a signed call's body; raises ``ApiError``."""

    def __init__(
        self,
        credentials: Sequence[Credential],
        window_seconds: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = [c for c in credentials if c.kind == "token"]
        self.secrets = [c for c in credentials if c.kind == "secret"]
        self.window = window_seconds
        self.clock = clock

    def identify(self, headers: Mapping[str, str], cookie: str | None = None) -> Caller | Pending:
        """A token caller, or a signed call to confirm; 401 without any credential."""
        scheme, _, value = (headers.get("authorization") or "").partition(" ")
        if scheme:
            if scheme.lower() != "bearer":
                raise unauthorized("unsupported credentials: send a bearer token")
            return self._token_caller(value.strip(), headers)
        if headers.get(SIGNATURE_HEADER) is not None:
            return self._pending(headers)
        if cookie:
            return self._token_caller(cookie, headers)
        raise unauthorized("missing credentials: send a bearer token or a signature")

    def confirm(self, pending: Pending, method: str, path: str, body: bytes) -> Caller:
        """The signer of a signed call whose body names this method and path; else 401."""
        message = f"{pending.request_id}.{pending.timestamp}.".encode() + body
        signer = None
        for credential in self.secrets:
            digest = hmac.new(credential.value, message, hashlib.sha256).digest()
            if any(hmac.compare_digest(digest, given) for given in pending.signatures):
                signer = credential
                break
        if signer is None:
            raise unauthorized("invalid signature")
        if _signed_target(body) != target_of(method, path):
            raise unauthorized(f'the signed body must carry "target": "{target_of(method, path)}"')
        return Caller("signature", signer.tenant, signer.scopes, signer.name, pending.request_id)

    def _token_caller(self, value: str, headers: Mapping[str, str]) -> Caller:
        given = value.encode()
        # Every token is compared, so timing does not tell which one nearly matched.
        matches = [c for c in self.tokens if hmac.compare_digest(given, c.value)]
        if not matches:
            raise unauthorized("invalid bearer token")
        credential = matches[0]
        tenant = credential.tenant
        chosen = headers.get(TENANT_HEADER)
        if tenant == ANY_TENANT and chosen:
            tenant = chosen
        request_id = headers.get(IDEMPOTENCY_HEADER) or headers.get(LEGACY_REQUEST_ID_HEADER)
        return Caller("token", tenant, credential.scopes, credential.name, _check_id(request_id))

    def _pending(self, headers: Mapping[str, str]) -> Pending:
        if not self.secrets:
            raise unauthorized("signed calls are not configured: send a bearer token")
        request_id = _check_id(headers.get(REQUEST_ID_HEADER))
        if request_id is None:
            raise unauthorized(f"missing {REQUEST_ID_HEADER} header")
        raw = headers.get(TIMESTAMP_HEADER)
        if raw is None:
            raise unauthorized(f"missing {TIMESTAMP_HEADER} header")
        try:
            timestamp = int(raw)
        except ValueError:
            raise unauthorized(f"{TIMESTAMP_HEADER} must be Unix seconds") from None
        if abs(self.clock() - timestamp) > self.window:
            raise unauthorized(f"timestamp outside the {self.window:.0f}s window")
        return Pending(request_id, timestamp, _signatures(headers.get(SIGNATURE_HEADER, "")))


def _signatures(raw: str) -> tuple[bytes, ...]:
    """The ``v1`` signatures of a ``webhook-signature`` header (others are skipped)."""
    found = []
    for part in raw.split():
        version, _, value = part.partition(",")
        if version != "v1":
            continue
        try:
            found.append(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            continue
    if not found:
        raise unauthorized(f"{SIGNATURE_HEADER} holds no v1 signature")
    return tuple(found)


def _signed_target(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    target = data.get("target") if isinstance(data, dict) else None
    return target if isinstance(target, str) else None


def _check_id(value: str | None) -> str | None:
    if value is None:
        return None
    if not 0 < len(value) <= MAX_REQUEST_ID:
        raise unauthorized(f"a request id must be 1 to {MAX_REQUEST_ID} characters")
    return value


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes two deliveries "the same request" (the timestamp is not part of it)."""
    return hashlib.sha256(f"{method} {path}\n".encode() + body).hexdigest()


@dataclass(frozen=True)
class StoredResponse:
    """The first answer to a request id, given again to a repeated delivery."""

    status: int
    body: dict[str, Any]


#: How long a claimed request id stays "being processed" if its answer never comes.
PENDING_SECONDS = 60


class RequestLedger:
    """Request ids already seen per tenant, with their answers (``RequestRecords``)."""

    def __init__(self, client: aioredis.Redis, namespace: str, remember_seconds: int) -> None:
        self.records = RequestRecords(client, Keyspace(namespace))
        self.remember = remember_seconds

    async def begin(self, caller: Caller, print_: str) -> StoredResponse | None:
        """Claim the request id; the stored answer if it was answered, 409 on a replay."""
        assert caller.request_id is not None
        tenant, request_id = caller.tenant, caller.request_id
        record = json.dumps({"fingerprint": print_, "state": "pending"})
        if await self.records.claim(tenant, request_id, record, PENDING_SECONDS):
            return None
        seen = json.loads(await self.records.get(tenant, request_id) or "{}")
        if seen.get("fingerprint") != print_:
            raise ApiError(409, f"request id {shorten(request_id)} was already used")
        if seen.get("state") != "done":
            raise ApiError(409, f"request {shorten(request_id)} is still being processed")
        return StoredResponse(int(seen["status"]), seen["body"])

    async def finish(self, caller: Caller, print_: str, answer: StoredResponse) -> None:
        """Store the answer for repeated deliveries."""
        assert caller.request_id is not None
        record = {"fingerprint": print_, "state": "done", **asdict(answer)}
        await self.records.put(caller.tenant, caller.request_id, json.dumps(record), self.remember)

    async def abandon(self, caller: Caller) -> None:
        """Forget the claim after a server error, so the sender's retry runs again."""
        assert caller.request_id is not None
        await self.records.forget(caller.tenant, caller.request_id)
