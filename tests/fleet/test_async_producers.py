"""``make_runner()``'s runner has the async producer API: Redis store, Celery wake-ups."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
import warnings
from collections.abc import Iterator

import pytest
import redis

from agentworker.settings import Settings
from agentworker.wiring import create_app, make_runner
from runner_core import AgentResumeCommand, AgentRunner, AgentTurnStatus, InMemoryAgentLoader
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
