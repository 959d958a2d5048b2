"""The one place where errors become HTTP status codes and JSON error bodies."""

from __future__ import annotations

import math
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.responses import JSONResponse

from runner_core.errors import (
    AgentConversationBusyException,
    AgentNotFoundError,
    AgentWorkerError,
    ConcurrentModificationError,
    ConfigurationError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidResumeError,
    LeaseLostError,
    PayloadTooLargeError,
    StoreUnavailableError,
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
    (InvalidArgumentError, 422),
    (InvalidArgumentTypeError, 422),
    (StoreUnavailableError, 503),
    (AgentWorkerError, 500),
)

#: The request field an error is about, when there is one.
FIELD_OF: dict[type[BaseException], str] = {
    AgentNotFoundError: "agent",
    AgentConversationBusyException: "conversation_id",
}


_KIND = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    408: "RequestTimeout",
    409: "Conflict",
    413: "PayloadTooLarge",
    422: "ValidationError",
    429: "TooManyRequests",
    503: "Unavailable",
}

#: Seconds a 503 asks the caller to wait before trying again.
RETRY_AFTER_UNAVAILABLE = 5


class ApiError(AgentWorkerError):
    """Raised by the HTTP layer itself: a status code, a message and maybe a field."""

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        #: Seconds the caller should wait before trying again (``Retry-After``).
        self.retry_after = retry_after


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least one."""
    return str(max(1, math.ceil(seconds)))


def unauthorized(message: str) -> ApiError:
    """401: missing or bad credentials."""
    return ApiError(401, message)


def status_of(exc: BaseException) -> int:
    """The status code of an error we know; 500 for anything else."""
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, PayloadTooLargeError):
        return 422 if exc.field is not None else 413
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        return 503
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
    if status == 503:
        # The store's URL stays in the server log.
        return {"error": {"type": "StoreUnavailableError", "message": "the store is unavailable"}}
    error = {"type": type(exc).__name__, "message": str(exc)}
    field = next((f for k, f in FIELD_OF.items() if isinstance(exc, k)), None)
    if isinstance(exc, PayloadTooLargeError | InvalidArgumentError | InvalidArgumentTypeError):
        field = exc.field
    if field is not None:
        error["field"] = field
    return {"error": error}


def error_response(exc: BaseException) -> JSONResponse:
    """The JSON response for ``exc``; a turn leased by a worker says when to try again."""
    headers = {}
    if isinstance(exc, TurnLeasedError):
        headers["Retry-After"] = retry_after(exc.retry_after)
    if isinstance(exc, ApiError) and exc.retry_after is not None:
        headers["Retry-After"] = retry_after(exc.retry_after)
    if status_of(exc) == 503:
        headers["Retry-After"] = str(RETRY_AFTER_UNAVAILABLE)
    return JSONResponse(error_body(exc), status_code=status_of(exc), headers=headers)
