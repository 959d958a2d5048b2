"""The AgentRunner end to end on every store, and a redis-server restart mid-run."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runner_core import (
    Agent,
    AgentRunner,
    AgentTurnStatus,
    AgentTurnStore,
    InMemoryAgentLoader,
)
from stores import RedisAgentTurnStore
from tests.support import scenarios
from tests.support.servers import RedisServer

S = AgentTurnStatus


@pytest.fixture
def make_runner(make_store: Callable[[], AgentTurnStore]) -> Callable[[], AgentRunner]:
    """Runners on separate store clients (separate processes in real life), one loader."""
    loader = InMemoryAgentLoader()
    return lambda: AgentRunner(turn_store=make_store(), agent_loader=loader)


def test_a_tool_turn(make_runner: Callable[[], AgentRunner]) -> None:
    scenarios.tool_turn(make_runner(), calls=10)


def test_an_approval_from_a_second_runner(make_runner: Callable[[], AgentRunner]) -> None:
    scenarios.approval_from_a_second_runner(make_runner)


def test_a_planning_turn_with_children(make_runner: Callable[[], AgentRunner]) -> None:
    scenarios.planning_with_children(make_runner())


def test_worker_mode(make_runner: Callable[[], AgentRunner]) -> None:
    scenarios.worker_mode(make_runner())


def test_a_conversation(store: AgentTurnStore) -> None:
    scenarios.conversation(store)


@pytest.mark.redis
def test_a_redis_restart_mid_run_loses_nothing(own_redis: RedisServer) -> None:
    # Given a turn run partway under a worker's lease on the Redis store
    store = RedisAgentTurnStore(own_redis.url, namespace="restart")
    runner = AgentRunner(turn_store=store)
    agent = Agent("adder", scenarios.counting_model(4), tools=[scenarios.add])
    turn = runner.start(agent, "add four times")
    for _ in range(4):
        held = runner.claim(turn.id, "w1")
        assert held is not None
        with runner.holding(held):
            runner.step(held)
    before = store.load(turn.id)
    assert before.status is S.RUNNING and len(before.messages) == 5

    # When redis-server is killed (AOF, fsync always) and started again
    own_redis.restart(kill=True)
    assert not any(
        own_redis.client().script_exists(*(s.sha for s in store.scripts.by_name.values()))
    )

    # Then the scripts are reloaded (NOSCRIPT), the turn continues and nothing was lost
    assert store.load(turn.id).model_dump() == before.model_dump()
    while True:
        held = runner.claim(turn.id, "w2")
        if held is None:
            break
        with runner.holding(held):
            runner.step(held)
    done = store.load(turn.id)
    assert done.status is S.COMPLETED and done.final_output == "done"
    assert done.messages[:5] == before.messages
    assert len(done.messages) == 10
    # and a cold process sees the same
    cold = RedisAgentTurnStore(own_redis.url, namespace="restart")
    assert cold.load(turn.id).messages == done.messages
