"""Event stream readers and the asyncio client (HTTP API) on the cluster."""

from __future__ import annotations

import asyncio

from agentworker.http.sse import already_over
from agentworker.notify.streams import (
    RedisEventBridge,
    bridge_client,
    end_id,
    follow,
    read_events_async,
)
from runner_core import Agent, AgentRunner, AiMessage, FunctionModel, InMemoryAgentLoader
from stores import RedisAgentTurnStore
from stores.redis.connection import async_client, is_cluster, make_client
from tests.support.cluster import LocalCluster


def test_a_turn_on_the_cluster_is_followed_by_the_cli_and_the_http_readers(
    redis_cluster: LocalCluster, namespace: str
) -> None:
    # Given a turn run to its end on the cluster store, provisional events bridged
    store = RedisAgentTurnStore(redis_cluster.url, namespace=namespace)
    agent = Agent("hi", FunctionModel(lambda r: AiMessage("hello")))
    runner = AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader([agent]))
    bridge = RedisEventBridge(bridge_client(redis_cluster.url), namespace)
    assert is_cluster(bridge.redis)
    runner.add_event_listener(bridge)
    turn = runner.run("hi", "hello?")
    assert turn.final_output == "hello"

    # Then `turns tail` (a sync cluster client) reads every committed event to the end
    client = make_client(redis_cluster.url)
    events = [e for _, e in follow(client, namespace, turn.id, timeout=5)]
    assert events[-1]["type"] == "TURN_COMPLETED"
    assert [e["sequence"] for e in events if "sequence" in e] == sorted(
        e["sequence"] for e in events if "sequence" in e
    )
    last = end_id(client, namespace, turn.id)
    assert last is not None

    # and the HTTP API's asyncio cluster client reads the same stream
    async def read() -> tuple[int, bool]:
        aclient = async_client(redis_cluster.url)
        try:
            entries = await read_events_async(aclient, namespace, turn.id)
            return len(entries), await already_over(aclient, namespace, turn.id, last)
        finally:
            await aclient.aclose()

    count, over = asyncio.run(read())
    assert count >= len([e for e in events if "sequence" in e]) and over
    store.close()
