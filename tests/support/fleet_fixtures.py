"""End-to-end fixtures: a private redis-server and real Celery worker processes."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentworker.fleet.app import create_app
from agentworker.settings import Settings
from agentworker.wiring import make_runner
from runner_core import (
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentTurnStatus,
    RetryPolicy,
)
from tests.support.servers import Fleet, RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-e2e")).start()
    yield server
    server.stop()


@pytest.fixture()
def fleet_env(redis_server: RedisServer) -> dict[str, str]:
    """Settings shared by the workers and the test's producer (a fresh namespace each)."""
    return {
        "AGENTWORKER_REDIS_URL": redis_server.url,
        "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{redis_server.port}/1",
        "AGENTWORKER_NAMESPACE": "e2e-" + uuid.uuid4().hex[:8],
        "AGENTWORKER_AGENT_LOADER": "tests.support.fleet_agents:loader",
        "AGENTWORKER_LEASE_SECONDS": "2",
        "AGENTWORKER_SWEEP_INTERVAL": "0.5",
        "AGENTWORKER_LOST_WAKEUP_SECONDS": "2",
        "AGENTWORKER_STEP_TIME_LIMIT": "30",
        "AGENTWORKER_VISIBILITY_TIMEOUT": "60",
    }


@pytest.fixture()
def fleet(fleet_env: dict[str, str], tmp_path: Path, redis_server: RedisServer) -> Iterator[Fleet]:
    redis_server.client().flushall()
    f = Fleet(fleet_env, tmp_path / "logs")
    try:
        yield f
    finally:
        f.stop()


@pytest.fixture()
def producer_env(fleet_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key, value in fleet_env.items():
        monkeypatch.setenv(key, value)
    assert os.environ["AGENTWORKER_REDIS_URL"] == fleet_env["AGENTWORKER_REDIS_URL"]
    return fleet_env


RETRYING = AgentTurnOptions(
    policy=AgentExecutionPolicy(
        lease_seconds=2, retry=RetryPolicy(max_retries=3, initial_delay=0.2)
    )
)


def producer() -> AgentRunner:
    settings = Settings()
    return make_runner(settings, create_app(settings))


def drive(
    runner: AgentRunner, turn_ids: list[str], timeout: float = 90.0
) -> dict[str, AgentTurnSnapshot]:
    """Play the humans (approve, fill forms) until every turn has ended."""
    deadline = time.monotonic() + timeout
    final: dict[str, AgentTurnSnapshot] = {}
    while time.monotonic() < deadline:
        for turn_id in turn_ids:
            if turn_id in final:
                continue
            s = runner.store.load(turn_id)
            if s.status.is_terminal:
                final[turn_id] = s
            elif s.status is AgentTurnStatus.WAITING_FOR_APPROVAL and s.suspension:
                cmd = AgentResumeCommand.approve_tool(s.suspension.correlation_id or "")
                runner.submit_resume(turn_id, cmd.with_metadata(approver="e2e"))
            elif s.status is AgentTurnStatus.WAITING_FOR_USER and s.suspension:
                runner.submit_resume(turn_id, AgentResumeCommand.user_input({"city": "Oslo"}))
        if len(final) == len(turn_ids):
            return final
        time.sleep(0.1)
    missing = {t: runner.store.load(t).status.value for t in turn_ids if t not in final}
    raise AssertionError(f"turns not finished after {timeout}s: {missing}")
