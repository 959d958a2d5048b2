"""A refused plan names its tasks and agents, each cut to a readable length."""

from __future__ import annotations

from typing import Any

import pytest

from runner_core.planning import (
    CREATE_PLAN,
    UPDATE_PLAN,
    AgentPlanningPolicy,
    PlanError,
    TaskStatus,
    build_plan,
)

HUGE = "h" * 100_000
ALLOWED = frozenset({"worker"})


def task(id: str, agent: str | None = "worker", deps: list[str] | None = None) -> dict[str, Any]:
    return {"id": id, "description": "do it", "agent": agent, "depends_on": deps or []}


def refusal(arguments: dict[str, Any], name: str = CREATE_PLAN, **context: Any) -> str:
    with pytest.raises(PlanError) as caught:
        build_plan(
            name,
            arguments,
            "p1",
            context.get("current"),
            context.get("allowed", ALLOWED),
            AgentPlanningPolicy(),
        )
    return str(caught.value)


def create(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "g", "tasks": list(tasks)}


CASES = {
    "an unknown agent": (create(task("t1", agent=HUGE)), "is not allowed"),
    "a huge task id naming no agent": (create(task(HUGE, agent=None)), "name an agent"),
    "a huge unknown dependency": (create(task("t1", deps=[HUGE])), "unknown task"),
    "a huge task id with an unknown dependency": (
        create(task(HUGE, deps=["nope"])),
        "unknown task 'nope'",
    ),
    "huge duplicate ids": (create(task(HUGE), task(HUGE)), "unique"),
    "a cycle of huge ids": (
        create(task(HUGE + "1", deps=[HUGE + "2"]), task(HUGE + "2", deps=[HUGE + "1"])),
        "dependency cycle",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_plan_error_cuts_what_it_echoes(case: str) -> None:
    arguments, expected = CASES[case]
    if case == "a huge task id naming no agent":
        message = refusal(arguments, allowed=frozenset({"a", "b"}))
    else:
        message = refusal(arguments)

    assert expected in message
    assert len(message) < 500, message[:600]
    assert "100000 chars" in message or "100001 chars" in message


def test_a_dependency_on_an_ended_task_cuts_both_ids() -> None:
    current = build_plan(
        CREATE_PLAN, create(task(HUGE)), "p1", None, ALLOWED, AgentPlanningPolicy()
    )
    current.tasks[0].status = TaskStatus.FAILED

    message = refusal(
        {"reason": "again", "tasks": [task(HUGE + "x", deps=[HUGE])]},
        UPDATE_PLAN,
        current=current,
    )

    assert "will never complete" in message
    assert len(message) < 500, message[:600]


def test_short_ids_are_shown_whole() -> None:
    assert "task 't1' depends on unknown task 'nope'" in refusal(create(task("t1", deps=["nope"])))
