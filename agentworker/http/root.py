"""The HTTP app's composition root: ``create_http_app(runner, settings)``.

It gathers the API's routes, the OpenAPI document and the console, and wraps them in the
guard (credentials, body limits, throttling) and the tracing middleware. What the app
keeps lives on it (``app.state``), nothing in this module.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agentworker.http.api import Runners, RunnerSource, TurnsApi, routes_of, secret_value
from agentworker.http.auth import Authenticator
from agentworker.http.console.pages import console_routes
from agentworker.http.credentials import legacy_credentials, parse_credentials
from agentworker.http.errors import ApiError, error_response, status_of
from agentworker.http.guard import Guard, Limits
from agentworker.http.openapi import openapi_route
from agentworker.http.schemas import BodyLimits
from agentworker.http.throttle import FailureThrottle
from agentworker.ops.logs import use_json_in_http_app
from agentworker.ops.traces import instrument_http_app
from agentworker.settings import Settings
from runner_core import AgentWorkerError, ConfigurationError
from stores.redis import async_client

log = logging.getLogger("agentworker.http")


def create_http_app(runner: RunnerSource, settings: Settings | None = None) -> Starlette:
    """The ASGI app over ``runner`` (or a function building it when first needed).

    Needs at least one credential configured (``ConfigurationError`` otherwise).
    """
    settings = settings or Settings()
    use_json_in_http_app()  # AGENTWORKER_LOG_FORMAT=json
    auth = authenticator(settings)
    limits = BodyLimits(settings.http_max_input_chars, settings.http_max_metadata_bytes)
    api = TurnsApi(Runners(runner), settings.namespace, settings, limits)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # a cluster client for redis+cluster://
        api.redis = async_client(settings.redis_url, connect_timeout=2, socket_timeout=5)
        try:
            yield
        finally:
            await api.redis.aclose()
            api.redis = None

    routes: list[BaseRoute] = [*routes_of(api), openapi_route(), *console_routes(api)]
    handlers = {ApiError: _on_error, AgentWorkerError: _on_error, Exception: _on_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    guard_limits = Limits(settings.http_max_body_bytes, settings.http_body_timeout_seconds)
    throttle = FailureThrottle(settings.http_auth_failures_per_minute)
    app.add_middleware(Guard, auth=auth, limits=guard_limits, throttle=throttle)
    instrument_http_app(app)  # OpenTelemetry: a span per request, outside the guard
    app.state.api = api
    app.state.auth = auth
    app.state.throttle = throttle
    return app


def authenticator(settings: Settings) -> Authenticator:
    """The app's credentials: ``AGENTWORKER_CREDENTIALS`` and the older single ones."""
    credentials = parse_credentials(secret_value(settings.credentials))
    credentials += legacy_credentials(
        secret_value(settings.api_token), secret_value(settings.webhook_secret)
    )
    if not credentials:
        raise ConfigurationError(
            "the HTTP API needs AGENTWORKER_CREDENTIALS (or AGENTWORKER_API_TOKEN / "
            "AGENTWORKER_WEBHOOK_SECRET)"
        )
    return Authenticator(credentials, settings.webhook_window_seconds)


async def _on_error(request: Request, exc: Exception) -> Response:
    status = status_of(exc)
    if status == 503:
        log.warning("%s %s: store unavailable: %s", request.method, request.url.path, exc)
    elif status >= 500:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(exc)
