"""One door, in-process: read-only events and snapshots, one lease length, projection on
restore, embedded cancel of a child, unique tool-call ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    InMemoryChatMemory,
    Message,
    ModelRequest,
    ToolCall,
    ToolMessage,
    tool,
)
from tests.support.plans import Scripted, World, create, planner, task
from tests.support.scripts import Script, agent, ask, call

S = AgentTurnStatus
E = AgentEventType


# -- 6. listeners and callers cannot change what runs ------------------------------


def test_a_listener_that_edits_tool_arguments_changes_nothing(runner: AgentRunner) -> None:
    received: list[dict[str, Any]] = []

    @tool(requires_approval=True)
    def refund(order: str, items: list[str]) -> str:
        """Refund."""
        received.append({"order": order, "items": list(items)})
        return "ok"

    def meddle(event: AgentEvent) -> None:
        if event.type in (E.TOOL_STARTED, E.TOOL_APPROVAL_REQUESTED):
            event.data["arguments"]["order"] = "someone else's"  # type: ignore[index]
        if event.type is E.TOOL_APPROVAL_REQUESTED:
            event.data["arguments"]["items"].append("a yacht")  # type: ignore[index]

    runner.add_event_listener(meddle)
    script = Script(ask(call("refund", "c1", order="o-1", items=["book"])), "done")
    turn = runner.run(agent(script, refund), "refund it")

    stored = runner.store.load(turn.id)
    assert stored.pending_tool_calls[0].arguments == {"order": "o-1", "items": ["book"]}
    assert stored.suspension is not None
    assert stored.suspension.metadata["arguments"] == {"order": "o-1", "items": ["book"]}
    from runner_core import AgentResumeCommand

    runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
    assert received == [{"order": "o-1", "items": ["book"]}]


def test_snapshots_and_pending_calls_a_caller_gets_are_read_only(runner: AgentRunner) -> None:
    @tool(requires_approval=True)
    def refund(order: str) -> str:
        """Refund."""
        return "ok"

    turn = runner.run(agent(Script(ask(call("refund", order="o-1"))), refund), "go")

    with pytest.raises(TypeError):
        turn.to_snapshot().pending_tool_calls[0].arguments["order"] = "x"
    with pytest.raises(TypeError):
        turn.pending_tool_calls[0].arguments["order"] = "x"
    copy = turn.to_snapshot()
    assert copy.suspension is not None
    copy.suspension.metadata["arguments"]["order"] = "x"  # a copy: its own to change
    assert runner.store.load(turn.id).pending_tool_calls[0].arguments == {"order": "o-1"}


def test_event_data_is_read_only_all_the_way_down(runner: AgentRunner) -> None:
    seen: list[AgentEvent] = []
    runner.add_event_listener(seen.append)

    @tool
    def look(tags: list[str]) -> str:
        """Look."""
        return "ok"

    runner.run(agent(Script(ask(call("look", tags=["a"])), "done"), look), "go")

    [started] = [e for e in seen if e.type is E.TOOL_STARTED]
    with pytest.raises(TypeError):
        started.data["arguments"]["tags"].append("b")
    with pytest.raises(TypeError):
        started.data["status"] = "x"  # type: ignore[index]


# -- 7. one lease length ------------------------------------------------


def test_a_turn_that_asks_for_a_longer_lease_gets_it_from_claim_and_heartbeat() -> None:
    store = InMemoryAgentTurnStore()
    runner = AgentRunner(turn_store=store, policy=AgentExecutionPolicy(lease_seconds=2))
    own = AgentExecutionPolicy(lease_seconds=30)
    turn = runner.start(agent(Script("hi")), "go", options=AgentTurnOptions(policy=own))

    held = runner.claim(turn.id, "w1")

    assert held is not None and held.held_lease is not None
    lease = store.peek(turn.id).lease
    assert lease is not None and lease.until - store.now() > 25  # renewed to 30 s at once
    assert held.held_lease.seconds == 30  # and renewed by that length
    runner.release(held)


def test_a_turn_policy_without_a_lease_keeps_the_workers_length() -> None:
    store = InMemoryAgentTurnStore()
    runner = AgentRunner(turn_store=store, policy=AgentExecutionPolicy(lease_seconds=2))
    own = AgentExecutionPolicy(max_steps=5)  # says nothing about leases
    turn = runner.start(agent(Script("hi")), "go", options=AgentTurnOptions(policy=own))

    held = runner.claim(turn.id, "w1")

    assert held is not None and held.held_lease is not None
    assert held.held_lease.seconds == 2
    lease = store.peek(turn.id).lease
    assert lease is not None and lease.until - store.now() <= 2
    runner.release(held)


# -- 9. projection on restore ------------------------------------------------


class CountingMemory(InMemoryChatMemory):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def add_messages(self, messages: Sequence[Message]) -> None:
        if messages:
            self.writes += 1
        super().add_messages(messages)


def test_restoring_an_ended_conversation_turn_writes_nothing_to_the_memory() -> None:
    memory = CountingMemory()
    runner = AgentRunner(chat_memory_provider=lambda _: memory)
    turn = runner.run(agent(Script("hello")), "hi", conversation_id="c1")
    assert turn.status is S.COMPLETED
    writes = memory.writes

    for _ in range(3):
        runner.restore(turn.id)

    assert memory.writes == writes
    assert [m.id for m in memory.messages] == [m.id for m in turn.new_messages]


# -- 10. embedded cancel of a child ------------------------------------------------


def test_cancelling_a_child_in_process_carries_the_tree_on() -> None:
    world = World()
    runner = AgentRunner(turn_store=world.store, agent_loader=world.loader)  # embedded

    @tool(requires_approval=True)
    def wait_here() -> str:
        """Needs a person."""
        return "ok"

    slow = Agent(
        "slow",
        FunctionModel(
            lambda r: (
                AiMessage("late")
                if any(isinstance(m, ToolMessage) for m in r.messages)
                else AiMessage(tool_calls=[ToolCall(id="w1", name="wait_here")])
            )
        ),
        tools=[wait_here],
    )
    world.register(slow)
    model = Scripted(create(task("a", agent="slow")), "summary")
    root = runner.run(planner(model, subs=("slow",)), "go")
    assert root.status is S.WAITING_FOR_CHILD
    [child_id] = world.store.children_of(root.id)
    assert world.store.load(child_id).status is S.WAITING_FOR_APPROVAL

    runner.cancel(child_id, "not needed")

    # the parent heard of it and went on in the same call, as it would after a resume
    after = runner.restore(root.id)
    assert world.store.load(child_id).status is S.CANCELLED
    assert after.status is not S.RUNNING and after.status is not S.WAITING_FOR_CHILD
    assert after.task_plan is not None and after.task_plan.tasks[0].status.value == "CANCELLED"


# -- 11. unique call ids ------------------------------------------------


def test_a_call_id_repeated_in_one_response_runs_two_tools_under_two_ids(
    runner: AgentRunner,
) -> None:
    ran: list[str] = []

    @tool
    def add(n: int) -> str:
        """Add."""
        from runner_core import AgentToolContext

        ran.append(AgentToolContext.current().call_id)
        return str(n)

    script = Script(ask(call("add", "dup", n=1), call("add", "dup", n=2)), "done")
    turn = runner.run(agent(script, add), "go")

    assert turn.status is S.COMPLETED
    assert len(ran) == 2 and len(set(ran)) == 2 and ran[0] == "dup"
    calls = [c for m in turn.messages if isinstance(m, AiMessage) for c in m.tool_calls]
    assert [c.original_id for c in calls] == [None, "dup"]
    results = [m.call_id for m in turn.messages if isinstance(m, ToolMessage)]
    assert results == [c.id for c in calls]  # every call answered under its own id


def test_a_model_reusing_one_id_in_every_response_gets_fresh_ids(runner: AgentRunner) -> None:
    ran: list[str] = []

    @tool
    def step(n: int) -> str:
        """Step."""
        from runner_core import AgentToolContext

        ran.append(AgentToolContext.current().call_id)
        return "ok"

    def answer(request: ModelRequest) -> AiMessage:
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        if done == 3:
            return AiMessage("done")
        return AiMessage(tool_calls=[ToolCall(id="call_0", name="step", arguments={"n": done})])

    turn = runner.run(Agent("loop", FunctionModel(answer), tools=[step]), "go")

    assert turn.status is S.COMPLETED
    assert len(set(ran)) == 3 and ran[0] == "call_0"
    # the model sees a consistent history: each result answers the call with its id
    calls = [c.id for m in turn.messages if isinstance(m, AiMessage) for c in m.tool_calls]
    assert calls == [m.call_id for m in turn.messages if isinstance(m, ToolMessage)]


def test_unique_ids_are_deterministic(make_runner: Any, loader: InMemoryAgentLoader) -> None:
    def run() -> list[str]:
        script = Script(ask(call("add", "x"), call("add", "x")), "done")

        @tool
        def add() -> str:
            """Add."""
            return "ok"

        turn = make_runner().run(agent(script, add), "go")
        calls = [c.id for m in turn.messages if isinstance(m, AiMessage) for c in m.tool_calls]
        return [c.replace(turn.id, "T") for c in calls]

    assert run() == run() == ["x", "T-1-1"]
