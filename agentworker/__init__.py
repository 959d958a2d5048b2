"""agentworker: Celery workers that lease and step turns from Redis, the CLI and the HTTP API.

``celery -A agentworker worker`` finds the Celery app as ``agentworker.app``; it is built
on first access so importing the package (a producer, the CLI) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner_core.moved import alias_moved_modules

if TYPE_CHECKING:
    from celery import Celery

    from runner_core import AgentRunner

    app: Celery

#: Modules of earlier releases and where they live now (docs/upgrading.md).
MOVED = {
    "agentworker.celery_app": "agentworker.fleet.app",
    "agentworker.tasks": "agentworker.fleet.tasks",
    "agentworker.stepping": "agentworker.fleet.stepping",
    "agentworker.dispatch": "agentworker.fleet.dispatch",
    "agentworker.queues": "agentworker.fleet.queues",
    "agentworker.beat": "agentworker.fleet.beat",
    "agentworker.reconnect": "agentworker.fleet.reconnect",
    "agentworker.housekeeping": "agentworker.fleet.housekeeping",
    "agentworker.runtime": "agentworker.wiring",
    "agentworker.eventstream": "agentworker.notify.streams",
    "agentworker.webhooks": "agentworker.notify.webhooks",
    "agentworker.signing": "agentworker.notify.signing",
    "agentworker.metrics": "agentworker.ops.metrics",
    "agentworker.otel": "agentworker.ops.traces",
    "agentworker.logs": "agentworker.ops.logs",
    "agentworker.health": "agentworker.ops.health",
    "agentworker.observability": "agentworker.ops.signals",
    "agentworker.console": "agentworker.cli.main",
    "agentworker.cli_http": "agentworker.cli.remote",
    "agentworker.cli_views": "agentworker.cli.views",
    "agentworker.http.console_views": "agentworker.http.console.views",
}
alias_moved_modules(MOVED)


def __getattr__(name: str) -> Any:
    if name in ("app", "celery"):
        from agentworker.fleet.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_runner() -> AgentRunner:
    """A runner on the Redis store that enqueues steps (for producers and webhooks)."""
    from agentworker.wiring import make_runner as _make

    return _make()
