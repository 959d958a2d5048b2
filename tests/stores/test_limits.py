"""Bad input on every store: typed errors, nothing stored, limits from the settings.

The store-touching rows of the census (tests/support/census.py) on the memory store, the
Redis store and the cluster; the Redis store also runs the async twins over asyncio.
"""

from __future__ import annotations

import uuid

import pytest

from agentworker.settings import Settings
from agentworker.wiring import make_runner
from runner_core import (
    AgentLimits,
    AgentRunner,
    AgentTurnStore,
    AgentWorkerError,
    InMemoryAgentLoader,
    PayloadTooLargeError,
    TurnNotFoundError,
)
from tests.support.agents import approval_agent
from tests.support.census import POLICY, RUNNER, Case, Scene
from tests.support.servers import RedisServer


@pytest.fixture
def scene(store: AgentTurnStore) -> Scene:
    runner = AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader(), policy=POLICY)
    return Scene.on(runner)


@pytest.mark.parametrize("case", RUNNER, ids=[case.id for case in RUNNER])
def test_bad_input_is_refused_and_nothing_is_stored(scene: Scene, case: Case) -> None:
    with pytest.raises(case.error) as caught:
        case.act(scene)

    assert isinstance(caught.value, AgentWorkerError)
    if case.field is not None:
        assert getattr(caught.value, "field", None) == case.field
    assert len(str(caught.value)) < 300
    scene.assert_nothing_changed()


def test_a_huge_unknown_id_is_cut_in_the_error(store: AgentTurnStore) -> None:
    runner = AgentRunner(turn_store=store)

    with pytest.raises(TurnNotFoundError) as caught:
        runner.cancel("x" * (1 << 20))

    assert len(str(caught.value)) < 200


@pytest.mark.redis
def test_the_settings_limits_bound_a_producer_on_redis(redis_server: RedisServer) -> None:
    # Given a producer wired from settings with a small input limit
    settings = Settings(
        redis_url=redis_server.url,
        namespace="lim-" + uuid.uuid4().hex[:8],
        max_input_bytes=64,
        max_metadata_bytes=32,
    )
    runner = make_runner(settings, require_agents=False)
    runner.loader = InMemoryAgentLoader([approval_agent()])
    assert runner.policy.limits == settings.limits

    # When a start is over the limit, Then it is refused and nothing is stored
    with pytest.raises(PayloadTooLargeError) as caught:
        runner.start(approval_agent(), "x" * 65, turn_id="over-the-limit")
    assert (caught.value.field, caught.value.limit) == ("input", 64)
    with pytest.raises(TurnNotFoundError):
        runner.store.load("over-the-limit")
    assert redis_server.client().keys("*over-the-limit*") == []


def test_the_history_limits_come_from_the_settings() -> None:
    settings = Settings(max_history_messages=3, max_history_bytes=4096)

    assert (settings.limits.max_history_messages, settings.limits.max_history_bytes) == (3, 4096)
    assert Settings().limits == AgentLimits()
