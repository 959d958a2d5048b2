"""agentworker: Celery workers that lease and step turns from Redis, the CLI and the HTTP API.

``celery -A agentworker worker`` finds the Celery app as ``agentworker.app``; it is built
on first access so importing the package (a producer, the CLI) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery

    from runner_core import AgentRunner

    app: Celery


def __getattr__(name: str) -> Any:
    if name in ("app", "celery"):
        from agentworker.celery_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_runner() -> AgentRunner:
    """A runner on the Redis store that enqueues steps (for producers and webhooks)."""
    from agentworker.runtime import make_runner as _make

    return _make()
