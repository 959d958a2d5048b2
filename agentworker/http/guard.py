"""The ASGI layer in front of every route: credentials from headers, then a bounded body.

A request without a valid credential is refused on its headers alone, before one byte of
its body is read; so is a body announced larger than the limit (``Content-Length``). A body
that streams past the limit is cut off at the limit, one that stalls is given up after the
body timeout. Only then is a signed call's signature checked (it covers the body), and the
route gets the buffered body and the caller (``request.state.caller``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from agentworker.http.auth import COOKIE_NAME, Authenticator, Caller, Pending
from agentworker.http.errors import ApiError, error_response
from agentworker.http.throttle import FailureThrottle, client_of
from runner_core.errors import PayloadTooLargeError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths anyone may call: health checks, the API description, the console's login and assets.
PUBLIC = ("/healthz", "/readyz", "/openapi.json", "/console/login", "/console/logout")
PUBLIC_PREFIXES = ("/console/static/",)
#: Header a cookie-authenticated write must send (a cross-site form cannot set it).
CONSOLE_HEADER = "x-agentworker-console"
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Limits:
    """How much of a request the guard reads, and for how long."""

    max_body_bytes: int = 1_048_576
    body_timeout_seconds: float = 30.0


def caller_of(request: Request) -> Caller:
    """The caller the guard authenticated for this request."""
    caller = getattr(request.state, "caller", None)
    if not isinstance(caller, Caller):
        raise ApiError(401, "missing credentials")
    return caller


class Guard:
    """ASGI middleware: authenticate on headers, bound and buffer the body, confirm signatures."""

    def __init__(
        self, app: ASGIApp, auth: Authenticator, limits: Limits, throttle: FailureThrottle
    ) -> None:
        self.app = app
        self.auth = auth
        self.limits = limits
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse on headers, or pass the request on with its body read and its caller."""
        if scope["type"] != "http" or _public(scope["path"]):
            await self.app(scope, receive, send)
            return
        client = client_of(scope)
        try:
            self.throttle.check(client)  # before any credential is looked at
            caller, body = await self._admit(scope, receive)
        except (ApiError, PayloadTooLargeError) as exc:
            if isinstance(exc, ApiError) and exc.status == 401 and _presented(scope):
                self.throttle.failed(client)
            await self._refuse(scope, exc)(scope, receive, send)
            return
        except _ClientGone:
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, _replay(body, receive), send)

    async def _admit(self, scope: Scope, receive: Receive) -> tuple[Caller, bytes]:
        headers = Headers(scope=scope)
        method = scope["method"]
        cookie = _cookie(headers)
        found = self.auth.identify(headers, cookie)
        if cookie and "authorization" not in headers and method not in SAFE:
            if headers.get(CONSOLE_HEADER) != "1":
                raise ApiError(403, f"a console write must send {CONSOLE_HEADER}: 1")
        if isinstance(found, Caller) and method in SAFE:
            found.need("read")
        self._check_length(headers)
        body = await self._read(receive)
        if isinstance(found, Pending):
            found = self.auth.confirm(found, method, scope["path"], body)
            if method in SAFE:
                found.need("read")
        return found, body

    def _check_length(self, headers: Headers) -> None:
        raw = headers.get("content-length")
        if raw is None:
            return
        try:
            announced = int(raw)
        except ValueError:
            raise ApiError(400, "Content-Length is not a number") from None
        if announced > self.limits.max_body_bytes:
            raise PayloadTooLargeError("the request body", announced, self.limits.max_body_bytes)

    async def _read(self, receive: Receive) -> bytes:
        """The whole body, at most ``max_body_bytes``, within the body timeout."""
        limit = self.limits.max_body_bytes
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.body_timeout_seconds
        chunks, size = [], 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise ApiError(408, "the request body did not arrive in time") from None
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLargeError("the request body", size, limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _refuse(self, scope: Scope, exc: Exception) -> Response:
        path = scope["path"]
        if (
            isinstance(exc, ApiError)
            and exc.status == 401
            and scope["method"] == "GET"
            and (path == "/console" or path.startswith("/console/"))
        ):
            return RedirectResponse("/console/login", status_code=303)
        response = error_response(exc)
        # The unread body is not drained: the connection is closed after the answer.
        response.headers["Connection"] = "close"
        return response


class _ClientGone(Exception):
    """The client disconnected before its body arrived."""


def _presented(scope: Scope) -> bool:
    """True when the request carried a credential of some kind (a wrong one, then)."""
    headers = Headers(scope=scope)
    return any(h in headers for h in ("authorization", "webhook-signature")) or bool(
        _cookie(headers)
    )


def _public(path: str) -> bool:
    return path in PUBLIC or path.startswith(PUBLIC_PREFIXES)


def _cookie(headers: Headers) -> str | None:
    raw = headers.get("cookie")
    if not raw:
        return None
    try:
        jar = SimpleCookie(raw)
    except CookieError:
        return None
    morsel = jar.get(COOKIE_NAME)
    return morsel.value if morsel is not None and morsel.value else None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
