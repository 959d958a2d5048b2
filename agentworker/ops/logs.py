"""Structured logs: records carry the turn being stepped; ``AGENTWORKER_LOG_FORMAT=json``.

While a worker steps a turn, every record logged in that thread (ours, Celery's, a tool's)
gets ``turn_id``, ``root_turn_id``, ``turn_version``, ``lease_owner`` and ``trace_id``
attributes (``TurnContextFilter``). ``JsonFormatter`` writes one JSON object per line with
them. Workers and beat switch their handlers over through Celery's logging signals
(``observability.install``), the HTTP app when it is built (``use_json_in_http_app``), any
other process with ``configure()``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from runner_core import AgentTurn, telemetry

#: The switch: ``json`` for one JSON object per line, anything else for Celery's text.
FORMAT_VARIABLE = "AGENTWORKER_LOG_FORMAT"
#: The record attributes ``TurnContextFilter`` sets (None outside a step).
FIELDS = ("turn_id", "root_turn_id", "turn_version", "lease_owner", "trace_id")

_turn: ContextVar[AgentTurn | None] = ContextVar("agentworker_turn", default=None)


@contextmanager
def turn_context(turn: AgentTurn) -> Iterator[None]:
    """Records logged in this block describe ``turn``."""
    token = _turn.set(turn)
    try:
        yield
    finally:
        _turn.reset(token)


def context_fields() -> dict[str, Any]:
    """The fields of the turn this thread steps now (empty outside a step)."""
    turn = _turn.get()
    if turn is None:
        return {}
    held = turn.held_lease
    return {
        "turn_id": turn.id,
        "root_turn_id": turn.root_turn_id,
        "turn_version": turn.version,
        "lease_owner": held.owner if held is not None else None,
        "trace_id": telemetry.trace_id(turn),
    }


class TurnContextFilter(logging.Filter):
    """Adds the ``FIELDS`` of the turn being stepped to every record (None outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Set the attributes; never drops a record."""
        fields = context_fields()
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields.get(name))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, turn fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        fields = context_fields()
        for name in FIELDS:
            value = getattr(record, name, None)
            value = value if value is not None else fields.get(name)
            if value is not None:
                out[name] = value
        for name in ("task_id", "task_name"):  # Celery's task logger adds them
            value = getattr(record, name, None)
            if value not in (None, "???"):
                out[name] = value
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def json_enabled() -> bool:
    """Whether ``AGENTWORKER_LOG_FORMAT=json``."""
    return os.environ.get(FORMAT_VARIABLE, "").strip().lower() == "json"


def use_json(logger: logging.Logger) -> None:
    """Every handler of ``logger`` writes JSON with the turn fields."""
    formatter = JsonFormatter()
    for handler in logger.handlers:
        handler.setFormatter(formatter)
        if not any(isinstance(f, TurnContextFilter) for f in handler.filters):
            handler.addFilter(TurnContextFilter())


def use_json_in_http_app() -> None:
    """The HTTP app (under uvicorn): its loggers and the root logger write JSON, if switched on."""
    if json_enabled():
        for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access"):
            use_json(logging.getLogger(name))


def configure(level: int = logging.INFO) -> None:
    """For processes without Celery's logging: JSON (when switched on) on the root logger."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=level)
    if json_enabled():
        use_json(root)
