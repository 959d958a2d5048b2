"""Runner scenarios that exercise a store end to end: tools, approval, planning, workers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner_core import (
    Agent,
    AgentPlanningPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurn,
    AgentTurnStatus,
    AgentTurnStore,
    AgentWorker,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryChatMemory,
    ModelRequest,
    ToolCall,
    ToolMessage,
    UserMessage,
    tool,
)

S = AgentTurnStatus


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def counting_model(calls: int) -> FunctionModel:
    """Asks for ``calls`` additions (one per response), then answers ``done``."""

    def answer(request: ModelRequest) -> AiMessage:
        done = 0
        for message in reversed(request.messages):
            if isinstance(message, UserMessage):
                break
            done += isinstance(message, ToolMessage)
        if done < calls:
            call = ToolCall(id=f"c{done}", name="add", arguments={"a": done, "b": 1})
            return AiMessage(tool_calls=[call])
        return AiMessage("done")

    return FunctionModel(answer)


def tool_turn(runner: AgentRunner, calls: int = 3) -> None:
    """A turn with ``calls`` tool calls runs to COMPLETED with every message stored."""
    turn = runner.run(Agent("adder", counting_model(calls), tools=[add]), "add things")
    assert turn.status is S.COMPLETED and turn.final_output == "done"
    stored = runner.store.load(turn.id)
    assert stored.messages == turn.messages
    assert len(stored.messages) == 2 + 2 * calls
    assert [m.content for m in stored.messages if isinstance(m, ToolMessage)] == [
        str(i + 1) for i in range(calls)
    ]


def approval_from_a_second_runner(make_runner: Callable[[], AgentRunner]) -> None:
    """Runner A suspends for approval; runner B approves; the tool runs once."""
    ledger: list[str] = []

    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        ledger.append(order_id)
        return f"refunded {order_id}"

    replies = iter(
        [AiMessage(tool_calls=[ToolCall(id="r1", name="refund", arguments={"order_id": "7"})])]
    )
    model = FunctionModel(lambda request: next(replies, AiMessage("Refunded.")))
    agent = Agent("refunds", model, tools=[refund])
    first = make_runner()
    turn = first.run(agent, "refund order 7")
    assert turn.status is S.WAITING_FOR_APPROVAL and ledger == []

    done = make_runner().resume(turn.id, AgentResumeCommand.approve_tool("r1"))
    assert done.status is S.COMPLETED and done.final_output == "Refunded."
    assert ledger == ["7"]
    assert first.restore(turn.id).status is S.COMPLETED


def planning_with_children(runner: AgentRunner) -> AgentTurn:
    """A plan of three tasks (two parallel, one dependent) runs as child turns."""

    def worker_answer(request: ModelRequest) -> AiMessage:
        task = request.messages[-1]
        assert isinstance(task, UserMessage)
        return AiMessage(f"result of: {task.text.splitlines()[1]}")

    tasks: list[dict[str, Any]] = [
        {"id": "a", "description": "find the facts"},
        {"id": "b", "description": "find the figures"},
        {"id": "c", "description": "write it up", "depends_on": ["a", "b"]},
    ]
    plan = ToolCall(id="p1", name="create_task_plan", arguments={"goal": "report", "tasks": tasks})
    replies = iter([AiMessage(tool_calls=[plan])])
    planner = Agent(
        "planner",
        FunctionModel(lambda request: next(replies, AiMessage("the report"))),
        sub_agents=["researcher"],
        planning=AgentPlanningPolicy(),
    )
    assert isinstance(runner.loader, InMemoryAgentLoader)
    runner.loader.register(Agent("researcher", FunctionModel(worker_answer)))

    root = runner.run(planner, "write a report")

    assert root.status is S.COMPLETED and root.final_output == "the report"
    children = runner.store.children_of(root.id)
    assert len(children) == 3
    for child_id in children:
        child = runner.store.load(child_id)
        assert (child.status, child.parent_turn_id, child.root_turn_id) == (
            S.COMPLETED,
            root.id,
            root.id,
        )
    assert root.task_plan is not None
    assert [t.status.value for t in root.task_plan.tasks] == ["COMPLETED"] * 3
    assert runner.store.find_terminal_children_with_waiting_parent(10) == []
    return root


def worker_mode(runner: AgentRunner) -> None:
    """Turns started for workers are claimed, stepped under leases and released."""
    agent = Agent("adder", counting_model(2), tools=[add])
    turns = [runner.start(agent, f"job {i}") for i in range(3)]
    steps = AgentWorker(runner, worker_id="poller").run_until_idle()
    assert steps == 3 * 5
    for turn in turns:
        stored = runner.store.load(turn.id)
        assert stored.status is S.COMPLETED and stored.lease is None


def conversation(store: AgentTurnStore) -> None:
    """Two turns in one conversation; the second sees the first through chat memory."""
    memories: dict[str, InMemoryChatMemory] = {}
    # the store's own chat memory where it has one (Redis), else one per conversation here
    provider = getattr(store, "chat_memory", None) or (
        lambda cid: memories.setdefault(cid, InMemoryChatMemory())
    )
    runner = AgentRunner(turn_store=store, chat_memory_provider=provider)

    agent = Agent("chat", FunctionModel(lambda request: AiMessage(f"{len(request.messages)}")))
    first = runner.run(agent, "hi", conversation_id="conv-scenario")
    second = runner.run(agent, "again", conversation_id="conv-scenario")
    assert (first.final_output, second.final_output) == ("1", "3")
    assert store.find_active_turn("conv-scenario") is None
