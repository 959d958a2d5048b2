"""The Celery app of ``celery -A agentworker worker`` / ``celery -A agentworker beat``.

Importing this module builds the app from ``AGENTWORKER_*``; only ``agentworker.__getattr__``
imports it. ``agentworker.wiring`` builds the app (``create_app``, ``celery_config``);
the names are also here for the paths of earlier releases (``agentworker.celery_app``).
"""

from __future__ import annotations

from celery import Celery
from pydantic import ValidationError

from agentworker.settings import problems
from agentworker.wiring import celery_config, create_app
from runner_core import ConfigurationError

__all__ = ["app", "app_from_environment", "celery_config", "create_app", "problems"]


def app_from_environment() -> Celery:
    """The app from ``AGENTWORKER_*``; invalid settings exit with one line per problem."""
    try:
        return create_app()
    except ValidationError as exc:
        raise SystemExit(f"agentworker: invalid settings: {problems(exc)}") from None
    except ConfigurationError as exc:
        raise SystemExit(f"agentworker: invalid settings: {exc}") from None


app = app_from_environment()
