"""A process's message cache never lets a step commit on top of messages it did not verify.

Claims and commits compare the stored list's length with the header's count and its last
document with the last id; a commit that ends the turn checks every document's shape. So
messages spoiled behind a process that holds them in its cache quarantine the turn
instead of being built upon.
"""

from __future__ import annotations

import pytest

from agentworker.fleet.stepping import step_once
from runner_core import (
    Agent,
    AgentRunner,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelRequest,
    SnapshotCorruptedError,
    ToolCall,
    ToolMessage,
    tool,
)
from runner_core.store import Commit
from stores import RedisAgentTurnStore

S = AgentTurnStatus


@tool
def look() -> str:
    """Look around."""
    return "seen"


def one_call_then_answer(request: ModelRequest) -> AiMessage:
    if any(isinstance(m, ToolMessage) for m in request.messages):
        return AiMessage("done")
    return AiMessage(tool_calls=[ToolCall(id="c1", name="look", arguments={})])


def runner_on(store: RedisAgentTurnStore) -> AgentRunner:
    agent = Agent("looker", FunctionModel(one_call_then_answer), tools=[look])
    return AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader([agent]))


def spoil(store: RedisAgentTurnStore, turn_id: str, index: int) -> None:
    key = store.keys.messages(store.tag_of(turn_id), turn_id)
    store.redis.lset(key, index, '{"role": "nonsense"}')


def fresh(store: RedisAgentTurnStore) -> RedisAgentTurnStore:
    return RedisAgentTurnStore(store.url, namespace=store.keys.namespace)


def test_a_spoiled_earlier_message_never_reaches_a_terminal_record(
    redis_store: RedisAgentTurnStore,
) -> None:
    # Given a turn two steps in, its messages in this process's cache
    runner = runner_on(redis_store)
    turn = runner.start("looker", "go")
    assert step_once(runner, turn.id, "w1") == "RUNNING"  # the model asks for the tool
    assert step_once(runner, turn.id, "w1") == "RUNNING"  # the tool answered
    assert redis_store.cached_messages(turn.id)

    # When the first stored message is spoiled and this process takes the last step
    spoil(redis_store, turn.id, 0)
    assert step_once(runner, turn.id, "w1") == "quarantined"  # the task ends, nothing raised

    # Then nothing was recorded on top of it: quarantined, not COMPLETED, never claimed
    other = fresh(redis_store)
    assert other.peek(turn.id).status is S.RUNNING
    [(turn_id, reason, _)] = other.quarantined()
    assert turn_id == turn.id and "stored message 0 is not a message document" in reason
    with pytest.raises(SnapshotCorruptedError):
        other.claim(turn.id, "w2", other.now() + 3600, 1000)


def test_a_spoiled_last_message_refuses_the_claim(redis_store: RedisAgentTurnStore) -> None:
    runner = runner_on(redis_store)
    turn = runner.start("looker", "go")
    assert step_once(runner, turn.id, "w1") == "RUNNING"
    assert redis_store.cached_messages(turn.id)

    spoil(redis_store, turn.id, -1)

    assert step_once(runner, turn.id, "w1") == "quarantined"
    assert [t for t, _, _ in redis_store.quarantined()] == [turn.id]


@pytest.mark.parametrize("spoiling", ["lset", "rpush", "rpop", "delete"])
def test_a_commit_on_spoiled_messages_is_refused(
    redis_store: RedisAgentTurnStore, spoiling: str
) -> None:
    # Given a snapshot built on this process's cached messages
    runner = runner_on(redis_store)
    turn = runner.start("looker", "go")
    assert step_once(runner, turn.id, "w1") == "RUNNING"
    snapshot = redis_store.load(turn.id)
    key = redis_store.keys.messages(redis_store.tag_of(turn.id), turn.id)

    # When the stored list changes behind it
    r = redis_store.redis
    if spoiling == "lset":
        r.lset(key, -1, '{"role": "nonsense"}')
    elif spoiling == "rpush":
        r.rpush(key, '{"role": "nonsense"}')
    elif spoiling == "rpop":
        r.rpop(key)
    else:
        r.delete(key)
    snapshot.messages.append(AiMessage("more"))

    # Then the commit is refused and the turn quarantined
    with pytest.raises(SnapshotCorruptedError):
        redis_store.commit(Commit(snapshot, snapshot.version, request_id="r1"))
    assert [t for t, _, _ in redis_store.quarantined()] == [turn.id]
    assert fresh(redis_store).peek(turn.id).version == snapshot.version


def test_messages_with_any_ids_pass_the_checks(redis_store: RedisAgentTurnStore) -> None:
    runner = runner_on(redis_store)
    turn = runner.start("looker", "go")
    snapshot = redis_store.load(turn.id)
    for odd in ('a"quote', "back\\slash", "ünï cødé", "new\nline"):
        snapshot.messages.append(AiMessage("x", id=odd))
        redis_store.commit(Commit(snapshot, snapshot.version, odd))
        held = redis_store.claim(turn.id, "w", redis_store.now(), 1000)
        assert held is not None and held.lease is not None
        assert redis_store.release_lease(turn.id, "w", held.lease.lease_id)
        snapshot.version = held.version

    snapshot.status = S.COMPLETED
    redis_store.commit(Commit(snapshot, snapshot.version, "end"))

    assert fresh(redis_store).load(turn.id).status is S.COMPLETED
    assert redis_store.quarantined() == []
