"""The one place where errors become HTTP status codes and JSON error bodies."""

from __future__ import annotations

import math
from typing import Any

from starlette.responses import JSONResponse

from runner_core.errors import (
    AgentConversationBusyException,
    AgentNotFoundError,
    AgentWorkerError,
    ConcurrentModificationError,
    ConfigurationError,
    InvalidResumeError,
    LeaseLostError,
    TurnLeasedError,
    TurnNotFoundError,
)

#: Our errors and their status codes; the first matching class wins.
STATUS_OF: tuple[tuple[type[BaseException], int], ...] = (
    (TurnNotFoundError, 404),
    (InvalidResumeError, 409),
    (AgentConversationBusyException, 409),
    (ConcurrentModificationError, 409),
    (LeaseLostError, 409),
    (AgentNotFoundError, 422),
    (ConfigurationError, 422),
    (AgentWorkerError, 500),
)

#: The request field an error is about, when there is one.
FIELD_OF: dict[type[BaseException], str] = {
    AgentNotFoundError: "agent",
    AgentConversationBusyException: "conversation_id",
}


_KIND = {
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    422: "ValidationError",
}


class ApiError(Exception):
    """Raised by the HTTP layer itself: a status code, a message and maybe a field."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def unauthorized(message: str) -> ApiError:
    """401: missing or bad credentials."""
    return ApiError(401, message)


def status_of(exc: BaseException) -> int:
    """The status code of an error we know; 500 for anything else."""
    if isinstance(exc, ApiError):
        return exc.status
    for kind, status in STATUS_OF:
        if isinstance(exc, kind):
            return status
    return 500


def error_body(exc: BaseException) -> dict[str, Any]:
    """``{"error": {"type", "message", "field"?}}``; internals of a 500 stay hidden."""
    status = status_of(exc)
    if isinstance(exc, ApiError):
        error: dict[str, Any] = {"type": _KIND.get(status, "Error"), "message": exc.message}
        if exc.field is not None:
            error["field"] = exc.field
        return {"error": error}
    if status == 500:
        return {"error": {"type": "InternalError", "message": "internal error"}}
    error = {"type": type(exc).__name__, "message": str(exc)}
    field = next((f for k, f in FIELD_OF.items() if isinstance(exc, k)), None)
    if field is not None:
        error["field"] = field
    return {"error": error}


def error_response(exc: BaseException) -> JSONResponse:
    """The JSON response for ``exc``; a turn leased by a worker says when to try again."""
    headers = {}
    if isinstance(exc, TurnLeasedError):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    return JSONResponse(error_body(exc), status_code=status_of(exc), headers=headers)
