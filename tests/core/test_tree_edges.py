"""Edges of turn trees: plans closed by abnormal ends, direct child resumes, copies."""

from __future__ import annotations

from runner_core import (
    Agent,
    AgentPlanningPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelRequest,
    TaskStatus,
    ToolCall,
    ToolMessage,
    tool,
)


@tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text (needs approval)."""
    return f"published {text}"


def _child_model(request: ModelRequest) -> AiMessage:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return AiMessage(tool_calls=[ToolCall(id="pub", name="publish", arguments={"text": "x"})])
    return AiMessage("child done")


def _parent_model(request: ModelRequest) -> AiMessage:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        tasks = [
            {"id": "a", "description": "publish", "agent": "child"},
            {"id": "b", "description": "after", "agent": "child", "depends_on": ["a"]},
        ]
        return AiMessage(
            tool_calls=[
                ToolCall(
                    id="plan", name="create_task_plan", arguments={"goal": "g", "tasks": tasks}
                )
            ]
        )
    return AiMessage("parent done")


def _runner() -> AgentRunner:
    loader = InMemoryAgentLoader(
        [
            Agent(
                "parent",
                FunctionModel(_parent_model),
                sub_agents=["child"],
                planning=AgentPlanningPolicy(),
            ),
            Agent("child", FunctionModel(_child_model), tools=[publish]),
        ]
    )
    return AgentRunner(agent_loader=loader)


def test_cancelling_a_parent_closes_its_plan() -> None:
    runner = _runner()
    root = runner.run("parent", "go")
    assert root.status is AgentTurnStatus.WAITING_FOR_CHILD

    cancelled = runner.cancel(root.id)

    plan = cancelled.task_plan
    assert cancelled.status is AgentTurnStatus.CANCELLED and plan is not None
    assert [t.status for t in plan.tasks] == [TaskStatus.CANCELLED, TaskStatus.SKIPPED]
    [child_id] = runner.store.children_of(root.id)
    assert runner.store.load(child_id).status is AgentTurnStatus.CANCELLED


def test_resuming_a_child_directly_carries_the_tree_on() -> None:
    # Given a root waiting on a child that waits for approval
    runner = _runner()
    root = runner.run("parent", "go")
    [child_id] = runner.store.children_of(root.id)
    child = runner.restore(child_id)
    assert child.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    # When the child itself (not the root) is resumed
    resumed = runner.resume(child_id, AgentResumeCommand.approve_tool("pub"))
    # Then the call returns the child, and the root went on in the same call: the second
    # task's child now waits for its own approval
    assert resumed.id == child_id and resumed.status is AgentTurnStatus.COMPLETED
    root = runner.restore(root.id)
    assert root.status is AgentTurnStatus.WAITING_FOR_CHILD
    plan = root.task_plan
    assert plan is not None and [t.status for t in plan.tasks] == [
        TaskStatus.COMPLETED,
        TaskStatus.RUNNING,
    ]


def test_suspension_views_are_copies() -> None:
    runner = _runner()
    root = runner.run("parent", "go")
    view = root.suspension
    assert view is not None
    view.metadata["child_turn_ids"].append("forged")
    progress = root.task_progress
    assert progress is not None and progress.suspension is not None
    progress.suspension.metadata["child_turn_ids"].clear()

    stored = runner.store.load(root.id)
    assert stored.suspension is not None
    assert len(stored.suspension.metadata["child_turn_ids"]) == 1
    assert root.suspension is not None and len(root.suspension.metadata["child_turn_ids"]) == 1
