"""Execution policy: limits, budget, retries, tool-error strategy, closing templates."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from tenacity import wait_exponential, wait_random

from runner_core._engine.jsonvalues import validate_json
from runner_core.errors import (
    AgentWorkerError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    PayloadTooLargeError,
    shorten,
)
from runner_core.messages import UserMessage


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, /, **data: Any) -> None:
        """Validate ``data``; a bad value raises our typed error naming its field.

        Only construction goes through here: stored data is read with ``model_validate``,
        which keeps raising what the store wraps (``SnapshotCorruptedError``).
        """
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise argument_error(type(self).__name__, exc) from exc


#: pydantic error types that mean "an argument of the wrong type" (``TypeError``).
_TYPE_ERRORS = frozenset({"extra_forbidden", "is_instance_of", "model_type", "dataclass_type"})


def argument_error(owner: str, exc: ValidationError) -> AgentWorkerError:
    """Our typed error for pydantic's first complaint, naming the field it is about."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or None
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, InvalidArgumentError | InvalidArgumentTypeError):
        return _nested(owner, field, cause)
    if isinstance(cause, AgentWorkerError):
        return cause
    kind = first["type"]
    where = f"{owner}.{field}" if field else owner
    message = f"{where}: {first['msg']} (got {shorten(first.get('input'))})"
    if kind in _TYPE_ERRORS or kind.endswith("_type"):
        return InvalidArgumentTypeError(message, field=field)
    return InvalidArgumentError(message, field=field)


def _nested(
    owner: str, field: str | None, cause: InvalidArgumentError | InvalidArgumentTypeError
) -> AgentWorkerError:
    """A nested value's error, its field given from the outer value (``budget.max_...``)."""
    if field is None or cause.field is None or cause.field == field:
        return cause
    return type(cause)(f"{owner}.{field}: {cause}", field=f"{field}.{cause.field}")


class AgentLimits(_Value):
    """How large a turn's data may be, in bytes (UTF-8 text, compact JSON).

    Over a limit on the way in (input, history, metadata, resume data): ``PayloadTooLargeError``
    and nothing is stored. A tool result or model answer over its limit is cut with a
    marker the model can read (``"truncate"``) or fails the turn (``"fail"``).
    """

    #: The input of a new turn.
    max_input_bytes: int = Field(default=1_048_576, gt=0)
    #: The messages of a new turn's ``history=``: how many, and their bytes together.
    max_history_messages: int = Field(default=1_000, gt=0)
    max_history_bytes: int = Field(default=8_388_608, gt=0)
    #: The metadata of a new turn or of a resume command, and a cancel or reject reason.
    max_metadata_bytes: int = Field(default=65_536, gt=0)
    #: The data of a resume command (a user-input answer).
    max_resume_data_bytes: int = Field(default=1_048_576, gt=0)
    #: One tool result, as the model reads it.
    max_tool_result_bytes: int = Field(default=1_048_576, gt=0)
    #: One model answer: its text, tool calls and provider data, as stored.
    max_model_answer_bytes: int = Field(default=1_048_576, gt=0)
    #: A tool result or model answer over its limit: ``"truncate"`` cuts its text and says
    #: so at the end; ``"fail"`` makes it an error (a tool's goes by the tool error
    #: strategy, a model's fails the turn).
    oversized_output: Literal["truncate", "fail"] = "truncate"


class AgentBudget(_Value):
    """Limits on a turn (a root turn's limits bound its whole tree); ``None`` is unlimited."""

    #: Wall-clock seconds since creation, waiting time included.
    max_duration_seconds: float | None = None
    #: Input (prompt) tokens over all model calls.
    max_input_tokens: int | None = None
    #: Output (completion) tokens over all model calls.
    max_output_tokens: int | None = None
    #: Input plus output tokens.
    max_total_tokens: int | None = None
    #: Tool calls executed (rejected, denied and built-in calls do not count).
    max_tool_calls: int | None = None


class RetryPolicy(_Value):
    """Automatic retries of retryable model and tool failures (RETRY_SCHEDULED)."""

    #: Retries over the whole turn; 0 means a retryable failure fails the turn.
    max_retries: int = Field(default=0, ge=0)
    #: Delay before the first retry, in seconds.
    initial_delay: float = Field(default=1.0, ge=0)
    #: Upper bound of any delay, in seconds.
    max_delay: float = Field(default=60.0, ge=0)
    #: Growth factor between retries.
    multiplier: float = Field(default=2.0, ge=1)
    #: Random extra delay of up to this many seconds (0: none).
    jitter: float = Field(default=0.0, ge=0)

    def delay(self, attempt: int, *, at_least: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based).

        ``min(max_delay, initial * multiplier**(attempt-1))`` plus jitter, computed by
        tenacity's wait strategies; ``at_least`` (a server's Retry-After) raises the floor.
        """
        wait = wait_exponential(
            multiplier=self.initial_delay, exp_base=self.multiplier, max=self.max_delay
        )
        seconds = float(wait(_Attempt(attempt)))  # type: ignore[arg-type]
        if self.jitter:
            seconds += float(wait_random(0, self.jitter)(_Attempt(attempt)))  # type: ignore[arg-type]
        return max(seconds, at_least or 0.0)


class _Attempt:
    """The one field of tenacity's RetryCallState its wait strategies read."""

    def __init__(self, attempt_number: int) -> None:
        self.attempt_number = attempt_number
        self.seconds_since_start = 0.0
        self.outcome = None


class ToolErrorStrategy(str, Enum):
    """What an exception raised by a tool does (``ToolError`` always goes to the model)."""

    #: The turn fails (or retries, for a retryable error).
    FAIL_TURN = "FAIL_TURN"
    #: The error goes back to the model as an error ToolMessage with the same call id.
    RETURN_ERROR_TO_MODEL = "RETURN_ERROR_TO_MODEL"


class AgentExecutionPolicy(_Value):
    """How a turn is run; a per-turn policy in the options is saved in the snapshot."""

    max_steps: int = Field(default=1000, ge=1)
    budget: AgentBudget = AgentBudget()
    retry: RetryPolicy = RetryPolicy()
    tool_error_strategy: ToolErrorStrategy = ToolErrorStrategy.FAIL_TURN
    lease_seconds: float = Field(default=30.0, gt=0)
    interrupted_tool_message_template: str = "Tool call was not completed: {reason}"
    interrupted_turn_message_template: str = "The previous turn ended before completion: {reason}"
    cancellation_reason: str = "turn cancelled by caller"
    #: How many calls of one model response run at once (1: one after another; 0: all).
    max_tool_concurrency: int = Field(default=1, ge=0)
    #: Seconds a tool call may run unless its tool says otherwise (``None``: unbounded).
    tool_timeout_seconds: float | None = Field(default=None, gt=0)
    #: What a call past its timeout does: ``"error"`` tells the model, ``"retry"`` schedules
    #: a retry, ``"fail"`` fails the turn (a tool's own ``timeout_behavior`` wins).
    tool_timeout_behavior: Literal["error", "retry", "fail"] = "error"
    #: Sizes of inputs, metadata, resume data, tool results and model answers.
    limits: AgentLimits = AgentLimits()


class AgentTurnOptions(_Value):
    """Per-turn options: metadata (JSON values), streaming, an optional policy."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    streaming: bool = False
    policy: AgentExecutionPolicy | None = None

    @field_validator("metadata", mode="before")
    @classmethod
    def _json_only(cls, value: Any) -> Any:
        return validate_metadata(value)


def validate_metadata(value: Any, field: str = "metadata") -> dict[str, Any]:
    """Return a JSON-clean copy of ``value``; ``InvalidArgumentError`` names the bad key."""
    if not isinstance(value, dict):
        raise InvalidArgumentTypeError(
            f"{field} must be a dict, not {type(value).__name__}", field=field
        )
    cleaned: dict[str, Any] = validate_json(value, field)
    return cleaned


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (what the stores keep)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def text_size(text: str, limit: int) -> int:
    """UTF-8 bytes of ``text``, without encoding it when its length alone decides."""
    if len(text) > limit or 4 * len(text) <= limit:
        return len(text)  # a char is 1 to 4 bytes: either way the answer is the same
    return len(text.encode())


def check_size(what: str, size: int, limit: int, field: str) -> None:
    """``PayloadTooLargeError`` naming ``field`` and ``limit`` when ``size`` is over it."""
    if size > limit:
        raise PayloadTooLargeError(what, size, limit, field)


def as_user_message(value: str | UserMessage, limit: int | None = None) -> UserMessage:
    """Copy the input of a turn into a fresh ``UserMessage`` (at most ``limit`` bytes)."""
    if isinstance(value, UserMessage):
        if limit is not None:
            size = text_size(value.content, limit) if isinstance(value.content, str) else None
            check_size("input", size or len(value.model_dump_json()), limit, "input")
        return value.model_copy(deep=True)
    if isinstance(value, str):
        if limit is not None:
            check_size("input", text_size(value, limit), limit, "input")
        return UserMessage(value)
    raise InvalidArgumentTypeError(
        f"input must be str or UserMessage, not {type(value).__name__}", field="input"
    )
