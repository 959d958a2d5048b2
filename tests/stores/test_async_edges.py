"""Async tools, ``ctx.deps`` and tool timeouts on every store, across runners and workers."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurnStatus,
    AgentTurnStore,
    AgentWorker,
    InMemoryAgentLoader,
    ToolMessage,
    tool,
)
from runner_core.testing import ScriptedModel, asks, tool_call

S = AgentTurnStatus


@pytest.fixture
def loader() -> InMemoryAgentLoader:
    return InMemoryAgentLoader()


@pytest.fixture
def make_runner(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> Callable[[], AgentRunner]:
    """Runners on separate store clients (separate processes in real life), one loader."""
    return lambda: AgentRunner(turn_store=make_store(), agent_loader=loader)


def deps_agent(seen: list[Any], made: list[int]) -> Agent:
    def build() -> dict[str, int]:
        made.append(os.getpid())
        return {"pid": os.getpid()}

    @tool
    async def look(order_id: str, ctx: AgentToolContext) -> str:
        """Look an order up."""
        await asyncio.sleep(0.001)
        seen.append(ctx.deps)
        return f"{ctx.idempotency_key}:{order_id}"

    @tool(requires_approval=True)
    def refund(ctx: AgentToolContext) -> str:
        """Refund it."""
        seen.append(ctx.deps)
        return "refunded"

    model = ScriptedModel(
        asks(tool_call("look", "c1", order_id="7")), asks(tool_call("refund", "c2")), "done"
    )
    return Agent("edges", model, tools=[look, refund], deps=build)


def test_a_worker_run_and_restored_turn_gets_the_process_deps(
    make_runner: Callable[[], AgentRunner], loader: InMemoryAgentLoader
) -> None:
    # Given an agent with an async tool, a deps factory and an approval in the middle
    seen: list[Any] = []
    made: list[int] = []
    agent = loader.register(deps_agent(seen, made))
    first, second = make_runner(), make_runner()

    # When one worker runs it to the approval and another finishes it after a restore
    turn = first.start(agent, "refund order 7")
    AgentWorker(first, worker_id="w1").run_until_idle()
    assert first.store.load(turn.id).status is S.WAITING_FOR_APPROVAL
    second.submit_resume(turn.id, AgentResumeCommand.approve_tool("c2"))
    AgentWorker(second, worker_id="w2").run_until_idle()
    done = second.restore(turn.id)

    # Then the async tool's result was saved, and both calls got the one process object
    assert done.status is S.COMPLETED
    results = [m for m in done.messages if isinstance(m, ToolMessage)]
    assert [m.content for m in results] == [f"{turn.id}:c1:7", "refunded"]
    assert made == [os.getpid()] and len(seen) == 2 and seen[0] is seen[1]


def test_a_timed_out_sync_tool_is_answered_and_saved(
    make_runner: Callable[[], AgentRunner],
) -> None:
    release = threading.Event()

    @tool(timeout=0.2)
    def stuck() -> str:
        """Hang."""
        release.wait(10)
        return "late"

    runner = make_runner()
    model = ScriptedModel(asks(tool_call("stuck")), "it timed out")
    try:
        turn = runner.start(Agent("stuck", model, tools=[stuck]), "go")
        AgentWorker(runner, worker_id="w1").run_until_idle()
    finally:
        release.set()

    stored = runner.restore(turn.id)
    assert stored.status is S.COMPLETED
    [answer] = [m for m in stored.messages if isinstance(m, ToolMessage)]
    assert answer.is_error and "tool 'stuck' timed out after 0.2 s" in answer.content
