"""Task plans: the policy, the plan and task models, and the two built-in plan tools."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner_core.errors import shorten
from runner_core.models.base import ToolSpec

CREATE_PLAN = "create_task_plan"
UPDATE_PLAN = "update_task_plan"
PLAN_TOOLS = frozenset({CREATE_PLAN, UPDATE_PLAN})


class FailureStrategy(str, Enum):
    """What a failed (or cancelled) task does to the rest of the plan."""

    #: Skip every task not yet started; the model hears about it.
    STOP = "STOP"
    #: Go on with every task that does not depend on the failed one.
    CONTINUE = "CONTINUE"


class AgentPlanningPolicy(BaseModel):
    """Whether and how an agent may delegate work to child turns through a plan."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    #: Most tasks in one plan (after any update).
    max_tasks: int = Field(default=10, ge=1)
    #: Deepest child level (a root is level 0; its children level 1).
    max_depth: int = Field(default=2, ge=1)
    #: Agent ids tasks may name; empty means only ``Agent.sub_agents``.
    allowed_agents: tuple[str, ...] = ()
    failure_strategy: FailureStrategy = FailureStrategy.STOP
    #: How many times ``update_task_plan`` may be used in one turn.
    max_replans: int = Field(default=2, ge=0)
    #: Child results longer than this are cut (with a marker) before reaching the parent.
    max_result_chars: int = Field(default=4000, ge=100)
    #: Ask the model for a final answer after the plan; if False, the results are the answer.
    final_summary: bool = True


class TaskStatus(str, Enum):
    """Where one task stands."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"


DONE = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.SKIPPED}
)


class PlanTask(BaseModel):
    """One task of a plan; it runs as a child turn of ``agent_id``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    description: str
    agent_id: str | None = None
    expected_output: str = ""
    depends_on: list[str] = Field(default_factory=list)
    status: TaskStatus = TaskStatus.PENDING
    child_turn_id: str | None = None
    result: str | None = None
    error: str | None = None


class TaskPlan(BaseModel):
    """A goal and its tasks; ``call_id`` is the plan tool call answered when it finishes."""

    model_config = ConfigDict(extra="forbid")

    goal: str
    tasks: list[PlanTask]
    call_id: str
    revision: int = 0

    def runnable(self) -> list[PlanTask]:
        """Pending tasks whose dependencies all completed."""
        done = {t.id for t in self.tasks if t.status is TaskStatus.COMPLETED}
        return [
            t
            for t in self.tasks
            if t.status is TaskStatus.PENDING and all(d in done for d in t.depends_on)
        ]

    def running(self) -> list[PlanTask]:
        """Tasks whose child turn has not ended."""
        return [t for t in self.tasks if t.status is TaskStatus.RUNNING]

    def task_of_child(self, child_turn_id: str) -> PlanTask | None:
        """The task a child turn runs."""
        return next((t for t in self.tasks if t.child_turn_id == child_turn_id), None)

    def is_finished(self) -> bool:
        """Nothing runs and nothing more can start."""
        return not self.running() and not self.runnable()


class _TaskArg(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, description="Short unique id, e.g. 't1'.")
    description: str = Field(min_length=1, description="What the task must achieve.")
    agent: str | None = Field(default=None, description="Agent id to run it.")
    expected_output: str = ""
    depends_on: list[str] = Field(default_factory=list, description="Ids of tasks to wait for.")


class _CreateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1)
    tasks: list[_TaskArg] = Field(min_length=1)


class _UpdateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1)
    tasks: list[_TaskArg] = Field(min_length=1)


class PlanError(ValueError):
    """A plan the model proposed is not acceptable; the model hears why."""


def plan_tool_specs() -> list[ToolSpec]:
    """The specs of the two built-in plan tools."""
    return [
        ToolSpec(
            CREATE_PLAN,
            "Split the work into tasks run by sub-agents; tasks without "
            "dependencies between them run in parallel.",
            _schema(_CreateArgs),
        ),
        ToolSpec(
            UPDATE_PLAN,
            "Replace the tasks that have not run yet, after seeing results.",
            _schema(_UpdateArgs),
        ),
    ]


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


def build_plan(
    name: str,
    arguments: dict[str, Any],
    call_id: str,
    current: TaskPlan | None,
    allowed: frozenset[str],
    policy: AgentPlanningPolicy,
) -> TaskPlan:
    """The plan a create/update call asks for; ``PlanError`` says what is wrong with it."""
    try:
        args: _CreateArgs | _UpdateArgs = (
            _CreateArgs.model_validate(arguments)
            if name == CREATE_PLAN
            else _UpdateArgs.model_validate(arguments)
        )
    except ValidationError as exc:
        raise PlanError(
            f"invalid arguments: {exc.errors()[0]['msg']} at "
            f"{'.'.join(str(p) for p in exc.errors()[0]['loc'])}"
        ) from exc
    kept: list[PlanTask] = []
    if isinstance(args, _CreateArgs):
        if current is not None:
            raise PlanError("a plan exists already; use update_task_plan to change it")
        goal, revision = args.goal, 0
    else:
        if current is None:
            raise PlanError("there is no plan to update; use create_task_plan")
        if current.revision >= policy.max_replans:
            raise PlanError(
                f"the plan was already updated {current.revision} times "
                f"(limit {policy.max_replans})"
            )
        kept = [
            t.model_copy()
            for t in current.tasks
            if t.status is not TaskStatus.PENDING and t.status is not TaskStatus.SKIPPED
        ]
        goal, revision = current.goal, current.revision + 1
    tasks = kept + [_task(t, allowed) for t in args.tasks]
    _check_tasks(tasks, policy)
    _check_reachable(kept, tasks[len(kept) :])
    return TaskPlan(goal=goal, tasks=tasks, call_id=call_id, revision=revision)


def _check_reachable(kept: list[PlanTask], new: list[PlanTask]) -> None:
    # A new task waiting on a kept task that ended without completing could never start.
    ended = {t.id: t.status for t in kept if t.status in (TaskStatus.FAILED, TaskStatus.CANCELLED)}
    for t in new:
        for dep in t.depends_on:
            if dep in ended:
                raise PlanError(
                    f"task {shorten(t.id)} depends on task {shorten(dep)}, which is "
                    f"{ended[dep].value} and will never complete"
                )


def _task(arg: _TaskArg, allowed: frozenset[str]) -> PlanTask:
    if arg.agent is not None and arg.agent not in allowed:
        names = ", ".join(sorted(allowed)) or "none"
        raise PlanError(
            f"task {shorten(arg.id)}: agent {shorten(arg.agent)} is not allowed (allowed: {names})"
        )
    agent = arg.agent or (min(allowed) if len(allowed) == 1 else None)
    if agent is None:
        names = ", ".join(sorted(allowed))
        raise PlanError(f"task {shorten(arg.id)}: name an agent (allowed: {names})")
    return PlanTask(
        id=arg.id,
        description=arg.description,
        agent_id=agent,
        expected_output=arg.expected_output,
        depends_on=list(arg.depends_on),
    )


def _check_tasks(tasks: list[PlanTask], policy: AgentPlanningPolicy) -> None:
    if len(tasks) > policy.max_tasks:
        raise PlanError(f"{len(tasks)} tasks, at most {policy.max_tasks} allowed")
    ids = [t.id for t in tasks]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        shown = ", ".join(shorten(i) for i in repeated)
        raise PlanError(f"task ids must be unique: {shown} named more than once")
    known = set(ids)
    for t in tasks:
        for dep in t.depends_on:
            if dep not in known:
                raise PlanError(f"task {shorten(t.id)} depends on unknown task {shorten(dep)}")
    graph = {t.id: t.depends_on for t in tasks}
    state: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        if state.get(node) == 2:
            return
        if state.get(node) == 1:
            raise PlanError(f"dependency cycle: {' -> '.join(shorten(n) for n in (*path, node))}")
        state[node] = 1
        for dep in graph[node]:
            visit(dep, (*path, node))
        state[node] = 2

    for node in graph:
        visit(node, ())


def plan_result(plan: TaskPlan) -> str:
    """The plan tool's answer once the plan has finished: every task's status and result."""
    tasks = [
        {
            k: v
            for k, v in {
                "id": t.id,
                "agent": t.agent_id,
                "status": t.status.value,
                "result": t.result,
                "error": t.error,
            }.items()
            if v is not None
        }
        for t in plan.tasks
    ]
    return json.dumps(
        {"goal": plan.goal, "revision": plan.revision, "tasks": tasks}, ensure_ascii=False
    )


def child_input(plan: TaskPlan, task: PlanTask) -> str:
    """The input of a task's child turn: goal, task, expected output, dependency results."""
    lines = [f"Overall goal: {plan.goal}", f"Your task ({task.id}): {task.description}"]
    if task.expected_output:
        lines.append(f"Expected output: {task.expected_output}")
    for dep in task.depends_on:
        done = next(t for t in plan.tasks if t.id == dep)
        lines.append(f"Result of {dep}: {done.result or ''}")
    return "\n".join(lines)


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    return text[: limit - 40] + f"... [truncated {len(text) - limit + 40} chars]"
