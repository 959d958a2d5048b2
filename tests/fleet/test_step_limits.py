"""A step task stopped by Celery's soft time limit outside the step's own calls."""

from __future__ import annotations

import uuid

import pytest

from agentworker.settings import Settings
from agentworker.wiring import create_app
from runner_core import AgentTurnStatus
from tests.support.servers import RedisServer


def test_a_soft_time_limit_around_a_step_leaves_the_turn_to_its_next_wake_up(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker's app and a turn whose first step is interrupted by the soft limit
    monkeypatch.setenv("AGENTWORKER_REDIS_URL", server.url)
    monkeypatch.setenv("AGENTWORKER_NAMESPACE", "soft-" + uuid.uuid4().hex[:8])
    monkeypatch.setenv("AGENTWORKER_AGENT_LOADER", "tests.support.fleet_agents:pool_loader")
    app = create_app(Settings())
    runner = app.process.runner()
    step_turn = app.tasks["agentworker.step_turn"]
    turn = runner.start("e2e-interrupted", "go")
    # When the step task runs
    assert step_turn.run(turn.id) == "interrupted"
    # Then nothing was saved, the turn is not failed, and its lease is given back
    control = runner.store.peek(turn.id)
    assert control.status is AgentTurnStatus.READY and control.live_lease is None
    # and the next wake-up finishes it
    assert step_turn.run(turn.id) == "COMPLETED"
    final = runner.store.load(turn.id)
    assert final.final_output == "after the interruption"
