"""Request bodies (validated, 422 naming the field) and the JSON summary of a turn."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentworker.http.errors import ApiError
from runner_core import AgentResumeCommand, AgentTurnSnapshot, AgentTurnStatus, SuspensionType
from runner_core.errors import PayloadTooLargeError, shorten
from runner_core.resume import waiting_calls

Body = TypeVar("Body", bound=BaseModel)

#: A client-chosen turn id: letters, digits, ``-`` and ``_`` (no braces: ids become keys).
TURN_ID_PATTERN = r"^[A-Za-z0-9_-]{8,64}$"
#: The ``target`` of a signed body (``"POST /turns/x/resume"``, see auth.py).
TARGET_DOC = "Signed calls only: the request's method and path, e.g. 'POST /turns'."
#: The most calls one ``approve_tools`` or ``reject_tools`` body may answer.
MAX_CALLS_ANSWERED = 100
CallId = Annotated[str, Field(min_length=1, max_length=256)]
Reason = Annotated[str, Field(max_length=10_000)]


@dataclass(frozen=True)
class BodyLimits:
    """Sizes a body's fields may have (``ApiError(422)`` beyond them)."""

    max_input_chars: int = 200_000
    max_metadata_bytes: int = 16_384


class WebhookTarget(BaseModel):
    """An outbound webhook given on start: where to, and for which events."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", max_length=2000)
    events: list[str] | None = None


class StartBody(BaseModel):
    """``POST /turns``."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1)
    input: str
    conversation_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    streaming: bool = False
    #: Choose the turn's id: a retried start with the same id never makes a second turn.
    turn_id: str | None = Field(default=None, pattern=TURN_ID_PATTERN)
    #: Outbound webhooks of this turn only (docs/webhooks.md).
    webhooks: list[WebhookTarget] = Field(default_factory=list, max_length=5)
    target: str | None = Field(default=None, description=TARGET_DOC)

    def check(self, limits: BodyLimits) -> None:
        """422 when the input or the metadata is larger than allowed."""
        if len(self.input) > limits.max_input_chars:
            size, limit = len(self.input), limits.max_input_chars
            raise PayloadTooLargeError("input", size, limit, "input", unit="characters")
        _check_metadata(self.metadata, limits)


class ResumeBody(BaseModel):
    """``POST /turns/{id}/resume``: one of the resume commands (docs/http.md)."""

    model_config = ConfigDict(extra="forbid")

    command: Literal[
        "approve_tool",
        "reject_tool",
        "approve_tools",
        "reject_tools",
        "user_input",
        "continue_turn",
        "retry",
    ]
    call_id: str | None = None
    reason: str = Field(default="", max_length=10_000)
    #: ``approve_tools``: the waiting calls to approve.
    call_ids: list[CallId] | None = Field(default=None, min_length=1, max_length=MAX_CALLS_ANSWERED)
    #: ``reject_tools``: the waiting calls to reject, each with what the model hears.
    reasons: dict[CallId, Reason] | None = Field(
        default=None, min_length=1, max_length=MAX_CALLS_ANSWERED
    )
    data: str | dict[str, Any] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    target: str | None = Field(default=None, description=TARGET_DOC)

    def check(self, limits: BodyLimits) -> None:
        """422 when the data or the metadata is larger than allowed."""
        _check_metadata(self.metadata, limits)
        if self.data is not None:
            size = len(json.dumps(self.data, separators=(",", ":")).encode())
            if size > limits.max_input_chars:
                raise PayloadTooLargeError("data", size, limits.max_input_chars, "data")

    def to_command(self) -> AgentResumeCommand:
        """The runner's command; 422 when a field the command needs is missing."""
        self._check_fields()
        match self.command:
            case "approve_tool":
                command = AgentResumeCommand.approve_tool(self.call_id or "")
            case "reject_tool":
                command = AgentResumeCommand.reject_tool(self.call_id or "", self.reason)
            case "approve_tools":
                command = AgentResumeCommand.approve_tools(self.call_ids or [])
            case "reject_tools":
                command = AgentResumeCommand.reject_tools(self.reasons or {})
            case "user_input":
                if self.data is None:
                    raise ApiError(422, "user_input needs data (text or an object)", "data")
                command = AgentResumeCommand.user_input(self.data, self.call_id)
            case "continue_turn":
                command = AgentResumeCommand.continue_turn()
            case "retry":
                command = AgentResumeCommand.retry()
        return command.with_metadata(**self.metadata) if self.metadata else command

    def _check_fields(self) -> None:
        """422 naming the field a command needs and lacks, or takes and must not get."""
        if self.command in ("approve_tool", "reject_tool") and not self.call_id:
            raise ApiError(422, f"{self.command} needs the call id", field="call_id")
        needs = {"approve_tools": "call_ids", "reject_tools": "reasons"}
        for command, name in needs.items():
            given = getattr(self, name) is not None
            if self.command == command and not given:
                raise ApiError(422, f"{command} needs {name}", field=name)
            if self.command != command and given:
                raise ApiError(422, f"only {command} takes {name}", field=name)


class CancelBody(BaseModel):
    """``POST /turns/{id}/cancel`` (the body may be empty)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=10_000)
    target: str | None = Field(default=None, description=TARGET_DOC)


def _check_metadata(metadata: dict[str, Any], limits: BodyLimits) -> None:
    size = len(json.dumps(metadata, separators=(",", ":")).encode())
    if size > limits.max_metadata_bytes:
        raise PayloadTooLargeError("metadata", size, limits.max_metadata_bytes, "metadata")


class _NotFinite(Exception):  # noqa: N818 - internal signal, never leaves this module
    """``NaN`` or an infinity met while parsing a body."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _no_constants(text: str) -> Any:
    raise _NotFinite(text)


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotFinite(text)
    return value


_FLAG = object()
"""Stands in for a number that is not finite while finding the field it is in."""


def _flagged(text: str) -> Any:
    value = float(text)
    return _FLAG if value in (float("inf"), float("-inf")) else value


def _holds_flag(value: Any) -> bool:
    """Whether ``_FLAG`` is in ``value``, at any depth (no recursion: a body may nest deep)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if item is _FLAG:
            return True
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _not_finite(raw: bytes, text: str) -> ApiError:
    """422 naming the top-level field that holds ``NaN`` or an infinity."""
    try:
        data = json.loads(raw, parse_constant=lambda _: _FLAG, parse_float=_flagged)
    except RecursionError:
        data = None  # the rest is too deep to read: the message says what, not where
    fields = data if isinstance(data, dict) else {}
    field = next((str(k) for k, v in fields.items() if _holds_flag(v)), None)
    where = f"{field}: " if field else ""
    message = f"{where}{shorten(text)} is not valid JSON (numbers must be finite)"
    return ApiError(422, message, field)


def parse(model: type[Body], raw: bytes, *, empty_ok: bool = False) -> Body:
    """Validate a JSON body; ``ApiError(422)`` naming the first bad field.

    ``NaN`` and ``Infinity`` are refused: they are not JSON, and nothing downstream takes them.
    """
    if not raw.strip() and empty_ok:
        return model()
    try:
        data = json.loads(raw, parse_constant=_no_constants, parse_float=_finite)
    except _NotFinite as exc:
        raise _not_finite(raw, exc.text) from None
    except ValueError:
        raise ApiError(422, "the body is not valid JSON") from None
    except RecursionError:
        raise ApiError(422, "the body is not valid JSON here: it nests too deeply") from None
    if not isinstance(data, dict):
        raise ApiError(422, "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        raise ApiError(422, f"{field or 'body'}: {first['msg']}", field) from None


def turn_summary(s: AgentTurnSnapshot, children: list[str] | None = None) -> dict[str, Any]:
    """What a caller sees of a turn: where it stands, what it waits for, counters, result."""
    return {
        "id": s.id,
        "root_turn_id": s.root_turn_id,
        "parent_turn_id": s.parent_turn_id,
        "agent_id": s.agent_id,
        "agent_version": s.agent_version,
        "conversation_id": s.conversation_id,
        "status": s.status.value,
        "phase": s.phase.value,
        "version": s.version,
        "suspension": _suspension(s),
        "next_runnable_at": s.next_runnable_at,
        "counters": {
            "iterations": s.iteration_count,
            "steps": s.step_count,
            "tool_calls": s.tool_call_count,
            "retries": s.retry_count,
        },
        "usage": {
            "input_tokens": s.usage.input_tokens,
            "output_tokens": s.usage.output_tokens,
            "total_tokens": s.usage.total_tokens,
            "cached_input_tokens": s.usage.cached_input_tokens,
            "reasoning_tokens": s.usage.reasoning_tokens,
        },
        "progress": _progress(s),
        "final_output": s.final_output if s.status is AgentTurnStatus.COMPLETED else None,
        "output": s.output if s.status is AgentTurnStatus.COMPLETED else None,
        "error": s.error.model_dump(mode="json") if s.error else None,
        "terminal_reason": s.terminal_reason,
        "cancel_requested": s.cancel_requested,
        "metadata": s.metadata,
        "children": children or [],
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    }


def _suspension(s: AgentTurnSnapshot) -> dict[str, Any] | None:
    """The suspension; waiting for approval, with ``waiting_calls``: the calls unanswered."""
    if s.suspension is None:
        return None
    shown = s.suspension.model_dump(mode="json")
    if s.suspension.type is SuspensionType.TOOL_APPROVAL:
        shown["waiting_calls"] = waiting_calls(s)
    return shown


def _progress(s: AgentTurnSnapshot) -> dict[str, Any] | None:
    plan = s.task_plan
    if plan is None:
        return None
    tasks = [t.model_dump(mode="json") for t in plan.tasks]
    done = sum(1 for t in tasks if t["status"] == "COMPLETED")
    return {"goal": plan.goal, "completed": done, "total": len(tasks), "tasks": tasks}
