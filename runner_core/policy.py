"""Execution policy: limits, budget, retries, tool-error strategy, closing templates."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from tenacity import wait_exponential, wait_random

from runner_core.messages import UserMessage


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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


class AgentTurnOptions(_Value):
    """Per-turn options: metadata (JSON values), streaming, an optional policy."""

    metadata: dict[str, Any] = Field(default_factory=dict)
    streaming: bool = False
    policy: AgentExecutionPolicy | None = None

    @field_validator("metadata", mode="before")
    @classmethod
    def _json_only(cls, value: Any) -> Any:
        return validate_metadata(value)


def validate_metadata(value: Any) -> dict[str, Any]:
    """Return a JSON-clean copy of ``value``; ``ValueError`` names the first bad key."""
    if not isinstance(value, dict):
        raise ValueError(f"metadata must be a dict, not {type(value).__name__}")
    return {str(k): _json_value(v, str(k)) for k, v in value.items()}


def _json_value(value: Any, path: str) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"metadata key {path!r}: {value} is not valid JSON")
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"metadata key {path}.{k!r}: keys must be strings")
            out[k] = _json_value(v, f"{path}.{k}")
        return out
    raise ValueError(f"metadata key {path!r}: {type(value).__name__} is not JSON-serializable")


def as_user_message(value: str | UserMessage) -> UserMessage:
    """Copy the input of a turn into a fresh ``UserMessage``."""
    if isinstance(value, UserMessage):
        return value.model_copy(deep=True)
    if isinstance(value, str):
        return UserMessage(value)
    raise TypeError(f"input must be str or UserMessage, not {type(value).__name__}")
