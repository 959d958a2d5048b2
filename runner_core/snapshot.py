"""The persisted form of a turn: ``AgentTurnSnapshot`` and the values it holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    ValidationError,
    field_serializer,
    field_validator,
)

from runner_core.errors import SnapshotCorruptedError
from runner_core.messages import Message, ToolCall
from runner_core.models.base import Usage
from runner_core.planning import TaskPlan
from runner_core.policy import AgentExecutionPolicy
from runner_core.status import AgentTurnPhase, AgentTurnStatus

SCHEMA_VERSION = 2
"""The snapshot schema this code writes; older ones it reads are migrated on load."""


class SuspensionType(str, Enum):
    """Why a blocked turn waits."""

    #: A tool asked for user input (a form).
    USER_INPUT = "USER_INPUT"
    #: A tool call needs approval.
    TOOL_APPROVAL = "TOOL_APPROVAL"
    #: Child turns are running.
    CHILD = "CHILD"
    #: A retry is scheduled.
    RETRY = "RETRY"


class Suspension(BaseModel):
    """What a blocked turn waits for and how it continues."""

    model_config = ConfigDict(frozen=True)

    type: SuspensionType
    #: The call id (approval, input) or child turn id the resume must name.
    correlation_id: str | None = None
    message: str = ""
    resume_phase: AgentTurnPhase = AgentTurnPhase.MODEL
    #: Details for whoever resumes: tool name and arguments, a form schema, child ids.
    metadata: dict[str, Any] = Field(default_factory=dict)


class ErrorInfo(BaseModel):
    """An error as it survives a snapshot: its type name and message."""

    model_config = ConfigDict(frozen=True)

    type: str
    message: str
    retryable: bool = False

    @classmethod
    def of(cls, error: BaseException) -> ErrorInfo:
        """Describe a live exception."""
        return cls(
            type=type(error).__name__,
            message=str(error),
            retryable=bool(getattr(error, "retryable", False)),
        )


class LeaseInfo(BaseModel):
    """Who holds a turn: worker id, random lease id and expiry (store clock, seconds)."""

    model_config = ConfigDict(frozen=True)

    owner: str
    lease_id: str
    until: float


class ChildResult(BaseModel):
    """What an ended child leaves in its parent's inbox (written by the child's commit)."""

    model_config = ConfigDict(frozen=True)

    status: AgentTurnStatus
    final_output: str | None = None
    terminal_reason: str | None = None
    usage: Usage = Usage()
    tool_call_count: int = 0

    @classmethod
    def of(cls, child: AgentTurnSnapshot) -> ChildResult:
        """The result of an ended child."""
        return cls(
            status=child.status,
            final_output=child.final_output,
            terminal_reason=child.terminal_reason,
            usage=child.usage,
            tool_call_count=child.tool_call_count,
        )


class AgentTurnSnapshot(BaseModel):
    """Everything needed to resume a turn in a cold process; no live objects."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    schema_version: int = SCHEMA_VERSION
    id: str
    version: int = -1
    agent_id: str
    agent_version: str
    status: AgentTurnStatus = AgentTurnStatus.READY
    phase: AgentTurnPhase = AgentTurnPhase.MODEL
    parent_turn_id: str | None = None
    root_turn_id: str
    conversation_id: str | None = None
    messages: list[Message] = Field(default_factory=list)
    #: Messages attached from earlier history (not new in this turn).
    history_count: int = 0
    pending_tool_calls: list[ToolCall] = Field(default_factory=list)
    suspension: Suspension | None = None
    next_runnable_at: float | None = None
    iteration_count: int = 0
    step_count: int = 0
    tool_call_count: int = 0
    retry_count: int = 0
    usage: Usage = Usage()
    final_output: str | None = None
    #: The validated final output's JSON form, for an agent with an ``output_type``.
    output: Any = None
    #: Answers refused by the output type's validation (bounded by ``output_retries``).
    output_retry_count: int = 0
    error: ErrorInfo | None = None
    terminal_reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    streaming: bool = False
    policy: AgentExecutionPolicy | None = None
    created_at: float
    updated_at: float
    cancel_requested: bool = False
    cancel_reason: str | None = None
    lease: LeaseInfo | None = None
    approved_call_ids: list[str] = Field(default_factory=list)
    rejected_calls: dict[str, str] = Field(default_factory=dict)
    submitted_inputs: dict[str, Any] = Field(default_factory=dict)
    resume_log: list[dict[str, Any]] = Field(default_factory=list)
    #: Schema fingerprints of the server tools the turn planned calls to, by tool name.
    tool_fingerprints: dict[str, str] = Field(default_factory=dict)
    #: How many new messages the conversation memory has already received.
    projected_count: int = 0
    #: The task plan of a planning agent.
    task_plan: TaskPlan | None = None
    #: 0 for a root turn, parent's depth + 1 for a child.
    depth: int = 0
    #: Store-owned: results of ended children this turn waits on, by child id.
    child_results: dict[str, ChildResult] = Field(default_factory=dict)
    #: Store-owned: the sequence number of the turn's last committed event.
    event_sequence: int = 0

    if not TYPE_CHECKING:

        def __setattr__(self, name: str, value: Any) -> None:
            # the engine sets fields of the turn's state several times a step; a field of
            # this model (not frozen, not validated on assignment) is set as pydantic sets
            # it, without its generic path
            if name in _FIELD_NAMES:
                self.__dict__[name] = value
                self.__pydantic_fields_set__.add(name)
            else:
                super().__setattr__(name, value)

    @field_serializer("policy")
    def _policy_as_set(
        self, policy: AgentExecutionPolicy | None, info: SerializationInfo
    ) -> dict[str, Any] | None:
        """Only the fields the caller set, so a reader's ``model_fields_set`` is theirs."""
        if policy is None:
            return None
        return policy.model_dump(mode=info.mode, exclude_unset=True)

    @field_validator("policy", mode="before")
    @classmethod
    def _policy_read(cls, value: Any) -> Any:
        return stored_policy(value)

    def all_children_reported(self) -> bool:
        """A WAITING_FOR_CHILD turn whose awaited children have all ended."""
        if self.status is not AgentTurnStatus.WAITING_FOR_CHILD or self.suspension is None:
            return False
        waiting = awaited_children(self)
        return bool(waiting) and all(c in self.child_results for c in waiting)

    def copy_state(self, *, with_messages: bool = True, **fields: Any) -> AgentTurnSnapshot:
        """An isolated copy: containers copied, immutable values (messages) shared.

        ``fields`` replace values of the copy (not validated: the store's own values).
        Built as pydantic's ``model_copy(update=...)`` builds a model without extra fields
        or private attributes, minus its generic path: a commit of the in-memory store
        makes one.
        """
        d = self.__dict__
        values = d.copy()
        values["messages"] = d["messages"][:] if with_messages else []
        values["pending_tool_calls"] = d["pending_tool_calls"][:]
        metadata, inputs, log, output = (
            d["metadata"],
            d["submitted_inputs"],
            d["resume_log"],
            d["output"],
        )
        values["metadata"] = _deep_json_copy(metadata) if metadata else {}
        if isinstance(output, dict | list):
            values["output"] = _copy_json(output)
        values["approved_call_ids"] = d["approved_call_ids"][:]
        values["rejected_calls"] = d["rejected_calls"].copy()
        values["submitted_inputs"] = _deep_json_copy(inputs) if inputs else {}
        values["resume_log"] = [_deep_json_copy(entry) for entry in log] if log else []
        suspension, plan = d["suspension"], d["task_plan"]
        if suspension is not None:
            values["suspension"] = copy_suspension(suspension)
        if plan is not None:
            values["task_plan"] = plan.model_copy(deep=True)
        values["child_results"] = d["child_results"].copy()
        values["tool_fingerprints"] = d["tool_fingerprints"].copy()
        set_fields = self.__pydantic_fields_set__ | _COPIED
        if fields:
            values.update(fields)
            set_fields.update(fields)
        copy = _new(type(self))
        _set(copy, "__dict__", values)
        _set(copy, "__pydantic_extra__", None)
        _set(copy, "__pydantic_fields_set__", set_fields)
        _set(copy, "__pydantic_private__", None)
        return copy


_FIELD_NAMES = frozenset(AgentTurnSnapshot.model_fields)
_new = object.__new__
_set = object.__setattr__
#: The fields ``copy_state`` copies (counted as set in the copy, as ``model_copy`` counts
#: the fields it is given).
_COPIED = frozenset(
    {
        "messages",
        "pending_tool_calls",
        "metadata",
        "output",
        "approved_call_ids",
        "rejected_calls",
        "submitted_inputs",
        "resume_log",
        "suspension",
        "task_plan",
        "child_results",
        "tool_fingerprints",
    }
)


def stored_policy(value: Any) -> Any:
    """A stored per-turn policy as its caller set it.

    Snapshots store only the fields the caller set. Earlier releases stored every field,
    so a stored policy holding all of them is such a record: there a field equal to its
    default counts as not set (a 30 s ``lease_seconds`` no longer outbids the worker's
    lease), the rest as set. The values read are the same either way.
    """
    if not isinstance(value, dict) or set(value) != set(AgentExecutionPolicy.model_fields):
        return value
    defaults = AgentExecutionPolicy().model_dump(mode="json")
    return {k: v for k, v in value.items() if _plain(v) != defaults[k]}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def awaited_children(snapshot: AgentTurnSnapshot) -> list[str]:
    """The child ids a WAITING_FOR_CHILD turn waits on."""
    s = snapshot.suspension
    if snapshot.status is not AgentTurnStatus.WAITING_FOR_CHILD or s is None:
        return []
    ids = s.metadata.get("child_turn_ids")
    if isinstance(ids, list):
        return [str(i) for i in ids]
    return [s.correlation_id] if s.correlation_id else []


def copy_suspension(s: Suspension | None) -> Suspension | None:
    """A copy whose metadata (a pending call's arguments, child ids) is not shared."""
    if s is None or not s.metadata:
        return s
    return s.model_copy(update={"metadata": _deep_json_copy(s.metadata)})


def _deep_json_copy(value: dict[str, Any]) -> dict[str, Any]:
    if not value:
        return {}
    return {k: _copy_json(v) for k, v in value.items()}


def _copy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


def load_snapshot(
    data: str | bytes | dict[str, Any], turn_id: str | None = None
) -> AgentTurnSnapshot:
    """Parse a stored snapshot; ``SnapshotCorruptedError`` if it is unreadable or unknown."""
    if not isinstance(data, dict):
        try:
            data = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SnapshotCorruptedError(turn_id, f"not JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise SnapshotCorruptedError(turn_id, "not a JSON object")
    data = _migrated(data, turn_id)
    try:
        return AgentTurnSnapshot.model_validate(data)
    except ValidationError as exc:
        raise SnapshotCorruptedError(turn_id, _first_error(exc)) from exc


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added only optional fields (provider data on messages and calls)."""
    return {**data, "schema_version": 2}


_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_v1}
"""For each older schema version, the step that lifts a record to the next one."""

READABLE_VERSIONS = frozenset({*_MIGRATIONS, SCHEMA_VERSION})
"""Every schema version ``load_snapshot`` reads (the Redis scripts accept the same)."""


def _migrated(data: dict[str, Any], turn_id: str | None) -> dict[str, Any]:
    """The record lifted to ``SCHEMA_VERSION``; ``SnapshotCorruptedError`` if unknown."""
    version = data.get("schema_version")
    while type(version) is int and version in _MIGRATIONS:
        data = _MIGRATIONS[version](data)
        version = data["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        raise SnapshotCorruptedError(turn_id, f"unknown schema_version {version!r}")
    return data


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "record"
    return f"{where}: {first.get('msg', 'invalid')}"
