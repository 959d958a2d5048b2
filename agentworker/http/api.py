"""The routes: start, list, show, wait for, resume, cancel and follow turns over HTTP."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr
from redis import asyncio as aioredis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from agentworker.http.auth import Caller, RequestLedger, StoredResponse, fingerprint
from agentworker.http.errors import ApiError, error_body, status_of
from agentworker.http.guard import caller_of
from agentworker.http.listing import ListQuery, list_page
from agentworker.http.schemas import (
    BodyLimits,
    CancelBody,
    ResumeBody,
    StartBody,
    parse,
    turn_summary,
)
from agentworker.http.sse import already_over, event_source, stream_exists
from agentworker.notify.streams import check_stream_id
from agentworker.notify.webhooks import Outbox
from agentworker.ops import metrics
from agentworker.settings import Settings
from runner_core import (
    AgentRunner,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentWorkerError,
    ConcurrentModificationError,
    StoreUnavailableError,
    TurnLeasedError,
    TurnNotFoundError,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger("agentworker.http")

Answer = tuple[int, dict[str, Any]]
RunnerSource = AgentRunner | Callable[[], AgentRunner]
#: Longest wait a client may ask of ``GET /turns/{id}/wait``, in seconds.
MAX_WAIT_SECONDS = 60.0


class Runners:
    """The app's runner, built on first use: the app starts while its store is down."""

    def __init__(self, source: RunnerSource) -> None:
        self._source = source
        self._runner = source if isinstance(source, AgentRunner) else None
        self._lock = threading.Lock()

    def get(self) -> AgentRunner:
        """The runner; ``StoreUnavailableError`` while it cannot be built (a 503)."""
        if self._runner is None:
            with self._lock:
                if self._runner is None:
                    assert callable(self._source)
                    self._runner = self._source()
        return self._runner


class TurnsApi:
    """The handlers; the guard has checked credentials and read the body already."""

    def __init__(
        self, runners: Runners, namespace: str, settings: Settings, limits: BodyLimits
    ) -> None:
        self.runners = runners
        self.namespace = namespace
        self.settings = settings
        self.limits = limits
        self.redis: aioredis.Redis | None = None
        self._outbox: Outbox | None = None
        self._registry: CollectorRegistry | None = None

    @property
    def runner(self) -> AgentRunner:
        """The runner (see ``Runners``); call from a worker thread, it may connect."""
        return self.runners.get()

    def _client(self) -> aioredis.Redis:
        if self.redis is None:
            raise RuntimeError("the app's lifespan has not started (run it under uvicorn)")
        return self.redis

    # -- writes -------------------------------------------------------------------------
    async def start(self, request: Request) -> Response:
        """``POST /turns``: create a turn and hand it to the workers (201)."""
        caller = caller_of(request)
        caller.need("write")
        body = await request.body()
        payload = parse(StartBody, body)
        payload.check(self.limits)
        metadata = caller.stamp(payload.metadata)
        if payload.webhooks:
            if not secret_value(self.settings.webhook_start_secret):
                raise ApiError(
                    422, "webhooks on start need AGENTWORKER_WEBHOOK_START_SECRET", "webhooks"
                )
            metadata = {**metadata, "webhooks": [w.model_dump() for w in payload.webhooks]}
        options = AgentTurnOptions(metadata=metadata, streaming=payload.streaming)

        def run() -> Answer:
            try:
                turn = self.runner.start(
                    payload.agent,
                    payload.input,
                    conversation_id=payload.conversation_id,
                    options=options,
                    turn_id=payload.turn_id,
                )
            except ConcurrentModificationError:
                if payload.turn_id is None:
                    raise
                return self._started_before(caller, payload)
            return 201, turn_summary(turn.state)

        return await self._once(request, caller, body, run)

    def _started_before(self, caller: Caller, payload: StartBody) -> Answer:
        """A start with a turn id that exists: that turn again, if it is the same start."""
        assert payload.turn_id is not None
        existing = self.runner.store.load(payload.turn_id)
        if not caller.may_see(existing.metadata) or existing.agent_id != payload.agent:
            raise ApiError(409, f"turn id {payload.turn_id!r} is taken", field="turn_id")
        return 200, turn_summary(existing)

    async def resume(self, request: Request) -> Response:
        """``POST /turns/{id}/resume``: apply a resume command; a worker runs the turn."""
        caller = caller_of(request)
        caller.need("approve")
        turn_id = request.path_params["turn_id"]
        body = await request.body()
        payload = parse(ResumeBody, body)
        payload.check(self.limits)
        command = payload.to_command()
        audit = {"credential": caller.name}
        if caller.request_id is not None:
            audit["request_id"] = caller.request_id
        command = replace(command, metadata={**audit, **command.metadata})
        await self.turn(caller, turn_id)

        def run() -> Answer:
            return 200, turn_summary(self.runner.submit_resume(turn_id, command).state)

        return await self._once(request, caller, body, run)

    async def cancel(self, request: Request) -> Response:
        """``POST /turns/{id}/cancel``: cancel the turn and its running children."""
        caller = caller_of(request)
        caller.need("write")
        turn_id = request.path_params["turn_id"]
        body = await request.body()
        reason = parse(CancelBody, body, empty_ok=True).reason
        await self.turn(caller, turn_id)

        def run() -> Answer:
            return 200, turn_summary(self.runner.cancel(turn_id, reason).state)

        return await self._once(request, caller, body, run)

    # -- reads --------------------------------------------------------------------------
    async def show(self, request: Request) -> Response:
        """``GET /turns/{id}``: status, phase, suspension, counters, result, children."""
        caller = caller_of(request)
        snapshot = await self.turn(caller, request.path_params["turn_id"])
        children = await run_in_threadpool(lambda: self.runner.store.children_of(snapshot.id))
        return JSONResponse(turn_summary(snapshot, children))

    async def list(self, request: Request) -> Response:
        """``GET /turns``: turns newest first, filtered, one page and the next cursor."""
        caller = caller_of(request)
        query = ListQuery.of(request.query_params)
        tenant = query.tenant if caller.every_tenant else caller.tenant
        if not caller.every_tenant and query.tenant not in (None, caller.tenant):
            raise ApiError(403, "this credential lists its own tenant only", field="tenant")

        def run() -> dict[str, Any]:
            store = self.runner.store
            page = list_page(store, query, tenant, store.load)
            return {
                "turns": [turn_summary(s) for s in page.turns],
                "next_cursor": page.next_cursor,
            }

        return JSONResponse(await run_in_threadpool(run))

    async def wait(self, request: Request) -> Response:
        """``GET /turns/{id}/wait?until=blocked|ended&timeout=s``: long-poll for a change."""
        caller = caller_of(request)
        turn_id = request.path_params["turn_id"]
        until = request.query_params.get("until", "blocked")
        if until not in ("blocked", "ended"):
            raise ApiError(422, "until: 'blocked' or 'ended'", field="until")
        timeout = _wait_seconds(request.query_params.get("timeout", "30"))
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + timeout, 0.05
        while True:
            snapshot = await self.turn(caller, turn_id)
            status = snapshot.status
            reached = status.is_terminal or (until == "blocked" and status.is_blocked)
            if reached or loop.time() >= deadline:
                headers = {"Agentworker-Wait": "reached" if reached else "timeout"}
                return JSONResponse(turn_summary(snapshot), headers=headers)
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(pause * 2, 1.0)

    async def events(self, request: Request) -> Response:
        """``GET /turns/{id}/events``: the tree's events as SSE, from ``Last-Event-ID`` on."""
        caller = caller_of(request)
        snapshot = await self.turn(caller, request.path_params["turn_id"])
        after = _after(request)
        root_id, client = snapshot.root_turn_id, self._client()
        if await already_over(client, self.namespace, root_id, after):
            return Response(status_code=204)  # EventSource stops reconnecting on 204

        async def root_ended() -> bool:
            root = await run_in_threadpool(lambda: self.runner.store.load(root_id))
            return root.status.is_terminal

        if not await stream_exists(client, self.namespace, root_id) and await root_ended():
            return Response(status_code=204)  # expired, or never streamed
        return StreamingResponse(
            event_source(client, self.namespace, root_id, after, root_ended),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: Prometheus metrics, fleet-wide: an operator credential's read."""
        caller = caller_of(request)
        caller.need("read")
        if not caller.every_tenant:
            raise ApiError(403, "metrics are fleet-wide: an operator credential reads them")
        body, content_type = await run_in_threadpool(self._scrape)
        return Response(body, media_type=content_type)

    def _scrape(self) -> tuple[bytes, str]:
        """The host's metrics and the turns, from a registry built once per app."""
        if self._registry is None:
            self._registry = metrics.registry(self.runner.store)
        return metrics.exposition(self._registry)

    async def deliveries(self, request: Request) -> Response:
        """``GET /turns/{id}/deliveries``: the turn's outbound webhooks and their attempts."""
        caller = caller_of(request)
        snapshot = await self.turn(caller, request.path_params["turn_id"])
        from agentworker.notify import webhooks

        if not webhooks.configured(self.settings):
            return JSONResponse({"deliveries": []})

        def run() -> list[dict[str, Any]]:
            if self._outbox is None:
                self._outbox = webhooks.outbox_of(self.settings)
            return self._outbox.log_of(snapshot.id)

        return JSONResponse({"deliveries": await run_in_threadpool(run)})

    # -- health -------------------------------------------------------------------------
    async def healthz(self, request: Request) -> Response:
        """``GET /healthz``: the process answers (no store needed)."""
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """``GET /readyz``: 200 when the store answers, else 503 with Retry-After."""
        try:
            await run_in_threadpool(self.runners.get)
            await self._client().ping()
        except (StoreUnavailableError, OSError, aioredis.RedisError) as exc:
            log.warning("not ready: %s", type(exc).__name__)
            return JSONResponse(
                {"status": "unavailable"}, status_code=503, headers={"Retry-After": "5"}
            )
        return JSONResponse({"status": "ready"})

    # -- shared -------------------------------------------------------------------------
    async def turn(self, caller: Caller, turn_id: str) -> AgentTurnSnapshot:
        """The stored turn, if the caller's tenant owns it; 404 otherwise (either way)."""
        snapshot = await run_in_threadpool(lambda: self.runner.store.load(turn_id))
        if not caller.may_see(snapshot.metadata):
            raise TurnNotFoundError(turn_id)
        return snapshot

    async def _once(
        self, request: Request, caller: Caller, body: bytes, action: Callable[[], Answer]
    ) -> Response:
        """Run ``action`` once per tenant and request id; a repeat gets the first answer."""
        if caller.request_id is None:
            return _json(await _answer(action))
        print_ = fingerprint(request.method, request.url.path, body)
        ledger = RequestLedger(
            self._client(), self.namespace, self.settings.http_idempotency_seconds
        )
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
    (409 with Retry-After) and the same request id is then applied, not replayed. Nor is
    an unavailable store (503).
    """
    try:
        return await run_in_threadpool(action)
    except (TurnLeasedError, StoreUnavailableError):
        raise
    except AgentWorkerError as exc:
        if status_of(exc) >= 500:
            log.error("request failed", exc_info=exc)
        return status_of(exc), error_body(exc)


def _json(answer: Answer, replayed: bool = False) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(answer[1], status_code=answer[0], headers=headers)


def _wait_seconds(raw: str) -> float:
    """A wait's ``timeout``: seconds, finite and not negative, cut to ``MAX_WAIT_SECONDS``."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ApiError(422, "timeout: seconds, 0 or more", field="timeout")
    return min(seconds, MAX_WAIT_SECONDS)


def _after(request: Request) -> str:
    """Where the event stream resumes: ``Last-Event-ID``, else ``?after=``, else the start."""
    header = request.headers.get("last-event-id")
    raw = header or request.query_params.get("after") or "0-0"
    try:
        return check_stream_id(raw.strip())
    except ValueError as exc:
        raise ApiError(422, str(exc), field="Last-Event-ID" if header else "after") from None


def secret_value(value: SecretStr | None) -> str | None:
    """The secret's text; None when unset or empty."""
    return value.get_secret_value() if value is not None and value.get_secret_value() else None


def routes_of(api: TurnsApi) -> list[BaseRoute]:
    """The API's routes (the console adds its own)."""
    return [
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/readyz", api.readyz, methods=["GET"]),
        Route("/turns", api.start, methods=["POST"]),
        Route("/turns", api.list, methods=["GET"]),
        Route("/turns/{turn_id}", api.show, methods=["GET"]),
        Route("/turns/{turn_id}/wait", api.wait, methods=["GET"]),
        Route("/turns/{turn_id}/resume", api.resume, methods=["POST"]),
        Route("/turns/{turn_id}/cancel", api.cancel, methods=["POST"]),
        Route("/turns/{turn_id}/events", api.events, methods=["GET"]),
        Route("/turns/{turn_id}/deliveries", api.deliveries, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
    ]


__all__ = ["Runners", "TurnsApi", "routes_of", "secret_value"]
