"""How the OpenAI SDK's errors become ``ModelError``: what is retried, and after how long.

Shared by the Chat Completions and the Responses adapters.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Mapping
from datetime import UTC

import openai

from runner_core.models.base import ModelError

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Client-error statuses worth retrying (besides every 5xx)."""

FATAL_ERROR_CODES = frozenset({"insufficient_quota", "context_length_exceeded"})
"""Error codes that no retry can fix, whatever the HTTP status."""


def to_model_error(err: openai.OpenAIError) -> ModelError:
    """Classify an SDK error: transient ones are retryable, the rest are not."""
    if isinstance(err, openai.APITimeoutError):
        return ModelError(f"model request timed out: {_cause(err)}", retryable=True)
    if isinstance(err, openai.APIConnectionError):
        return ModelError(f"cannot reach the model server: {_cause(err)}", retryable=True)
    if isinstance(err, openai.APIStatusError):
        return _status_error(err)
    if isinstance(err, openai.APIError):
        # An error event inside a stream: the server gave up mid-answer.
        code = _error_code(err)
        label = f" ({code})" if code else ""
        return ModelError(
            f"model stream failed{label}: {err.message}", code not in FATAL_ERROR_CODES
        )
    return ModelError(f"model call failed: {err}", retryable=False)


def malformed_answer(err: json.JSONDecodeError) -> ModelError:
    """A body that is not JSON (a proxy's error page, a cut connection): worth retrying."""
    return ModelError(f"model server sent malformed JSON: {err}", retryable=True)


def _status_error(err: openai.APIStatusError) -> ModelError:
    status = err.status_code
    code = _error_code(err)
    retryable = (status in RETRYABLE_STATUSES or status >= 500) and code not in FATAL_ERROR_CODES
    label = f"HTTP {status}" + (f" {code}" if code else "")
    return ModelError(
        f"model server answered {label}: {_server_message(err)}",
        retryable,
        retry_after=parse_retry_after(err.response.headers),
    )


def _error_code(err: openai.APIError) -> str | None:
    """The error's ``code``, or its ``type`` (OpenAI puts ``insufficient_quota`` in both)."""
    for value in (err.code, err.type):
        if isinstance(value, str) and value:
            return value
    return None


def _server_message(err: openai.APIStatusError) -> str:
    body = err.body
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return str(body["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return err.message


def _cause(err: BaseException) -> str:
    cause = err.__cause__
    return f"{err} ({type(cause).__name__}: {cause})" if cause else str(err)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        seconds = _float(raw)
        if seconds is None and scale == 1.0:
            seconds = _seconds_until(raw)
        if seconds is not None and math.isfinite(seconds):
            return max(0.0, seconds * scale)
    return None


def _float(raw: str) -> float | None:
    try:
        return float(raw.strip())
    except ValueError:
        return None


def _seconds_until(http_date: str) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC with no claim about the local zone
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - time.time()
