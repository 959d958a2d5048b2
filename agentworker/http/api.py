"""The routes: start, show, resume, cancel and follow turns over HTTP."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from pydantic import SecretStr
from redis import asyncio as aioredis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentworker.eventstream import check_stream_id
from agentworker.http.auth import (
    TENANT_HEADER,
    Authenticator,
    Caller,
    RequestLedger,
    StoredResponse,
    fingerprint,
)
from agentworker.http.errors import ApiError, error_body, error_response, status_of
from agentworker.http.schemas import CancelBody, ResumeBody, StartBody, parse, turn_summary
from agentworker.http.sse import already_over, event_source, stream_exists
from agentworker.settings import Settings
from runner_core import (
    AgentRunner,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentWorkerError,
    ConfigurationError,
    TurnLeasedError,
)

log = logging.getLogger("agentworker.http")

Answer = tuple[int, dict[str, Any]]


class TurnsApi:
    """The handlers; each checks credentials, then the body, then the turn and its tenant."""

    def __init__(self, runner: AgentRunner, namespace: str, auth: Authenticator) -> None:
        self.runner = runner
        self.namespace = namespace
        self.auth = auth
        self.redis: aioredis.Redis | None = None

    def _client(self) -> aioredis.Redis:
        if self.redis is None:
            raise RuntimeError("the app's lifespan has not started (run it under uvicorn)")
        return self.redis

    # -- webhooks (signed, or the bearer token) ------------------------------------------
    async def start(self, request: Request) -> Response:
        """``POST /turns``: create a turn and hand it to the workers (201)."""
        body = await request.body()
        caller = self.auth.write(request.headers, body)
        payload = parse(StartBody, body)
        metadata = _with_tenant(payload.metadata, request.headers.get(TENANT_HEADER))
        options = AgentTurnOptions(metadata=metadata, streaming=payload.streaming)

        def run() -> Answer:
            turn = self.runner.start(
                payload.agent,
                payload.input,
                conversation_id=payload.conversation_id,
                options=options,
            )
            return 201, turn_summary(turn.state)

        return await self._once(request, caller, body, run)

    async def resume(self, request: Request) -> Response:
        """``POST /turns/{id}/resume``: apply a resume command; a worker runs the turn."""
        turn_id = request.path_params["turn_id"]
        body = await request.body()
        caller = self.auth.write(request.headers, body)
        command = parse(ResumeBody, body).to_command()
        if caller.request_id is not None:
            audit = {"request_id": caller.request_id, **command.metadata}
            command = replace(command, metadata=audit)
        await self._turn(request, turn_id)

        def run() -> Answer:
            return 200, turn_summary(self.runner.submit_resume(turn_id, command).state)

        return await self._once(request, caller, body, run)

    async def cancel(self, request: Request) -> Response:
        """``POST /turns/{id}/cancel``: cancel the turn and its running children."""
        turn_id = request.path_params["turn_id"]
        body = await request.body()
        caller = self.auth.write(request.headers, body)
        reason = parse(CancelBody, body, empty_ok=True).reason
        await self._turn(request, turn_id)

        def run() -> Answer:
            return 200, turn_summary(self.runner.cancel(turn_id, reason).state)

        return await self._once(request, caller, body, run)

    # -- reads ------------------------------------------------------------------------
    async def show(self, request: Request) -> Response:
        """``GET /turns/{id}``: status, phase, suspension, counters, result."""
        self.auth.read(request.headers)
        snapshot = await self._turn(request, request.path_params["turn_id"])
        children = await run_in_threadpool(self.runner.store.children_of, snapshot.id)
        return JSONResponse(turn_summary(snapshot, children))

    async def events(self, request: Request) -> Response:
        """``GET /turns/{id}/events``: the tree's events as SSE, from ``Last-Event-ID`` on."""
        self.auth.read(request.headers)
        snapshot = await self._turn(request, request.path_params["turn_id"])
        after = _after(request)
        root_id, client = snapshot.root_turn_id, self._client()
        if await already_over(client, self.namespace, root_id, after):
            return Response(status_code=204)  # EventSource stops reconnecting on 204

        async def root_ended() -> bool:
            root = await run_in_threadpool(self.runner.store.load, root_id)
            return root.status.is_terminal

        if not await stream_exists(client, self.namespace, root_id) and await root_ended():
            return Response(status_code=204)  # expired, or never streamed
        return StreamingResponse(
            event_source(client, self.namespace, root_id, after, root_ended),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # -- shared -------------------------------------------------------------------------
    async def _turn(self, request: Request, turn_id: str) -> AgentTurnSnapshot:
        """The stored turn (404), if the caller's tenant may see it (403)."""
        snapshot = await run_in_threadpool(self.runner.store.load, turn_id)
        owner = snapshot.metadata.get("tenant_id")
        if owner is not None and request.headers.get(TENANT_HEADER) != str(owner):
            raise ApiError(403, f"turn {turn_id!r} belongs to another tenant")
        return snapshot

    async def _once(
        self, request: Request, caller: Caller, body: bytes, action: Callable[[], Answer]
    ) -> Response:
        """Run ``action`` once per request id; a repeated delivery gets the first answer."""
        if caller.request_id is None:
            return _json(await _answer(action))
        print_ = fingerprint(request.method, request.url.path, body)
        ledger = RequestLedger(self._client(), self.namespace)
        stored = await ledger.begin(caller, print_)
        if stored is not None:
            return _json((stored.status, stored.body), replayed=True)
        try:
            status, data = await _answer(action)
        except Exception:
            await ledger.abandon(caller)
            raise
        if status >= 500:
            await ledger.abandon(caller)
        else:
            await ledger.finish(caller, print_, StoredResponse(status, data))
        return _json((status, data))


async def _answer(action: Callable[[], Answer]) -> Answer:
    """Run the blocking runner call; our errors become answers (so they can be stored).

    A turn leased by a worker is not an answer to keep: the caller is told to come back
    (409 with Retry-After) and the same request id is then applied, not replayed.
    """
    try:
        return await run_in_threadpool(action)
    except TurnLeasedError:
        raise
    except AgentWorkerError as exc:
        if status_of(exc) >= 500:
            log.error("request failed", exc_info=exc)
        return status_of(exc), error_body(exc)


def _json(answer: Answer, replayed: bool = False) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(answer[1], status_code=answer[0], headers=headers)


def _with_tenant(metadata: dict[str, Any], tenant: str | None) -> dict[str, Any]:
    """Stamp the caller's tenant on a new turn; a different ``tenant_id`` is refused."""
    if tenant is None:
        return metadata
    given = metadata.get("tenant_id")
    if given is not None and str(given) != tenant:
        raise ApiError(403, f"metadata.tenant_id differs from {TENANT_HEADER}")
    return {**metadata, "tenant_id": tenant}


def _after(request: Request) -> str:
    """Where the event stream resumes: ``Last-Event-ID``, else ``?after=``, else the start."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0-0"
    try:
        return check_stream_id(raw.strip())
    except ValueError as exc:
        raise ApiError(422, str(exc), field="Last-Event-ID") from None


async def _on_error(request: Request, exc: Exception) -> Response:
    if status_of(exc) >= 500:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(exc)


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None and value.get_secret_value() else None


def create_http_app(runner: AgentRunner, settings: Settings | None = None) -> Starlette:
    """The ASGI app over ``runner``; needs a webhook secret or an API token configured."""
    settings = settings or Settings()
    secret, token = _secret(settings.webhook_secret), _secret(settings.api_token)
    if secret is None and token is None:
        raise ConfigurationError(
            "the HTTP API needs AGENTWORKER_WEBHOOK_SECRET or AGENTWORKER_API_TOKEN"
        )
    auth = Authenticator(secret, token, settings.webhook_window_seconds)
    api = TurnsApi(runner, settings.namespace, auth)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        api.redis = aioredis.Redis.from_url(settings.redis_url)
        try:
            yield
        finally:
            await api.redis.aclose()
            api.redis = None

    routes = [
        Route("/turns", api.start, methods=["POST"]),
        Route("/turns/{turn_id}", api.show, methods=["GET"]),
        Route("/turns/{turn_id}/resume", api.resume, methods=["POST"]),
        Route("/turns/{turn_id}/cancel", api.cancel, methods=["POST"]),
        Route("/turns/{turn_id}/events", api.events, methods=["GET"]),
    ]
    handlers = {ApiError: _on_error, AgentWorkerError: _on_error, Exception: _on_error}
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
