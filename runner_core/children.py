"""Child turns: starting a plan's ready tasks, fan-in when children end, routing resumes."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from runner_core.errors import AgentNotFoundError, ConcurrentModificationError
from runner_core.events import AgentEventType as E
from runner_core.kernel import TurnKernel
from runner_core.messages import ToolCall, UserMessage
from runner_core.planning import (
    DONE,
    PLAN_TOOLS,
    AgentPlanningPolicy,
    FailureStrategy,
    PlanError,
    PlanTask,
    TaskPlan,
    TaskStatus,
    build_plan,
    child_input,
    truncate,
)
from runner_core.policy import AgentBudget, AgentExecutionPolicy
from runner_core.snapshot import AgentTurnSnapshot, Suspension, SuspensionType
from runner_core.status import AgentTurnPhase, AgentTurnStatus
from runner_core.store import AgentTurnStore, waiting_child_ids
from runner_core.turn import AgentTurn

log = logging.getLogger("runner_core.children")


def planning_policy(turn: AgentTurn) -> AgentPlanningPolicy | None:
    """The agent's planning policy, if planning is on."""
    policy = turn.agent.planning
    return policy if isinstance(policy, AgentPlanningPolicy) and policy.enabled else None


def is_plan_call(turn: AgentTurn, call: ToolCall) -> bool:
    """A call of a built-in plan tool on a planning agent."""
    return call.name in PLAN_TOOLS and planning_policy(turn) is not None


def store_plan(turn: AgentTurn, call: ToolCall) -> str | None:
    """Take the plan a plan call proposes (the call stays pending); else the reason why not.

    The step's final save records it; the caller emits PLAN_CREATED/UPDATED after that.
    """
    st, policy = turn.state, planning_policy(turn)
    assert policy is not None
    if st.depth + 1 > policy.max_depth:
        return f"delegation depth {st.depth + 1} exceeds max_depth {policy.max_depth}"
    allowed = frozenset(policy.allowed_agents or turn.agent.sub_agents)
    try:
        st.task_plan = build_plan(call.name, call.arguments, call.id, st.task_plan, allowed, policy)
    except PlanError as exc:
        return str(exc)
    return None


def active_plan(turn: AgentTurn) -> TaskPlan | None:
    """The plan whose tool call is still pending (its tasks may start or run)."""
    plan = turn.state.task_plan
    if plan is None or not any(c.id == plan.call_id for c in turn.state.pending_tool_calls):
        return None
    return plan


def advance_plan(k: TurnKernel, turn: AgentTurn) -> bool:
    """Start every ready task as a child turn; True if the turn now waits for children."""
    plan = active_plan(turn)
    if plan is None:
        return False
    ready = plan.runnable()
    if not ready:
        return False
    st, now = turn.state, k.store.now()
    policy = child_policy(k.policy(turn), st, now, share=len(ready))
    children: list[AgentTurnSnapshot] = []
    failed: list[PlanTask] = []
    for task in ready:
        if task.status is not TaskStatus.PENDING:
            continue  # skipped meanwhile: a task before it failed under STOP
        try:
            agent = k.loader.load(task.agent_id or "")
        except AgentNotFoundError as exc:
            _settle(plan, task, TaskStatus.FAILED, None, str(exc), planning_policy(turn))
            failed.append(task)
            continue
        child = _child(st, plan, task, agent.version, policy, now)
        task.status, task.child_turn_id = TaskStatus.RUNNING, child.id
        children.append(child)
    if not children:
        k.save(turn)
        _emit_failed(k, turn, failed)
        return False
    ids = [c.id for c in children]
    st.status = AgentTurnStatus.WAITING_FOR_CHILD
    st.suspension = Suspension(
        type=SuspensionType.CHILD,
        correlation_id=ids[0] if len(ids) == 1 else None,
        message=f"waiting for {len(ids)} child turn(s)",
        resume_phase=AgentTurnPhase.TOOLS,
        metadata={"child_turn_ids": ids},
    )
    k.save(turn, children, last=True)

    _emit_failed(k, turn, failed)
    for child, task in zip(
        children, (t for t in plan.tasks if t.child_turn_id in ids), strict=True
    ):
        k.emit(
            turn, E.TASK_STARTED, task_id=task.id, child_turn_id=child.id, agent_id=child.agent_id
        )
        k.emit(turn, E.CHILD_STARTED, child_turn_id=child.id, agent_id=child.agent_id)
    k.emit(
        turn,
        E.TURN_SUSPENDED,
        correlation_id=st.suspension.correlation_id,
        message=st.suspension.message,
        child_turn_ids=ids,
    )
    return True


def _emit_failed(k: TurnKernel, turn: AgentTurn, failed: list[PlanTask]) -> None:
    for task in failed:
        k.emit(turn, E.TASK_FAILED, task_id=task.id, child_turn_id=None, error=task.error)


def _child(
    parent: AgentTurnSnapshot,
    plan: TaskPlan,
    task: PlanTask,
    version: str,
    policy: AgentExecutionPolicy,
    now: float,
) -> AgentTurnSnapshot:
    child_id = uuid.uuid4().hex
    return AgentTurnSnapshot(
        id=child_id,
        agent_id=task.agent_id or "",
        agent_version=version,
        parent_turn_id=parent.id,
        root_turn_id=parent.root_turn_id,
        messages=[UserMessage(child_input(plan, task))],
        metadata=dict(parent.metadata),
        streaming=parent.streaming,
        policy=policy,
        created_at=now,
        updated_at=now,
        depth=parent.depth + 1,
    )


def child_policy(
    policy: AgentExecutionPolicy, st: AgentTurnSnapshot, now: float, share: int = 1
) -> AgentExecutionPolicy:
    """The parent's policy with an equal ``share`` of what is left of its budget.

    Children started together split the remaining tokens and tool calls, so a root's
    budget bounds its whole tree even when they run in parallel; time is shared.
    """
    b, u = policy.budget, st.usage

    def left(limit: int | None, used: int) -> int | None:
        return None if limit is None else max(0, limit - used) // max(1, share)

    duration = b.max_duration_seconds
    budget = AgentBudget(
        max_duration_seconds=None if duration is None else max(0.0, st.created_at + duration - now),
        max_input_tokens=left(b.max_input_tokens, u.input_tokens),
        max_output_tokens=left(b.max_output_tokens, u.output_tokens),
        max_total_tokens=left(b.max_total_tokens, u.total_tokens),
        max_tool_calls=left(b.max_tool_calls, st.tool_call_count),
    )
    return policy.model_copy(update={"budget": budget})


def complete_child(
    store: AgentTurnStore,
    emit: Callable[[AgentTurnSnapshot, E, dict[str, object]], None],
    parent_id: str,
    child_id: str,
    policy: AgentPlanningPolicy | None,
    attempts: int = 20,
) -> bool:
    """Record an ended child in its waiting parent; True if the parent became runnable.

    Late or duplicate completions (the parent no longer waits on this child) change nothing.
    """
    for _ in range(attempts):
        parent = store.load(parent_id)
        waiting = waiting_child_ids(parent)
        if child_id not in waiting:
            return False
        child = store.load(child_id)
        if not child.status.is_terminal or parent.task_plan is None:
            return False
        task = parent.task_plan.task_of_child(child_id)
        if task is None:
            return False
        status = _task_status(child.status)
        result = truncate(child.final_output or "", policy.max_result_chars if policy else 4000)
        _settle(
            parent.task_plan,
            task,
            status,
            result if status is TaskStatus.COMPLETED else None,
            child.terminal_reason,
            policy,
        )
        parent.usage = parent.usage + child.usage
        parent.tool_call_count += child.tool_call_count
        _unwait(parent, [w for w in waiting if w != child_id])
        try:
            store.save(parent, parent.version)
        except ConcurrentModificationError:
            continue
        event = E.TASK_COMPLETED if status is TaskStatus.COMPLETED else E.TASK_FAILED
        emit(
            parent,
            event,
            {
                "task_id": task.id,
                "child_turn_id": child_id,
                "child_status": child.status.value,
                "error": task.error,
            },
        )
        if parent.status is AgentTurnStatus.RUNNING:
            emit(parent, E.TURN_RESUMED, {"child_turn_id": child_id})
            return True
        return False

    log.error(
        "parent %s: could not record child %s after %d attempts", parent_id, child_id, attempts
    )
    return False


def _task_status(child: AgentTurnStatus) -> TaskStatus:
    if child is AgentTurnStatus.COMPLETED:
        return TaskStatus.COMPLETED
    if child is AgentTurnStatus.CANCELLED:
        return TaskStatus.CANCELLED
    return TaskStatus.FAILED


def _settle(
    plan: TaskPlan,
    task: PlanTask,
    status: TaskStatus,
    result: str | None,
    error: str | None,
    policy: AgentPlanningPolicy | None,
) -> None:
    task.status, task.result = status, result
    task.error = None if status is TaskStatus.COMPLETED else (error or status.value.lower())
    if status is TaskStatus.COMPLETED:
        return
    stop = policy is None or policy.failure_strategy is FailureStrategy.STOP
    blocked = {task.id}
    changed = True
    while changed:
        changed = False
        for t in plan.tasks:
            if t.status is TaskStatus.PENDING and (stop or blocked & set(t.depends_on)):
                t.status, t.error = (
                    TaskStatus.SKIPPED,
                    f"skipped: task {task.id!r} {status.value.lower()}",
                )
                blocked.add(t.id)
                changed = True


def _unwait(parent: AgentTurnSnapshot, remaining: list[str]) -> None:
    s = parent.suspension
    assert s is not None
    if remaining:
        parent.suspension = s.model_copy(
            update={
                "metadata": {**s.metadata, "child_turn_ids": remaining},
                "correlation_id": remaining[0] if len(remaining) == 1 else None,
                "message": f"waiting for {len(remaining)} child turn(s)",
            }
        )
        return
    parent.status, parent.phase, parent.suspension = AgentTurnStatus.RUNNING, s.resume_phase, None


def plan_finished(plan: TaskPlan) -> bool:
    """Every task has ended (or can never start)."""
    return all(t.status in DONE for t in plan.tasks) or plan.is_finished()


def descendants(store: AgentTurnStore, turn_id: str) -> list[str]:
    """Every descendant id, breadth first."""
    found: list[str] = []
    frontier = [turn_id]
    while frontier:
        nxt: list[str] = []
        for tid in frontier:
            nxt.extend(store.children_of(tid))
        found.extend(nxt)
        frontier = nxt
    return found
