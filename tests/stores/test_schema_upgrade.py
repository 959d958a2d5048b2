"""Records written by schema version 1 are claimed, stepped and read; commits write 2.

On Redis and in memory: a turn is stored, then turned back into what version 1 wrote.
"""

from __future__ import annotations

import json

import pytest

from runner_core import (
    Agent,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    ModelRequest,
    SnapshotCorruptedError,
    ToolCall,
    ToolMessage,
    tool,
)
from runner_core.snapshot import SCHEMA_VERSION, load_snapshot
from stores.redis import RedisAgentTurnStore
from tests.support.commits import save


@tool(requires_approval=True)
def look(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def answer(request: ModelRequest) -> AiMessage:
    if isinstance(request.messages[-1], ToolMessage):
        return AiMessage("done: " + request.messages[-1].content)
    return AiMessage(tool_calls=[ToolCall(id="c1", name="look", arguments={"q": "x"})])


def runner_on(store: AgentTurnStore) -> AgentRunner:
    agent = Agent("looker", FunctionModel(answer), tools=[look])
    return AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader([agent]))


def as_version_1(store: RedisAgentTurnStore, turn_id: str) -> None:
    """Rewrite a stored turn as version 1 wrote it: ``sv`` 1, bodies without provider data."""
    r = store.redis
    tag = store.tag_of(turn_id)
    header, messages = store.keys.header(tag, turn_id), store.keys.messages(tag, turn_id)
    body = json.loads(r.hget(header, "body"))
    body["schema_version"] = 1
    for call in body.get("pending_tool_calls", []):
        call.pop("provider_data", None)
    r.hset(header, mapping={"sv": "1", "body": json.dumps(body, separators=(",", ":"))})
    docs = [json.loads(d) for d in r.lrange(messages, 0, -1)]
    for doc in docs:
        doc.pop("provider_data", None)
        for call in doc.get("tool_calls", []):
            call.pop("provider_data", None)
    r.delete(messages)
    r.rpush(messages, *(json.dumps(d, separators=(",", ":")) for d in docs))


def test_a_version_1_record_is_read_resumed_and_finished(
    redis_store: RedisAgentTurnStore,
) -> None:
    # Given a turn waiting for approval, stored as version 1 wrote it
    turn = runner_on(redis_store).run("looker", "find x")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    as_version_1(redis_store, turn.id)
    header = redis_store.keys.header(redis_store.tag_of(turn.id), turn.id)
    assert redis_store.redis.hget(header, "sv") == b"1"

    # When another process reads it, approves the call and runs the turn to its end
    other = RedisAgentTurnStore(redis_store.url, namespace=redis_store.keys.namespace)
    try:
        read = other.load(turn.id)
        assert read.schema_version == SCHEMA_VERSION
        assert read.pending_tool_calls[0].arguments == {"q": "x"}
        runner = runner_on(other)
        runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
        done = runner.run_until_blocked(runner.restore(turn.id))
    finally:
        other.close()

    # Then it completes, and the record is now written in the current schema
    assert done.status is AgentTurnStatus.COMPLETED
    assert done.final_output == "done: found x"
    assert redis_store.redis.hget(header, "sv") == str(SCHEMA_VERSION).encode()
    body = json.loads(redis_store.redis.hget(header, "body"))
    assert body["schema_version"] == SCHEMA_VERSION


def test_a_runnable_version_1_record_is_claimed(redis_store: RedisAgentTurnStore) -> None:
    runner = runner_on(redis_store)
    turn = runner.start("looker", "find x")
    as_version_1(redis_store, turn.id)

    claimed = runner.claim(turn.id, "w1")

    assert claimed is not None
    assert claimed.to_snapshot().schema_version == SCHEMA_VERSION
    runner.release(claimed)


@pytest.mark.parametrize("sv", ["0", "3", "99"])
def test_a_record_of_an_unknown_version_is_refused(
    redis_store: RedisAgentTurnStore, sv: str
) -> None:
    runner = runner_on(redis_store)
    turn = runner.start("looker", "find x")
    header = redis_store.keys.header(redis_store.tag_of(turn.id), turn.id)
    redis_store.redis.hset(header, "sv", sv)

    with pytest.raises(SnapshotCorruptedError, match="unknown record version"):
        runner.claim(turn.id, "w1")


def test_a_version_1_record_loaded_into_memory_is_finished() -> None:
    # Given a version-1 record of a turn waiting for approval (written, then turned back)
    first = InMemoryAgentTurnStore()
    turn = runner_on(first).run("looker", "find x")
    record = json.loads(first.load(turn.id).model_dump_json())
    record["schema_version"] = 1
    for doc in [*record["messages"], *record["pending_tool_calls"]]:
        doc.pop("provider_data", None)
        for call in doc.get("tool_calls", []):
            call.pop("provider_data", None)
    record.update(version=-1, lease=None)

    # When it is loaded into another store and continued there
    second = InMemoryAgentTurnStore()
    save(second, load_snapshot(json.dumps(record), turn.id), -1)
    runner = runner_on(second)
    runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
    done = runner.run_until_blocked(runner.restore(turn.id))

    # Then it completes on the current schema
    assert done.status is AgentTurnStatus.COMPLETED
    assert done.final_output == "done: found x"
    assert second.load(turn.id).schema_version == SCHEMA_VERSION
