"""Typed output in a turn tree: what a typed child reports to its planning parent."""

from __future__ import annotations

import json

from pydantic import BaseModel

from runner_core import Agent, AgentPlanningPolicy, AgentTurnStatus, TaskStatus
from runner_core.output import FINAL_TOOL
from runner_core.testing import ScriptedModel, asks, tool_call
from tests.support.plans import Scripted, World, create, task


class Finding(BaseModel):
    topic: str
    score: int


class Report(BaseModel):
    summary: str
    findings: list[Finding]


def test_a_typed_child_reports_its_json_text_and_keeps_its_output() -> None:
    # Given a planner whose one task runs a child agent with an output type
    world = World()
    child_model = ScriptedModel(asks(tool_call(FINAL_TOOL, "f1", topic="cats", score=7)))
    world.register(Agent("analyst", child_model, output_type=Finding))
    model = Scripted(create(task("t1", agent="analyst")), "all done")
    root_agent = Agent(
        "planner", model.model, sub_agents=["analyst"], planning=AgentPlanningPolicy()
    )

    # When the tree runs to its end
    root = world.runner().run(root_agent, "go")

    # Then the parent's task holds the child's final output: the value's JSON text
    assert root.status is AgentTurnStatus.COMPLETED
    plan = root.task_plan
    assert plan is not None
    (t1,) = plan.tasks
    assert t1.status is TaskStatus.COMPLETED
    assert json.loads(t1.result or "") == {"topic": "cats", "score": 7}
    # and the child turn itself reads its typed output
    (child_id,) = world.store.children_of(root.id)
    child = world.runner().restore(child_id)
    assert child.output == Finding(topic="cats", score=7)


def test_a_typed_planner_validates_its_final_summary() -> None:
    world = World()
    world.register(Agent("analyst", ScriptedModel("cats: 7")))
    report = {"summary": "cats lead", "findings": [{"topic": "cats", "score": 7}]}
    model = Scripted(
        create(task("t1", agent="analyst")), asks(tool_call(FINAL_TOOL, "f1", **report))
    )
    root_agent = Agent(
        "planner",
        model.model,
        sub_agents=["analyst"],
        planning=AgentPlanningPolicy(),
        output_type=Report,
    )

    root = world.runner().run(root_agent, "go")

    assert root.status is AgentTurnStatus.COMPLETED
    assert root.output == Report(summary="cats lead", findings=[Finding(topic="cats", score=7)])
