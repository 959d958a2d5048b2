"""Task plans: persistence, the immutable progress view, validation, failure strategies, replans."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentBudget,
    AgentEventType,
    AgentExecutionPolicy,
    AgentTurnOptions,
    AgentTurnPhase,
    AgentTurnStatus,
    AiMessage,
    FailureStrategy,
    ModelRequest,
    SuspensionType,
    TaskStatus,
    ToolMessage,
)
from tests.support.plans import (
    Scripted,
    Workers,
    World,
    create,
    last_tool_message,
    planner,
    task,
    tool_json,
    update,
)

E = AgentEventType


def plan_answer(messages: list[Any], call_id: str) -> dict[str, Any]:
    """The JSON answer of a plan call, as the model received it."""
    [answer] = [m for m in messages if isinstance(m, ToolMessage) and m.call_id == call_id]
    assert not answer.is_error, answer.content
    value = json.loads(answer.content)
    assert isinstance(value, dict)
    return value


def statuses(plan_json: dict[str, Any]) -> dict[str, str]:
    return {t["id"]: t["status"] for t in plan_json["tasks"]}


# -- persistence and the progress view ---------------------------------------------------------


def test_plan_is_persisted_in_the_root_snapshot_and_progress_is_read_only() -> None:
    world = World()
    runner = world.runner()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("t1", expected="a list"), task("t2"), goal="ship it"), "done")
    root = runner.start(planner(model), "go")

    # Given the root has stored its plan (two worker steps: model, then the plan call)
    for _ in range(2):
        held = runner.claim(root.id, "w1")
        assert held is not None
        with runner.holding(held):
            runner.step(held)
    stored = world.store.load(root.id).task_plan
    assert stored is not None and stored.goal == "ship it" and stored.call_id == "p1"
    assert [(t.id, t.status, t.agent_id) for t in stored.tasks] == [
        ("t1", TaskStatus.PENDING, "worker"),
        ("t2", TaskStatus.PENDING, "worker"),
    ]
    assert stored.tasks[0].expected_output == "a list"
    assert workers.order == []

    # When a fresh runner (another process) restores and finishes it
    other = world.runner()
    restored = other.restore(root.id)
    assert restored.task_plan == stored
    finished = other.run_until_blocked(restored)

    # Then the stored plan holds every result and child id
    assert finished.status is AgentTurnStatus.COMPLETED
    plan = world.runner().restore(root.id).task_plan
    assert plan is not None
    assert [(t.status, t.result) for t in plan.tasks] == [
        (TaskStatus.COMPLETED, "result-t1"),
        (TaskStatus.COMPLETED, "result-t2"),
    ]
    assert [t.child_turn_id for t in plan.tasks] == world.store.children_of(root.id)

    # task_plan is a copy, task_progress an immutable view with the right counts
    copy = finished.task_plan
    assert copy is not None
    copy.tasks[0].status = TaskStatus.FAILED
    copy.tasks.clear()
    assert finished.task_plan == plan
    progress = finished.task_progress
    assert progress is not None
    assert (progress.goal, progress.completed, progress.total) == ("ship it", 2, 2)
    assert progress.suspension is None
    assert [t["status"] for t in progress.tasks] == ["COMPLETED", "COMPLETED"]
    with pytest.raises(TypeError):
        progress.tasks[0]["status"] = "PENDING"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        progress.completed = 0  # type: ignore[misc]
    progress.tasks[0]["depends_on"].append("x")
    assert finished.task_plan == plan


def test_progress_while_waiting_names_the_children() -> None:
    world = World()
    runner = world.runner()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("t1"), task("t2", deps=["t1"])), "done")
    root = runner.start(planner(model), "go")

    for _ in range(3):
        held = runner.claim(root.id, "w1")
        assert held is not None
        with runner.holding(held):
            runner.step(held)

    assert held.status is AgentTurnStatus.WAITING_FOR_CHILD
    progress = runner.restore(root.id).task_progress
    assert progress is not None
    assert (progress.completed, progress.total) == (0, 2)
    assert [t["status"] for t in progress.tasks] == ["RUNNING", "PENDING"]
    suspension = progress.suspension
    assert suspension is not None and suspension.type is SuspensionType.CHILD
    [child_id] = world.store.children_of(root.id)
    assert suspension.correlation_id == child_id
    assert suspension.metadata["child_turn_ids"] == [child_id]
    assert progress.tasks[0]["child_turn_id"] == child_id
    assert runner.restore(root.id).task_progress == progress


def test_a_turn_without_a_plan_has_no_progress() -> None:
    model = Scripted("just an answer")
    world = World()
    turn = world.runner().run(planner(model), "hi")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.task_plan is None and turn.task_progress is None
    # the planning agent was offered the two built-in tools
    assert {s.name for s in model.requests[0].tools} == {"create_task_plan", "update_task_plan"}


# -- bad plans go back to the model -------------------------------------------------------------


def _fix_after(expected: str, fix: AiMessage) -> Any:
    def reply(request: ModelRequest) -> AiMessage:
        refused = last_tool_message(request)
        body = tool_json(refused)
        assert refused.is_error and body["type"] == "invalid_plan", body
        assert expected in body["message"], body["message"]
        return fix

    return reply


BAD_PLANS = {
    "agent outside the allow-list": (create(task("t1", agent="intruder")), "not allowed", {}),
    "cyclic dependency": (
        create(task("t1", deps=["t3"]), task("t2", deps=["t1"]), task("t3", deps=["t2"])),
        "dependency cycle",
        {},
    ),
    "self dependency": (create(task("t1", deps=["t1"])), "dependency cycle", {}),
    "unknown dependency": (create(task("t1", deps=["nope"])), "unknown task 'nope'", {}),
    "more than max_tasks": (
        create(task("t1"), task("t2"), task("t3"), task("t4")),
        "4 tasks, at most 3 allowed",
        {"max_tasks": 3},
    ),
    "duplicate task ids": (create(task("t1"), task("t1")), "unique", {}),
    "no agent named among several": (
        create(task("t1", agent=None)),
        "name an agent",
        {"allowed_agents": ("worker", "intruder2")},
    ),
    "update without a plan": (update(task("t1")), "no plan to update", {}),
    "malformed arguments": (create(call_id="p0"), "invalid arguments", {}),
}


@pytest.mark.parametrize("case", BAD_PLANS, ids=list(BAD_PLANS))
def test_a_bad_plan_is_an_error_the_model_can_correct(case: str) -> None:
    bad, expected, policy = BAD_PLANS[case]
    world = World()
    workers, intruders = Workers(), Workers()
    world.register(workers.agent(), intruders.agent("intruder"))
    model = Scripted(bad, _fix_after(expected, create(task("t1"), call_id="p2")), "done")

    root = world.runner().run(planner(model, **policy), "go")

    assert root.status is AgentTurnStatus.COMPLETED and root.final_output == "done"
    assert intruders.order == [] and workers.order == ["t1"]
    plan = root.task_plan
    assert plan is not None and plan.call_id == "p2"
    assert [t.status for t in plan.tasks] == [TaskStatus.COMPLETED]
    assert len(world.log.of(E.PLAN_CREATED)) == 1
    refusals = [e for e in world.log.of(E.TOOL_FAILED) if e.data["error"]["type"] == "invalid_plan"]
    assert len(refusals) == 1
    assert root.tool_call_count == 0


def test_creating_a_second_plan_is_refused() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(
        create(task("t1")),
        create(task("t9"), call_id="p2"),
        _fix_after("a plan exists already", AiMessage("done")),
    )

    root = world.runner().run(planner(model), "go")

    assert root.status is AgentTurnStatus.COMPLETED and root.final_output == "done"
    assert workers.order == ["t1"]
    plan = root.task_plan
    assert plan is not None and [t.id for t in plan.tasks] == ["t1"] and plan.call_id == "p1"


def test_replans_beyond_max_replans_are_refused() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(
        create(task("t1")),
        update(task("t2"), call_id="u1"),
        update(task("t3"), call_id="u2"),
        _fix_after("already updated 1 times (limit 1)", AiMessage("done")),
    )

    root = world.runner().run(planner(model, max_replans=1), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert workers.order == ["t1", "t2"]
    plan = root.task_plan
    assert plan is not None and plan.revision == 1
    assert [t.id for t in plan.tasks] == ["t1", "t2"]
    assert len(world.log.of(E.PLAN_UPDATED)) == 1


def test_no_replans_at_all_with_max_replans_zero() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(
        create(task("t1")),
        update(task("t2")),
        _fix_after("limit 0", AiMessage("done")),
    )

    root = world.runner().run(planner(model, max_replans=0), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert workers.order == ["t1"]


# -- delegation ------------------------------------------------------------------------------


def test_the_policy_allow_list_replaces_sub_agents() -> None:
    world = World()
    workers, analysts = Workers(), Workers()
    world.register(workers.agent(), analysts.agent("analyst"))
    model = Scripted(
        create(task("t1", agent="worker")),
        _fix_after("not allowed (allowed: analyst)", create(task("t1", agent=None), call_id="p2")),
        "done",
    )

    root = world.runner().run(planner(model, subs=("worker",), allowed_agents=("analyst",)), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert workers.order == [] and analysts.order == ["t1"]
    plan = root.task_plan
    assert plan is not None and plan.tasks[0].agent_id == "analyst"  # the only one allowed


def test_plan_tools_need_no_approval_and_no_tool_budget() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("t1")), "done")
    policy = AgentExecutionPolicy(budget=AgentBudget(max_tool_calls=0))

    root = world.runner().run(planner(model), "go", options=AgentTurnOptions(policy=policy))

    assert root.status is AgentTurnStatus.COMPLETED
    assert root.tool_call_count == 0
    assert workers.order == ["t1"]


def test_delegation_depth_is_bounded() -> None:
    # Given a root planner whose task goes to a sub-planner that may not delegate further
    world = World()
    workers = Workers()
    sub_model = Scripted(
        create(task("deep"), call_id="s1"),
        _fix_after("depth 2 exceeds max_depth 1", AiMessage("did it myself")),
    )
    sub = planner(sub_model, id="sub", max_depth=1)
    world.register(workers.agent(), sub)
    model = Scripted(create(task("t1", agent="sub")), "done")

    root = world.runner().run(planner(model, subs=("sub",)), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert workers.order == []
    plan = root.task_plan
    assert plan is not None and plan.tasks[0].result == "did it myself"
    [child] = world.children(root.id)
    assert child.depth == 1 and world.store.children_of(child.id) == []


def test_nested_plans_within_max_depth() -> None:
    world = World()
    workers = Workers()
    sub_model = Scripted(create(task("leaf"), call_id="s1"), "sub summary")
    world.register(workers.agent(), planner(sub_model, id="sub"))
    model = Scripted(create(task("t1", agent="sub")), "done")

    root = world.runner().run(planner(model, subs=("sub",)), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert workers.order == ["leaf"]
    [mid] = world.children(root.id)
    [leaf] = world.children(mid.id)
    assert (mid.depth, leaf.depth) == (1, 2)
    assert (leaf.parent_turn_id, leaf.root_turn_id) == (mid.id, root.id)
    assert mid.status is AgentTurnStatus.COMPLETED and mid.final_output == "sub summary"


# -- failures: STOP and CONTINUE ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "expected", "ran"),
    [
        (
            FailureStrategy.STOP,
            {"bad": "FAILED", "after_bad": "SKIPPED", "good": "COMPLETED", "after_good": "SKIPPED"},
            ["bad", "good"],
        ),
        (
            FailureStrategy.CONTINUE,
            {
                "bad": "FAILED",
                "after_bad": "SKIPPED",
                "good": "COMPLETED",
                "after_good": "COMPLETED",
            },
            ["bad", "good", "after_good"],
        ),
    ],
)
def test_failure_strategy_after_a_failed_child(
    strategy: FailureStrategy, expected: dict[str, str], ran: list[str]
) -> None:
    world = World()
    workers = Workers(fail={"bad"})
    world.register(workers.agent())
    model = Scripted(
        create(
            task("bad"),
            task("after_bad", deps=["bad"]),
            task("good"),
            task("after_good", deps=["good"]),
        ),
        "summary despite the failure",
    )

    root = world.runner().run(planner(model, failure_strategy=strategy), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert root.final_output == "summary despite the failure"
    assert workers.order == ran
    answer = plan_answer(model.requests[1].messages, "p1")
    assert statuses(answer) == expected
    by_id = {t["id"]: t for t in answer["tasks"]}
    assert "bad broke" in by_id["bad"]["error"]
    assert "result" not in by_id["bad"]
    assert "skipped" in by_id["after_bad"]["error"]
    bad_child = next(c for c in world.children(root.id) if "(bad)" in str(c.messages[0]))
    assert bad_child.status is AgentTurnStatus.FAILED
    failed = world.log.of(E.TASK_FAILED, root.id)
    assert [e.data["task_id"] for e in failed] == ["bad"]
    assert failed[0].data["child_status"] == "FAILED"


# -- replanning ------------------------------------------------------------------------------


def test_an_update_after_results_keeps_finished_tasks_and_adds_new_ones() -> None:
    world = World()
    workers = Workers(fail={"t2"})
    world.register(workers.agent())

    def replan(request: ModelRequest) -> AiMessage:
        first = plan_answer(request.messages, "p1")
        assert statuses(first) == {"t1": "COMPLETED", "t2": "FAILED", "t3": "SKIPPED"}
        return update(task("t4", deps=["t1"]), task("t5"), call_id="u1", reason="t2 failed")

    model = Scripted(
        create(task("t1"), task("t2", deps=["t1"]), task("t3", deps=["t2"])),
        replan,
        "final",
    )

    root = world.runner().run(planner(model), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert workers.order.count("t1") == 1  # a kept task never runs again
    assert sorted(workers.order) == ["t1", "t2", "t4", "t5"]
    assert "Result of t1: result-t1" in workers.inputs["t4"]
    plan = root.task_plan
    assert plan is not None and plan.revision == 1 and plan.call_id == "u1"
    assert [(t.id, t.status) for t in plan.tasks] == [
        ("t1", TaskStatus.COMPLETED),
        ("t2", TaskStatus.FAILED),
        ("t4", TaskStatus.COMPLETED),
        ("t5", TaskStatus.COMPLETED),
    ]
    children = world.store.children_of(root.id)
    assert plan.tasks[0].child_turn_id == children[0] and len(children) == 4
    second = plan_answer(model.requests[2].messages, "u1")
    assert second["revision"] == 1
    assert statuses(second) == {
        "t1": "COMPLETED",
        "t2": "FAILED",
        "t4": "COMPLETED",
        "t5": "COMPLETED",
    }
    [updated] = world.log.of(E.PLAN_UPDATED, root.id)
    assert [t["id"] for t in updated.data["plan"]["tasks"]] == ["t1", "t2", "t4", "t5"]


def test_an_update_may_not_reuse_a_kept_task_id() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(
        create(task("t1")),
        update(task("t1")),
        _fix_after("unique", AiMessage("done")),
    )

    root = world.runner().run(planner(model), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert workers.order == ["t1"]


def test_an_update_may_not_wait_on_a_task_that_failed() -> None:
    world = World()
    workers = Workers(fail={"t1"})
    world.register(workers.agent())
    model = Scripted(
        create(task("t1")),
        update(task("t2", deps=["t1"]), call_id="u1"),
        _fix_after(
            "depends on task 't1', which is FAILED",
            update(task("t3"), call_id="u2"),
        ),
        "done",
    )

    root = world.runner().run(planner(model, failure_strategy=FailureStrategy.CONTINUE), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert workers.order == ["t1", "t3"]
    plan = root.task_plan
    assert plan is not None and plan.call_id == "u2" and plan.revision == 1
    # no task of the finished plan is left waiting forever
    assert [(t.id, t.status) for t in plan.tasks] == [
        ("t1", TaskStatus.FAILED),
        ("t3", TaskStatus.COMPLETED),
    ]


# -- results ---------------------------------------------------------------------------------


def test_without_final_summary_the_results_are_the_answer() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("t1"), task("t2", deps=["t1"])))

    root = world.runner().run(planner(model, final_summary=False), "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert root.final_output == "result-t1\n\nresult-t2"
    assert model.calls == 1
    assert root.phase is AgentTurnPhase.MODEL and root.pending_tool_calls == []


def test_without_final_summary_a_failed_plan_still_asks_the_model() -> None:
    world = World()
    workers = Workers(fail={"t1"})
    world.register(workers.agent())
    model = Scripted(create(task("t1")), "it failed")

    root = world.runner().run(planner(model, final_summary=False), "go")

    assert root.status is AgentTurnStatus.COMPLETED and root.final_output == "it failed"
    assert model.calls == 2


def test_long_child_results_are_truncated_before_reaching_the_parent() -> None:
    world = World()
    long_text = "x" * 5000
    writer = Agent("worker", Scripted(then=long_text).model)
    world.register(writer)
    model = Scripted(create(task("t1")), "done")

    root = world.runner().run(planner(model, max_result_chars=200), "go")

    plan = root.task_plan
    assert plan is not None
    result = plan.tasks[0].result
    assert result is not None and len(result) <= 200 and "[truncated" in result
    assert result.startswith("xxx")
    answer = plan_answer(model.requests[1].messages, "p1")
    assert answer["tasks"][0]["result"] == result
    [child] = world.children(root.id)
    assert child.final_output == long_text  # the child keeps its whole answer
