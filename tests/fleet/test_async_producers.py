"""``make_runner()``'s runner has the async producer API: Redis store, Celery wake-ups."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from agentworker.settings import Settings
from agentworker.wiring import create_app, make_runner
from runner_core import AgentResumeCommand, AgentRunner, AgentTurnStatus, InMemoryAgentLoader
from stores import RedisAgentTurnStore
from tests.support.agents import approval_agent
from tests.support.loop_watch import MAX_STALL_SECONDS, Ticker
from tests.support.servers import RedisServer

pytestmark = [pytest.mark.redis]


def loader() -> InMemoryAgentLoader:
    """What ``AGENTWORKER_AGENT_LOADER`` names for these runners."""
    return InMemoryAgentLoader([approval_agent()])


@pytest.fixture()
def fleet_runner(server: RedisServer) -> Iterator[AgentRunner]:
    settings = Settings(
        redis_url=server.url,
        broker_url=f"redis://127.0.0.1:{server.port}/1",
        namespace="p" + uuid.uuid4().hex[:8],
        agent_loader=f"{__name__}:loader",
    )
    app = create_app(settings)
    yield make_runner(settings, app)
    app.close()


def woken(server: RedisServer) -> list[str]:
    broker = redis.Redis(port=server.port, db=1)
    bodies = [
        json.loads(raw)["body"] for raw in reversed(broker.lrange("agentworker.steps", 0, -1))
    ]
    return [json.loads(base64.b64decode(body))[0][0] for body in bodies]


def test_the_fleet_runner_starts_resumes_and_cancels_from_a_loop(
    fleet_runner: AgentRunner, server: RedisServer
) -> None:
    # The app's first publish connects and imports the broker transport (once per process)
    fleet_runner.start("pay-agent", "warm up")
    redis.Redis(port=server.port, db=1).flushdb()
    waiting = fleet_runner.run("pay-agent", "pay")  # embedded steps, then async producers

    async def produce() -> tuple[AgentTurnStatus, AgentTurnStatus, str, float]:
        async with Ticker() as ticker:
            started = await fleet_runner.astart("pay-agent", "pay later")
            resumed = await fleet_runner.asubmit_resume(
                waiting.id, AgentResumeCommand.approve_tool("c1")
            )
            cancelled = await fleet_runner.acancel(started.id, "no")
        await fleet_runner.store.aclose()  # type: ignore[attr-defined]
        return resumed.status, cancelled.status, started.id, ticker.max_gap

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        resumed, cancelled, started_id, gap = asyncio.run(produce())

    assert gap < MAX_STALL_SECONDS, gap
    assert resumed is AgentTurnStatus.RUNNING and cancelled is AgentTurnStatus.CANCELLED
    assert woken(server) == [started_id, waiting.id]  # Celery step messages, turn ids only
    assert fleet_runner.store.load(started_id).status is AgentTurnStatus.CANCELLED


def _readme_python() -> list[str]:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S)


def test_the_readme_async_endpoints_serve_requests(
    server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the README's agents module and its async endpoints, on this test's Redis
    blocks = _readme_python()
    (tmp_path / "my_agents.py").write_text(blocks[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    namespace = "readme-" + uuid.uuid4().hex[:8]
    monkeypatch.setenv("AGENTWORKER_REDIS_URL", server.url)
    monkeypatch.setenv("AGENTWORKER_BROKER_URL", f"redis://127.0.0.1:{server.port}/1")
    monkeypatch.setenv("AGENTWORKER_NAMESPACE", namespace)
    monkeypatch.setenv("AGENTWORKER_AGENT_LOADER", "my_agents:loader")
    pattern = next(b for b in blocks if "astart" in b)
    scope: dict[str, Any] = {"__name__": "__readme__"}
    exec(compile(pattern, "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    worker = AgentRunner(
        turn_store=RedisAgentTurnStore(server.url, namespace=namespace),
        agent_loader=scope["runner"].loader,
    )

    with TestClient(scope["api"]) as http, warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        # When a turn is started over HTTP, a worker takes it to the approval
        started = http.post("/turns", json={"input": "Order 1001 arrived broken"})
        assert started.status_code == 201 and started.json()["status"] == "READY"
        turn_id = started.json()["id"]
        held = worker.claim(turn_id, "worker-1")
        assert held is not None
        with worker.holding(held):
            worker.run_until_blocked(held)
        assert held.status is AgentTurnStatus.WAITING_FOR_APPROVAL
        # And a person approves it over HTTP
        approved = http.post(f"/turns/{turn_id}/approve/call_1")

    # Then the turn is runnable again, for the workers
    assert approved.status_code == 200 and approved.json()["status"] == "RUNNING"
    assert worker.store.load(turn_id).status is AgentTurnStatus.RUNNING
    sys.modules.pop("my_agents", None)
