"""Thinking blocks survive Redis: another runner, on its own store, replays them exactly.

One runner takes the first model answer (thinking, a signature, a redacted block, two
calls of a tool that needs approval) and parks the turn; a second runner, with a fresh
store connection, agent and model, approves and continues. The local Messages API server
refuses the follow-up unless the blocks come back unchanged and the two results share
one user message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tests.support.anthropic_server as wire
from runner_core import (
    Agent,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AiMessage,
    InMemoryAgentLoader,
    tool,
)
from runner_core.models import AnthropicChatModel
from stores import RedisAgentTurnStore
from tests.support.anthropic_server import AnthropicServer
from tests.support.servers import RedisServer

THOUGHT = wire.thinking("Refund both orders, one call each.", "sig-restored")
HIDDEN = wire.redacted("UkVEQUNURUQ=")
CALLS = (
    wire.tool_use("toolu_1", "refund", {"order": "A-1"}),
    wire.tool_use("toolu_2", "refund", {"order": "B-2"}),
)


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    srv = AnthropicServer().start()
    yield srv
    srv.stop()


def refund_agent(server: AnthropicServer) -> Agent:
    @tool(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    model = AnthropicChatModel(
        "claude-test",
        base_url=server.base_url,
        timeout=5.0,
        settings={"thinking": {"type": "enabled", "budget_tokens": 1024}},
    )
    return Agent(id="refunds", model=model, instructions="Refund.", tools=[refund])


def expects_replay(body: dict[str, Any]) -> None:
    user, decision, results = body["messages"]
    assert decision["role"] == "assistant"
    assert decision["content"][:2] == [THOUGHT, HIDDEN], "thinking must come back as sent"
    assert [b.get("id") for b in decision["content"][2:]] == ["toolu_1", "toolu_2"]
    assert results["role"] == "user"
    assert [(r["type"], r["tool_use_id"]) for r in results["content"]] == [
        ("tool_result", "toolu_1"),
        ("tool_result", "toolu_2"),
    ]


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_another_runner_replays_thinking_restored_from_redis(
    server: AnthropicServer, redis_server: RedisServer, namespace: str, streaming: bool
) -> None:
    reply = wire.stream if streaming else wire.message
    server.script(
        reply(THOUGHT, HIDDEN, *CALLS),
        reply(wire.text("Both refunded."), expect=expects_replay),
    )
    options = AgentTurnOptions(streaming=streaming)

    # Given a turn parked for approval after an answer with thinking, by one runner
    first_store = RedisAgentTurnStore(redis_server.url, namespace=namespace)
    first = AgentRunner(turn_store=first_store, agent_loader=InMemoryAgentLoader())
    turn = first.run(refund_agent(server), "Refund A-1 and B-2.", options=options)
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    first_store.close()

    # When another runner, on its own store and agent, approves both calls
    second_store = RedisAgentTurnStore(redis_server.url, namespace=namespace)
    loader = InMemoryAgentLoader([refund_agent(server)])
    second = AgentRunner(turn_store=second_store, agent_loader=loader)
    [decision] = [m for m in second.restore(turn.id).messages if isinstance(m, AiMessage)]
    command = AgentResumeCommand.approve_tools(["toolu_1", "toolu_2"])
    turn = second.resume(turn.id, command)
    second_store.close()

    # Then the restored message held the blocks and the follow-up carried them
    assert decision.provider_data is not None
    assert decision.provider_data["anthropic"]["thinking"] == [THOUGHT, HIDDEN]
    assert server.refused == []
    assert turn.status is AgentTurnStatus.COMPLETED, turn.error
    assert turn.final_output == "Both refunded."
