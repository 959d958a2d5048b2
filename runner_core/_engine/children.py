"""Child turns: starting a plan's ready tasks, fan-in when children end, routing resumes."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from runner_core._engine import tracing
from runner_core._engine.kernel import EventSpec, TurnKernel
from runner_core.errors import AgentNotFoundError
from runner_core.events import AgentEventType as E
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
from runner_core.status import AgentTurnPhase, AgentTurnStatus, move
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


@dataclass(frozen=True, slots=True)
class TaskStart:
    """What starting a plan's ready tasks made: child turns to create, and their events."""

    children: tuple[AgentTurnSnapshot, ...]
    #: TASK_FAILED for tasks whose agent could not load, TASK_STARTED and CHILD_STARTED.
    events: tuple[EventSpec, ...]

    def suspension(self) -> Suspension:
        """What the parent waits for while these children run."""
        ids = [c.id for c in self.children]
        return Suspension(
            type=SuspensionType.CHILD,
            correlation_id=ids[0] if len(ids) == 1 else None,
            message=f"waiting for {len(ids)} child turn(s)",
            resume_phase=AgentTurnPhase.TOOLS,
            metadata={"child_turn_ids": ids},
        )


def start_tasks(k: TurnKernel, turn: AgentTurn) -> TaskStart | None:
    """Start every ready task as a child turn (not yet written); None if none is ready."""
    plan = active_plan(turn)
    if plan is None:
        return None
    ready = plan.runnable()
    if not ready:
        return None
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
    events = _failed_events(failed)
    ids = [c.id for c in children]
    for child, task in zip(
        children, (t for t in plan.tasks if t.child_turn_id in ids), strict=True
    ):
        started = {"child_turn_id": child.id, "agent_id": child.agent_id}
        events.append((E.TASK_STARTED, {"task_id": task.id, **started}))
        events.append((E.CHILD_STARTED, started))
    return TaskStart(tuple(children), tuple(events))


def _failed_events(failed: list[PlanTask]) -> list[tuple[E, dict[str, Any]]]:
    return [
        (E.TASK_FAILED, {"task_id": t.id, "child_turn_id": None, "error": t.error}) for t in failed
    ]


def _child(
    parent: AgentTurnSnapshot,
    plan: TaskPlan,
    task: PlanTask,
    version: str,
    policy: AgentExecutionPolicy,
    now: float,
) -> AgentTurnSnapshot:
    child_id = uuid.uuid4().hex
    child = AgentTurnSnapshot(
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
    tracing.turn_created(child)  # inside the parent's step: its span nests there
    return child


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


def settle_children(k: TurnKernel, turn: AgentTurn) -> None:
    """A woken parent takes its children's results: tasks settled, usage added, resumed.

    Runs inside the parent's own step, under its own lease; the step's commit records it
    (and clears the results the store kept for it).
    """
    st = turn.state
    assert st.suspension is not None
    policy = planning_policy(turn)
    limit = policy.max_result_chars if policy else 4000
    ids = waiting_child_ids(st)
    for child_id in ids:
        result = st.child_results[child_id]
        st.usage = st.usage + result.usage
        st.tool_call_count += result.tool_call_count
        task = st.task_plan.task_of_child(child_id) if st.task_plan is not None else None
        if task is None:
            continue
        assert st.task_plan is not None
        status = _task_status(result.status)
        output = truncate(result.final_output or "", limit)
        done = output if status is TaskStatus.COMPLETED else None
        _settle(st.task_plan, task, status, done, result.terminal_reason, policy)
        kind = E.TASK_COMPLETED if status is TaskStatus.COMPLETED else E.TASK_FAILED
        k.emit(
            turn,
            kind,
            task_id=task.id,
            child_turn_id=child_id,
            child_status=result.status.value,
            error=task.error,
        )
    move(st, AgentTurnStatus.RUNNING)
    st.phase, st.suspension = st.suspension.resume_phase, None
    st.child_results = {}
    k.emit_start(turn, E.TURN_RESUMED, child_turn_ids=ids)


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
