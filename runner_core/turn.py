"""``AgentTurn``: a live turn (its state plus its agent) and ``AgentStepResult``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from runner_core.errors import RestoredError
from runner_core.messages import AiMessage, Message, SystemMessage, ToolCall, ToolMessage
from runner_core.models.base import ModelResponse, Usage
from runner_core.planning import TaskPlan, TaskStatus
from runner_core.snapshot import AgentTurnSnapshot, Suspension, copy_suspension
from runner_core.status import AgentTurnPhase, AgentTurnStatus

if TYPE_CHECKING:
    from runner_core._engine.leases import HeldLease
    from runner_core.agent import Agent
    from runner_core.events import AgentEvent


class AgentTurn:
    """One input to one final result. Read it; change it only through the runner."""

    def __init__(self, state: AgentTurnSnapshot, agent: Agent) -> None:
        self.state = state
        self.agent = agent
        self.live_error: BaseException | None = None
        self.held_lease: HeldLease | None = None
        #: Events about changes not committed yet (the next commit writes them, before its
        #: SNAPSHOT_SAVED). Filled only by ``TurnKernel.emit``.
        self.pending_events: list[AgentEvent] = []
        #: The next commit's consequences (written after its SNAPSHOT_SAVED); ``emit`` too.
        self.pending_after_save: list[AgentEvent] = []
        #: Marks a direct runner's provisional events (a worker uses its lease id).
        self.attempt_id: str | None = None
        #: Provisional events went out since the last commit (a buffering listener, such
        #: as the Redis bridge, is flushed before the next commit so they stream first).
        self.unflushed = False
        #: Whether this object's steps are traced (``_engine.tracing``; None: not asked).
        self.trace: str | None = None
        #: ``time.monotonic()`` by which the running step must be done (None: no limit).
        self.step_deadline: float | None = None
        #: ``time.monotonic()`` until which the last commit's reply (cancel flag, version,
        #: lease) stands in for the read a step makes before its first side effect.
        self.checked_until = 0.0
        #: Set while a step runs (its commits are the readings the next step may trust).
        self.stepping = False
        #: A model's answer waits for its commit, which is refused over a cancel request
        #: the turn has not seen: that answer is never recorded.
        self.answer_unsaved = False
        self._call_ids: tuple[AgentTurnSnapshot, set[str]] | None = None

    def used_call_ids(self) -> set[str]:
        """Every tool call id in the history (built once per state object; callers add)."""
        st = self.state
        if self._call_ids is None or self._call_ids[0] is not st:
            ids = {c.id for m in st.messages if isinstance(m, AiMessage) for c in m.tool_calls}
            self._call_ids = (st, ids)
        return self._call_ids[1]

    # -- identity -------------------------------------------------------------------
    @property
    def id(self) -> str:
        """The turn id."""
        return self.state.id

    @property
    def version(self) -> int:
        """The stored version this object was last saved or loaded at."""
        return self.state.version

    @property
    def agent_id(self) -> str:
        """The agent's id."""
        return self.state.agent_id

    @property
    def agent_version(self) -> str:
        """The agent version this turn runs (fixed at creation)."""
        return self.state.agent_version

    @property
    def parent_turn_id(self) -> str | None:
        """The direct parent, for a child turn."""
        return self.state.parent_turn_id

    @property
    def root_turn_id(self) -> str:
        """The root of the turn tree (itself for a root)."""
        return self.state.root_turn_id

    @property
    def conversation_id(self) -> str | None:
        """The business conversation this turn belongs to, if any."""
        return self.state.conversation_id

    # -- where it stands ------------------------------------------------------------
    @property
    def status(self) -> AgentTurnStatus:
        """Can the turn continue, and if not, why."""
        return self.state.status

    @property
    def phase(self) -> AgentTurnPhase:
        """What the next step does."""
        return self.state.phase

    @property
    def final_output(self) -> str | None:
        """The answer; meaningful only when the status is COMPLETED."""
        return self.state.final_output

    @property
    def output(self) -> Any:
        """The validated final output, an instance of the agent's ``output_type``.

        Rebuilt from its JSON form on each read (after a restore too); None until the turn
        COMPLETED, and for an agent without an output type.
        """
        form = self.state.output
        spec = self.agent.output
        if form is None or spec is None:
            return form
        return spec.load(form, self.state.id, self.state.agent_version)

    @property
    def error(self) -> BaseException | None:
        """The error that failed or delayed the turn (a ``RestoredError`` after a restore)."""
        if self.live_error is not None:
            return self.live_error
        info = self.state.error
        return RestoredError(info.type, info.message) if info is not None else None

    @property
    def terminal_reason(self) -> str | None:
        """Why an abnormal end happened, e.g. ``max_total_tokens (used=120, limit=100)``."""
        return self.state.terminal_reason

    @property
    def suspension(self) -> Suspension | None:
        """What a blocked turn waits for (a copy)."""
        return copy_suspension(self.state.suspension)

    @property
    def next_runnable_at(self) -> float | None:
        """When a scheduled retry becomes due (store clock, epoch seconds)."""
        return self.state.next_runnable_at

    @property
    def pending_tool_calls(self) -> list[ToolCall]:
        """Tool calls recorded but not yet answered."""
        return list(self.state.pending_tool_calls)

    # -- counters -------------------------------------------------------------------
    @property
    def iteration_count(self) -> int:
        """Model requests made, failed ones included."""
        return self.state.iteration_count

    @property
    def step_count(self) -> int:
        """Steps taken."""
        return self.state.step_count

    @property
    def tool_call_count(self) -> int:
        """Tools executed."""
        return self.state.tool_call_count

    @property
    def retry_count(self) -> int:
        """Retries scheduled over the whole turn."""
        return self.state.retry_count

    @property
    def usage(self) -> Usage:
        """Tokens used by this turn and its ended children."""
        return self.state.usage

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.state.usage.total_tokens

    # -- content --------------------------------------------------------------------
    @property
    def metadata(self) -> Mapping[str, Any]:
        """Business metadata (read-only view)."""
        return MappingProxyType(self.state.metadata)

    @property
    def streaming(self) -> bool:
        """Whether model calls stream (persisted, inherited by children)."""
        return self.state.streaming

    @property
    def messages(self) -> list[Message]:
        """Every message of the turn, attached history first (a copy)."""
        return list(self.state.messages)

    @property
    def conversation_history(self) -> list[Message]:
        """Model-protocol messages without system messages (a copy)."""
        return [m for m in self.state.messages if not isinstance(m, SystemMessage)]

    @property
    def new_messages(self) -> list[Message]:
        """Messages added by this turn (its input onwards)."""
        return list(self.state.messages[self.state.history_count :])

    @property
    def prompt(self) -> str:
        """The system instructions the model sees (the agent's)."""
        return self.agent.instructions

    @property
    def task_plan(self) -> TaskPlan | None:
        """A copy of the task plan of a planning agent (None without one)."""
        plan = self.state.task_plan
        return plan.model_copy(deep=True) if plan is not None else None

    @property
    def task_progress(self) -> TaskProgress | None:
        """An immutable view of plan progress (None without a plan)."""
        plan = self.state.task_plan
        if plan is None:
            return None
        tasks = tuple(MappingProxyType(t.model_dump(mode="json")) for t in plan.tasks)
        completed = sum(1 for t in plan.tasks if t.status is TaskStatus.COMPLETED)
        suspension = copy_suspension(self.state.suspension)
        return TaskProgress(plan.goal, completed, len(plan.tasks), tasks, suspension)

    def to_snapshot(self) -> AgentTurnSnapshot:
        """An isolated copy of the persistent state."""
        return self.state.copy_state()

    def __repr__(self) -> str:
        s = self.state
        return f"AgentTurn({s.id!r}, {s.status.value}, phase={s.phase.value}, v{s.version})"


@dataclass(frozen=True)
class TaskProgress:
    """An immutable view of a plan: goal, counts, tasks, and what the turn waits for."""

    goal: str
    completed: int
    total: int
    tasks: tuple[Mapping[str, Any], ...]
    suspension: Suspension | None


@dataclass
class AgentStepResult:
    """What one step produced directly; the turn's status says what happens next."""

    #: The model's response, when the step called the model.
    response: ModelResponse | None = None
    #: Tool results written by this step.
    tool_messages: list[ToolMessage] = field(default_factory=list)
    #: The error that made this step retry or fail.
    error: BaseException | None = None
