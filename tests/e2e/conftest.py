"""End-to-end fixtures: a private redis-server and real Celery worker processes."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.local import Fleet, RedisServer


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
        "AGENTWORKER_AGENT_LOADER": "tests.e2e.agents:loader",
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
