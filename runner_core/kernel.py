"""What every runner operation shares: save, ownership checks, events, closing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from runner_core.agent import AgentLoader
from runner_core.errors import ConcurrentModificationError, LeaseLostError
from runner_core.events import AgentEventType, EventBus
from runner_core.messages import AiMessage, ToolMessage
from runner_core.middleware import Middleware
from runner_core.planning import TaskStatus
from runner_core.policy import AgentExecutionPolicy
from runner_core.snapshot import AgentTurnSnapshot, ErrorInfo
from runner_core.status import AgentTurnStatus
from runner_core.store import AgentTurnStore, SaveResult, TurnControl
from runner_core.turn import AgentTurn

TERMINAL_EVENT = {
    AgentTurnStatus.COMPLETED: AgentEventType.TURN_COMPLETED,
    AgentTurnStatus.FAILED: AgentEventType.TURN_FAILED,
    AgentTurnStatus.CANCELLED: AgentEventType.TURN_CANCELLED,
    AgentTurnStatus.MAX_ITERATIONS_REACHED: AgentEventType.MAX_ITERATIONS_REACHED,
    AgentTurnStatus.MAX_STEPS_REACHED: AgentEventType.MAX_STEPS_REACHED,
    AgentTurnStatus.BUDGET_EXCEEDED: AgentEventType.BUDGET_EXCEEDED,
}

AfterSave = Callable[[AgentTurn], None]
OnTerminal = Callable[[AgentTurn], None]


class TurnKernel:
    """The runner's services as the step machine sees them."""

    def __init__(
        self,
        store: AgentTurnStore,
        bus: EventBus,
        policy: AgentExecutionPolicy,
        middleware: Sequence[Middleware],
        loader: AgentLoader,
        after_save: AfterSave | None = None,
        on_terminal: OnTerminal | None = None,
    ) -> None:
        self.store = store
        self.loader = loader
        self.on_terminal = on_terminal
        self.bus = bus
        self.default_policy = policy
        self.runner_middleware = tuple(middleware)
        self.after_save = after_save
        self._chains: dict[int, tuple[Middleware, ...]] = {}

    def policy(self, turn: AgentTurn) -> AgentExecutionPolicy:
        """The turn's own policy, else the runner's."""
        return turn.state.policy or self.default_policy

    def middleware(self, turn: AgentTurn) -> tuple[Middleware, ...]:
        """Runner middleware (outermost first), then the agent's."""
        agent_mw = turn.agent.middleware
        if not agent_mw:
            return self.runner_middleware
        key = id(agent_mw)
        chain = self._chains.get(key)
        if chain is None:
            chain = self._chains[key] = self.runner_middleware + agent_mw
        return chain

    def emit(self, turn: AgentTurn, type: AgentEventType, **data: Any) -> None:
        """Deliver an event about ``turn``."""
        self.bus.emit(turn.state, type, **data)

    def control(self, turn: AgentTurn) -> TurnControl:
        """Re-read the stored control fields; the cancel flag is merged into the turn."""
        control = self.store.peek(turn.state.id)
        if control.cancel_requested and not turn.state.cancel_requested:
            turn.state.cancel_requested = True
            self.emit(turn, AgentEventType.CANCELLATION_REQUESTED)
        return control

    def guard(self, turn: AgentTurn) -> None:
        """Before a side effect: hold the lease (worker mode) or see nobody else does."""
        held = turn.held_lease
        if held is not None:
            held.check()
            if not held.take_fresh():
                self.control(turn)  # the cancel flag is re-read before side effects here too
            return

        st = turn.state
        control = self.control(turn)
        if control.version != st.version:
            raise ConcurrentModificationError(st.id, st.version, control.version)
        lease = control.live_lease
        if lease is not None:
            raise LeaseLostError(st.id, f"turn is leased by worker {lease.owner!r}")

    def save(
        self,
        turn: AgentTurn,
        children: Sequence[AgentTurnSnapshot] | None = None,
        *,
        last: bool = False,
    ) -> SaveResult:
        """Compare-and-set the turn (and create children atomically); emits SNAPSHOT_SAVED.

        ``last``: nothing follows in this step; a worker that asked for it gives its lease
        back in the same write (after which any further write raises ``LeaseLostError``).
        """
        held = turn.held_lease
        if held is not None:
            held.check()
        release = held.ref() if last and held is not None and held.release_on_last_save else None
        st = turn.state
        st.updated_at = time.time()
        extra = {"release": release} if release is not None else {}
        if children:
            result = self.store.save_parent_and_children(st, st.version, children, **extra)
        else:
            result = self.store.save(st, st.version, **extra)

        st.version = result.version
        if result.lease_released and held is not None:
            held.released_by_save()

        if result.cancel_requested and not st.cancel_requested:
            st.cancel_requested = True
            self.emit(turn, AgentEventType.CANCELLATION_REQUESTED)
        if self.after_save is not None:
            self.after_save(turn)
        self.emit(turn, AgentEventType.SNAPSHOT_SAVED, version=result.version)
        return result

    def finish(
        self,
        turn: AgentTurn,
        status: AgentTurnStatus,
        reason: str | None = None,
        error: BaseException | None = None,
        *,
        in_step: bool = False,
    ) -> None:
        """End the turn: close an abnormal history, save, emit, then wake a waiting parent."""
        st = turn.state
        if status is not AgentTurnStatus.COMPLETED:
            reason = reason or status.value.lower()
            close_history(st, self.policy(turn), reason)
            close_plan(st, reason)
            st.terminal_reason = reason
            if error is not None:
                st.error = ErrorInfo.of(error)
                turn.live_error = error
        st.status = status
        st.suspension = None
        st.next_runnable_at = None
        self.save(turn, last=True)
        if in_step:
            self.emit(turn, AgentEventType.STEP_COMPLETED)
        self.emit(
            turn, TERMINAL_EVENT[status], reason=st.terminal_reason, final_output=st.final_output
        )
        if self.on_terminal is not None:
            self.on_terminal(turn)

    def cancellation_reason(self, turn: AgentTurn) -> str:
        """The caller's reason (stored by whichever runner asked), else the policy's."""
        st = turn.state
        if st.cancel_requested and st.cancel_reason is None:
            st.cancel_reason = self.store.load(st.id).cancel_reason
        return st.cancel_reason or self.policy(turn).cancellation_reason


def close_history(st: AgentTurnSnapshot, policy: AgentExecutionPolicy, reason: str) -> None:
    """Answer every pending call and add one closing AiMessage (abnormal ends only)."""
    for call in st.pending_tool_calls:
        text = _fill(
            policy.interrupted_tool_message_template,
            reason=reason,
            turnId=st.id,
            toolCallId=call.id,
            toolName=call.name,
        )
        st.messages.append(
            ToolMessage(call_id=call.id, name=call.name, content=text, is_error=True)
        )
    st.pending_tool_calls = []
    text = _fill(policy.interrupted_turn_message_template, reason=reason, turnId=st.id)
    st.messages.append(AiMessage(text))


def close_plan(st: AgentTurnSnapshot, reason: str) -> None:
    """An abnormal end also ends the plan: running tasks are cancelled, pending skipped."""
    if st.task_plan is None:
        return
    for task in st.task_plan.tasks:
        if task.status is TaskStatus.RUNNING:
            task.status, task.error = TaskStatus.CANCELLED, reason
        elif task.status is TaskStatus.PENDING:
            task.status, task.error = TaskStatus.SKIPPED, reason


def _fill(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template
