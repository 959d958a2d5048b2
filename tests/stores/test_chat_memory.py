"""Chat memories: the in-memory one and the Redis one keep the same promises."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runner_core import (
    Agent,
    AgentRunner,
    AiMessage,
    ChatMemory,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryChatMemory,
    ModelRequest,
    SystemMessage,
    UserMessage,
)
from stores import RedisAgentTurnStore


@pytest.fixture(params=["memory", "redis", "cluster"])
def memory(request: pytest.FixtureRequest, namespace: str) -> Iterator[ChatMemory]:
    if request.param == "memory":
        yield InMemoryChatMemory()
        return
    if request.param == "cluster":
        url = request.getfixturevalue("redis_cluster").url
    else:
        url = request.getfixturevalue("redis_server").url
    store = RedisAgentTurnStore(url, namespace=namespace)
    yield store.chat_memory("conv-1")
    store.close()


def test_adding_is_idempotent_by_message_id(memory: ChatMemory) -> None:
    a, b, c = UserMessage("a"), AiMessage("b"), UserMessage("c")
    memory.add_messages([a, b])
    memory.add_messages([a, b, c])
    memory.add_messages([])
    assert memory.get_model_messages(None) == [a, b, c]
    assert memory.get_model_messages(2) == [b, c]
    assert memory.get_model_messages(0) == []


def test_messages_round_trip_exactly(memory: ChatMemory) -> None:
    system = SystemMessage("s")
    rich = UserMessage([{"type": "text", "text": "look"}, {"type": "image", "url": "data:x"}])
    memory.add_messages([system, rich])
    assert memory.get_model_messages(None) == [system, rich]


def test_two_runners_share_a_redis_conversation(redis_store: RedisAgentTurnStore) -> None:
    seen: list[list[str]] = []

    def model(request: ModelRequest) -> AiMessage:
        seen.append([m.role for m in request.messages])
        return AiMessage(f"answer {len(seen)}")

    agent = Agent("chat", FunctionModel(model), instructions="be brief")
    runners = [
        AgentRunner(
            turn_store=redis_store,
            agent_loader=InMemoryAgentLoader([agent]),
            chat_memory_provider=redis_store.chat_memory,
        )
        for _ in range(2)
    ]
    runners[0].run("chat", "first", conversation_id="c-shared")
    second = runners[1].run("chat", "second", conversation_id="c-shared")
    assert second.final_output == "answer 2"
    assert seen[1] == ["system", "user", "assistant", "user"]
    stored = redis_store.chat_memory("c-shared").get_model_messages(None)
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
