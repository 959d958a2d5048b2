"""Resume commands and the rules that decide whether one fits a blocked turn."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from runner_core.errors import InvalidResumeError
from runner_core.snapshot import AgentTurnSnapshot, SuspensionType
from runner_core.status import AgentTurnStatus, move


class ResumeKind(str, Enum):
    """The kinds of resume command."""

    CONTINUE = "CONTINUE"
    APPROVE_TOOL = "APPROVE_TOOL"
    REJECT_TOOL = "REJECT_TOOL"
    USER_INPUT = "USER_INPUT"
    RETRY = "RETRY"
    CHILD_COMPLETED = "CHILD_COMPLETED"


_SUSPENSION_OF = {
    ResumeKind.APPROVE_TOOL: SuspensionType.TOOL_APPROVAL,
    ResumeKind.REJECT_TOOL: SuspensionType.TOOL_APPROVAL,
    ResumeKind.USER_INPUT: SuspensionType.USER_INPUT,
    ResumeKind.RETRY: SuspensionType.RETRY,
    ResumeKind.CONTINUE: SuspensionType.RETRY,
    ResumeKind.CHILD_COMPLETED: SuspensionType.CHILD,
}


@dataclass(frozen=True)
class AgentResumeCommand:
    """How to continue a blocked turn; ``metadata`` is audit data saved on the turn."""

    kind: ResumeKind
    call_id: str | None = None
    child_turn_id: str | None = None
    data: Any = None
    reason: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def continue_turn(cls) -> AgentResumeCommand:
        """Continue a turn waiting for a retry now, before it is due."""
        return cls(ResumeKind.CONTINUE)

    @classmethod
    def approve_tool(cls, call_id: str) -> AgentResumeCommand:
        """Approve the tool call the turn waits on."""
        return cls(ResumeKind.APPROVE_TOOL, call_id=call_id)

    @classmethod
    def reject_tool(cls, call_id: str, reason: str = "") -> AgentResumeCommand:
        """Reject the tool call; the model hears why and answers without it."""
        return cls(ResumeKind.REJECT_TOOL, call_id=call_id, reason=reason)

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
        """A copy carrying audit metadata (e.g. ``approver="u-7"``)."""
        return replace(self, metadata={**self.metadata, **metadata})


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
    if cmd.kind in (ResumeKind.APPROVE_TOOL, ResumeKind.REJECT_TOOL) and cmd.call_id != wanted:
        raise InvalidResumeError(st.id, f"call {cmd.call_id!r} is not the one waiting ({wanted!r})")
    if cmd.kind is ResumeKind.USER_INPUT and cmd.call_id not in (None, wanted):
        raise InvalidResumeError(st.id, f"call {cmd.call_id!r} did not ask for input ({wanted!r})")
    due = st.next_runnable_at or 0.0
    if cmd.kind is ResumeKind.RETRY and due > now:
        raise InvalidResumeError(
            st.id, f"retry is not due for {due - now:.3f}s; use continue_turn()"
        )
    if cmd.kind is ResumeKind.USER_INPUT and not isinstance(cmd.data, str | dict):
        raise InvalidResumeError(st.id, "user input must be text or a dict of form data")


def apply_resume(st: AgentTurnSnapshot, cmd: AgentResumeCommand, now: float) -> None:
    """Check ``cmd`` (nothing changes if it does not fit), then make the turn runnable."""
    check_resume(st, cmd, now)
    suspension = st.suspension
    assert suspension is not None
    call_id = suspension.correlation_id
    if cmd.kind is ResumeKind.APPROVE_TOOL and call_id is not None:
        st.approved_call_ids.append(call_id)
    elif cmd.kind is ResumeKind.REJECT_TOOL and call_id is not None:
        st.rejected_calls[call_id] = cmd.reason or "rejected by reviewer"
    elif cmd.kind is ResumeKind.USER_INPUT and call_id is not None:
        st.submitted_inputs[call_id] = cmd.data
    st.resume_log.append(
        {
            "kind": cmd.kind.value,
            "correlation_id": call_id,
            "at": now,
            "metadata": dict(cmd.metadata),
        }
    )
    move(st, AgentTurnStatus.RUNNING)
    st.phase = suspension.resume_phase
    st.suspension = None
    st.next_runnable_at = None
