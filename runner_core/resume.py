"""Resume commands and the rules that decide whether one fits a blocked turn."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from runner_core._engine.jsonvalues import validate_json
from runner_core.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidResumeError,
    shorten,
)
from runner_core.events import AgentEventType
from runner_core.policy import validate_metadata
from runner_core.snapshot import AgentTurnSnapshot, Suspension, SuspensionType
from runner_core.status import AgentTurnStatus, move


class ResumeKind(str, Enum):
    """The kinds of resume command."""

    CONTINUE = "CONTINUE"
    APPROVE_TOOL = "APPROVE_TOOL"
    REJECT_TOOL = "REJECT_TOOL"
    APPROVE_TOOLS = "APPROVE_TOOLS"
    REJECT_TOOLS = "REJECT_TOOLS"
    USER_INPUT = "USER_INPUT"
    RETRY = "RETRY"
    CHILD_COMPLETED = "CHILD_COMPLETED"


_SUSPENSION_OF = {
    ResumeKind.APPROVE_TOOL: SuspensionType.TOOL_APPROVAL,
    ResumeKind.REJECT_TOOL: SuspensionType.TOOL_APPROVAL,
    ResumeKind.APPROVE_TOOLS: SuspensionType.TOOL_APPROVAL,
    ResumeKind.REJECT_TOOLS: SuspensionType.TOOL_APPROVAL,
    ResumeKind.USER_INPUT: SuspensionType.USER_INPUT,
    ResumeKind.RETRY: SuspensionType.RETRY,
    ResumeKind.CONTINUE: SuspensionType.RETRY,
    ResumeKind.CHILD_COMPLETED: SuspensionType.CHILD,
}


#: The kinds that answer the tool calls a turn waits to have approved.
APPROVAL_KINDS = frozenset(
    {
        ResumeKind.APPROVE_TOOL,
        ResumeKind.REJECT_TOOL,
        ResumeKind.APPROVE_TOOLS,
        ResumeKind.REJECT_TOOLS,
    }
)
#: What the model hears of a rejection that gave no reason.
DEFAULT_REJECTION = "rejected by reviewer"


@dataclass(frozen=True)
class AgentResumeCommand:
    """How to continue a blocked turn; ``metadata`` is audit data saved on the turn."""

    kind: ResumeKind
    call_id: str | None = None
    child_turn_id: str | None = None
    data: Any = None
    reason: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The calls ``approve_tools`` approves, in the order given.
    call_ids: tuple[str, ...] = ()
    #: The calls ``reject_tools`` rejects, each with what the model hears.
    reasons: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse at once what no turn could store: non-JSON metadata or data, odd types."""
        for name in ("call_id", "child_turn_id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentTypeError(
                    f"{name} must be a string, not {type(value).__name__}", field=name
                )
        if not isinstance(self.reason, str):
            raise InvalidArgumentTypeError(
                f"reason must be a string, not {type(self.reason).__name__}", field="reason"
            )
        if not isinstance(self.reasons, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.reasons.items()
        ):
            raise InvalidArgumentTypeError(
                "reasons must map call ids to reasons (strings)", field="reasons"
            )
        if not all(isinstance(call_id, str) for call_id in self.call_ids):
            raise InvalidArgumentTypeError("call_ids must be strings", field="call_ids")
        object.__setattr__(self, "metadata", validate_metadata(self.metadata))
        if self.data is not None and not isinstance(self.data, str):
            object.__setattr__(self, "data", validate_json(self.data, "data"))

    @classmethod
    def continue_turn(cls) -> AgentResumeCommand:
        """Continue a turn waiting for a retry now, before it is due."""
        return cls(ResumeKind.CONTINUE)

    @classmethod
    def approve_tool(cls, call_id: str) -> AgentResumeCommand:
        """Approve one of the tool calls the turn waits on."""
        return cls(ResumeKind.APPROVE_TOOL, call_id=call_id)

    @classmethod
    def reject_tool(cls, call_id: str, reason: str = "") -> AgentResumeCommand:
        """Reject one of the tool calls; the model hears why and answers without it."""
        return cls(ResumeKind.REJECT_TOOL, call_id=call_id, reason=reason)

    @classmethod
    def approve_tools(cls, call_ids: Iterable[str]) -> AgentResumeCommand:
        """Approve any of the calls the turn waits on; calls left unanswered keep it waiting."""
        if isinstance(call_ids, str | bytes) or not isinstance(call_ids, Iterable):
            raise InvalidArgumentError("call_ids must be a list of call ids", field="call_ids")
        ids = tuple(call_ids)
        if not all(isinstance(call_id, str) for call_id in ids):
            raise InvalidArgumentError("call_ids must be strings", field="call_ids")
        return cls(ResumeKind.APPROVE_TOOLS, call_ids=ids)

    @classmethod
    def reject_tools(cls, reasons: Mapping[str, str]) -> AgentResumeCommand:
        """Reject any of the calls the turn waits on, each with the reason the model hears."""
        if not isinstance(reasons, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in reasons.items()
        ):
            raise InvalidArgumentError(
                "reasons must map call ids to reasons (strings)", field="reasons"
            )
        return cls(ResumeKind.REJECT_TOOLS, reasons=dict(reasons))

    @classmethod
    def user_input(
        cls, data: str | dict[str, Any], call_id: str | None = None
    ) -> AgentResumeCommand:
        """Submit the input (text or form data) a tool asked for."""
        return cls(ResumeKind.USER_INPUT, call_id=call_id, data=data)

    @classmethod
    def retry(cls) -> AgentResumeCommand:
        """Run a scheduled retry (refused before it is due)."""
        return cls(ResumeKind.RETRY)

    @classmethod
    def child_completed(cls, child_turn_id: str) -> AgentResumeCommand:
        """Tell a parent that a child it waits on has ended."""
        return cls(ResumeKind.CHILD_COMPLETED, child_turn_id=child_turn_id)

    def with_metadata(self, **metadata: Any) -> AgentResumeCommand:
        """A copy carrying audit metadata (e.g. ``approver="u-7"``), JSON values only.

        A value that is not JSON raises ``InvalidArgumentError`` naming its key, at once.
        """
        return replace(self, metadata={**self.metadata, **metadata})

    def answers(self) -> list[tuple[str, str | None]]:
        """The approval answers given, in order: (call id, None if approved else the reason)."""
        match self.kind:
            case ResumeKind.APPROVE_TOOL:
                return [(self.call_id or "", None)]
            case ResumeKind.REJECT_TOOL:
                return [(self.call_id or "", self.reason or DEFAULT_REJECTION)]
            case ResumeKind.APPROVE_TOOLS:
                return [(call_id, None) for call_id in self.call_ids]
            case ResumeKind.REJECT_TOOLS:
                return [(k, v or DEFAULT_REJECTION) for k, v in self.reasons.items()]
            case _:
                return []


def approval_calls(suspension: Suspension) -> list[dict[str, Any]]:
    """Every call a TOOL_APPROVAL suspension lists: ``{"call_id", "tool", "arguments"}``.

    A suspension without ``metadata["calls"]`` (one call, as older snapshots have it) is a
    list of one: its correlation id with the metadata's tool and arguments.
    """
    if suspension.type is not SuspensionType.TOOL_APPROVAL:
        return []
    meta = suspension.metadata
    calls = meta.get("calls")
    if isinstance(calls, list):
        return [dict(c) for c in calls if isinstance(c, dict) and "call_id" in c]
    if suspension.correlation_id is None:
        return []
    return [
        {
            "call_id": suspension.correlation_id,
            "tool": meta.get("tool"),
            "arguments": meta.get("arguments", {}),
        }
    ]


def waiting_calls(st: AgentTurnSnapshot) -> list[dict[str, Any]]:
    """The calls a turn waits to have approved that no answer has resolved yet."""
    if st.suspension is None:
        return []
    return [c for c in approval_calls(st.suspension) if _verdict(st, c["call_id"]) is None]


def _verdict(st: AgentTurnSnapshot, call_id: str) -> str | None:
    if call_id in st.approved_call_ids:
        return "approved"
    if call_id in st.rejected_calls:
        return "rejected"
    return None


def check_resume(st: AgentTurnSnapshot, cmd: AgentResumeCommand, now: float) -> None:
    """Raise ``InvalidResumeError`` unless ``cmd`` fits the turn's suspension exactly."""
    if not st.status.is_blocked or st.suspension is None:
        raise InvalidResumeError(st.id, f"turn is {st.status.value}, not waiting")
    expected = _SUSPENSION_OF[cmd.kind]
    if st.suspension.type is not expected:
        raise InvalidResumeError(
            st.id,
            f"{cmd.kind.value} does not fit a turn waiting for {st.suspension.type.value}",
        )
    wanted = st.suspension.correlation_id
    if cmd.kind in APPROVAL_KINDS:
        _check_answers(st, st.suspension, cmd)
    if cmd.kind is ResumeKind.USER_INPUT and cmd.call_id not in (None, wanted):
        raise InvalidResumeError(
            st.id, f"call {shorten(cmd.call_id)} did not ask for input ({shorten(wanted)})"
        )
    due = st.next_runnable_at or 0.0
    if cmd.kind is ResumeKind.RETRY and due > now:
        raise InvalidResumeError(
            st.id, f"retry is not due for {due - now:.3f}s; use continue_turn()"
        )
    if cmd.kind is ResumeKind.USER_INPUT and not isinstance(cmd.data, str | dict):
        raise InvalidResumeError(st.id, "user input must be text or a dict of form data")


def _check_answers(st: AgentTurnSnapshot, suspension: Suspension, cmd: AgentResumeCommand) -> None:
    """Every call answered is listed, unanswered so far, and named once."""
    answers = cmd.answers()
    if not answers:
        raise InvalidResumeError(st.id, f"{cmd.kind.value} names no call")
    listed = [c["call_id"] for c in approval_calls(suspension)]
    named: set[str] = set()
    for call_id, _ in answers:
        if call_id in named:
            raise InvalidResumeError(st.id, f"call {shorten(call_id)} is named twice")
        named.add(call_id)
        if call_id not in listed:
            which = ", ".join(shorten(c) for c in listed)
            what = "the one waiting" if len(listed) == 1 else "one of the calls waiting"
            raise InvalidResumeError(st.id, f"call {shorten(call_id)} is not {what} ({which})")
        if verdict := _verdict(st, call_id):
            raise InvalidResumeError(st.id, f"call {shorten(call_id)} is already {verdict}")


def apply_resume(
    st: AgentTurnSnapshot, cmd: AgentResumeCommand, now: float
) -> tuple[AgentEventType, dict[str, Any]]:
    """Check ``cmd`` (nothing changes if it does not fit), then apply it.

    Returns the event its commit carries: ``TURN_RESUMED`` when the turn is runnable again;
    ``TOOL_APPROVAL_RECORDED`` when it answered some of the calls a turn waits on and the
    turn keeps waiting for the others (same status, same suspension).
    """
    check_resume(st, cmd, now)
    suspension = st.suspension
    assert suspension is not None
    entry: dict[str, Any] = {
        "kind": cmd.kind.value,
        "correlation_id": suspension.correlation_id,
        "at": now,
        "metadata": dict(cmd.metadata),
    }
    approved: list[str] = []
    rejected: dict[str, str] = {}
    if cmd.kind in APPROVAL_KINDS:
        approved, rejected = _record_answers(st, cmd)
        entry["call_ids"] = [call_id for call_id, _ in cmd.answers()]
        if rejected:
            entry["reasons"] = rejected
    elif cmd.kind is ResumeKind.USER_INPUT and suspension.correlation_id is not None:
        st.submitted_inputs[suspension.correlation_id] = cmd.data
    st.resume_log.append(entry)
    if left := waiting_calls(st):
        return AgentEventType.TOOL_APPROVAL_RECORDED, {
            "command": cmd.kind.value,
            "approved": approved,
            "rejected": rejected,
            "waiting": [c["call_id"] for c in left],
        }
    move(st, AgentTurnStatus.RUNNING)
    st.phase = suspension.resume_phase
    st.suspension = None
    st.next_runnable_at = None
    return AgentEventType.TURN_RESUMED, {"command": cmd.kind.value}


def _record_answers(
    st: AgentTurnSnapshot, cmd: AgentResumeCommand
) -> tuple[list[str], dict[str, str]]:
    """Save the approvals and rejections of ``cmd``; returns them."""
    approved: list[str] = []
    rejected: dict[str, str] = {}
    for call_id, reason in cmd.answers():
        if reason is None:
            approved.append(call_id)
        else:
            rejected[call_id] = reason
    st.approved_call_ids.extend(approved)
    st.rejected_calls.update(rejected)
    return approved, rejected
