"""How the OpenAI SDK's errors become ``ModelError``: what is retried, and after how long.

Shared by the Chat Completions and the Responses adapters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import openai

from runner_core.models.base import ModelError
from runner_core.models.http_errors import cause, parse_retry_after

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Client-error statuses worth retrying (besides every 5xx)."""

FATAL_ERROR_CODES = frozenset({"insufficient_quota", "context_length_exceeded"})
"""Error codes that no retry can fix, whatever the HTTP status."""


def to_model_error(err: openai.OpenAIError) -> ModelError:
    """Classify an SDK error: transient ones are retryable, the rest are not."""
    if isinstance(err, openai.APITimeoutError):
        return ModelError(f"model request timed out: {cause(err)}", retryable=True)
    if isinstance(err, openai.APIConnectionError):
        return ModelError(f"cannot reach the model server: {cause(err)}", retryable=True)
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
