"""The HTTP API: ``uvicorn agentworker.http:app`` (settings from ``AGENTWORKER_*``).

``create_http_app(runner, settings)`` builds the app around any runner (or a function that
builds one when first needed); the module-level ``app`` is built on first access from the
environment, and connects to Redis with ``make_runner()`` at its first request, so it
starts while Redis is down (``/readyz`` answers 503 until it is back).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agentworker.http.auth import (
    IDEMPOTENCY_HEADER,
    REQUEST_ID_HEADER,
    SIGNATURE_HEADER,
    TENANT_HEADER,
    TIMESTAMP_HEADER,
    sign,
    signed_headers,
    target_of,
)
from agentworker.http.root import create_http_app
from agentworker.settings import Settings, problems
from agentworker.wiring import make_runner
from runner_core.errors import ConfigurationError

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = [
    "IDEMPOTENCY_HEADER",
    "REQUEST_ID_HEADER",
    "SIGNATURE_HEADER",
    "TENANT_HEADER",
    "TIMESTAMP_HEADER",
    "create_http_app",
    "sign",
    "signed_headers",
    "target_of",
]


_building = threading.Lock()


def __getattr__(name: str) -> Any:
    if name == "app":
        return _default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _default_app() -> Starlette:
    """The app for ``uvicorn agentworker.http:app``, built once from the environment.

    Once built it is this module's ``app`` attribute, so ``__getattr__`` is not asked again.
    """
    with _building:
        built: Starlette | None = globals().get("app")
        if built is None:
            try:
                settings = Settings()
                settings.load_agent_loader()  # a wrong loader stops the start; Redis need not
                built = create_http_app(lambda: make_runner(settings), settings)
            except ConfigurationError as exc:
                raise SystemExit(f"agentworker.http: {exc}") from None
            except ValidationError as exc:
                raise SystemExit(f"agentworker.http: invalid settings: {problems(exc)}") from None
            globals()["app"] = built
        return built
