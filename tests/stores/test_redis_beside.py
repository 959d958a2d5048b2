"""The Redis records beside the turn store: webhook outbox, event streams, gates, ledger.

Each runs on one server and on the cluster: their keys are plain single-key commands (no
script), so a cluster client must route every one of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from redis import Redis

from runner_core import AgentEvent, AgentEventType
from stores.redis import (
    AsyncEventStreams,
    EventStreams,
    Keyspace,
    RedisOutbox,
    RequestRecords,
    SweepGate,
    async_client,
    make_client,
)
from tests.support.cluster import LocalCluster
from tests.support.servers import RedisServer


@pytest.fixture(params=["redis", "cluster"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        return cluster.url
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def client(url: str) -> Iterator[Redis]:
    c = make_client(url)
    yield c
    c.close()


def event(kind: AgentEventType, turn: str, root: str, seq: int = 0) -> AgentEvent:
    """A committed event numbered ``seq``, or a provisional one (``seq`` 0)."""
    return AgentEvent(
        f"e{seq}", kind, turn, root, None, "agent", "1", seq, time.time(), {}, seq == 0
    )


def test_the_outbox_records_a_delivery_once_and_settles_it(client: Redis, namespace: str) -> None:
    # Given a recorded delivery
    outbox = RedisOutbox(client, Keyspace(namespace))
    fields = {"url": "http://x", "subscription": "s", "body": b"{}", "attempts": 0}
    assert outbox.record("msg_1", "t1", fields, time.time() - 1, 60)
    assert not outbox.record("msg_1", "t1", fields, time.time() - 1, 60)  # a duplicate
    assert outbox.due(time.time(), 10) == ["msg_1"]

    # When it is held, locked, and settled as dead
    outbox.hold(["msg_1", "msg_never_recorded"], time.time() + 60)
    assert outbox.due(time.time(), 10) == []
    assert outbox.lock("msg_1", 10) and not outbox.lock("msg_1", 10)
    outbox.settle("msg_1", 1, '{"outcome": "500"}', "dead", time.time(), 60)
    outbox.unlock("msg_1")

    # Then its record, log and dead mark say so, under the documented keys
    assert outbox.fields("msg_1")["state"] == b"dead"
    assert outbox.dead_since("msg_1") is not None
    (delivery,) = outbox.log_of("t1")
    assert delivery.message_id == "msg_1" and delivery.attempts == [b'{"outcome": "500"}']
    assert client.exists(f"{namespace}:wh:d:msg_1", f"{namespace}:wh:log:t1") == 2
    assert client.zscore(f"{namespace}:wh:due", "msg_never_recorded") is None


def test_the_outbox_checks_expected_turns_once(client: Redis, namespace: str) -> None:
    outbox = RedisOutbox(client, Keyspace(namespace))
    outbox.expect("t1", 100.0)
    outbox.expect("t1", 500.0)  # an earlier check stays
    assert outbox.expected(99.0, 10) == [] and outbox.expected(100.0, 10) == ["t1"]
    outbox.checked(["t1"])
    assert outbox.expected(1e12, 10) == []


def test_the_sweep_gate_lets_one_sweep_wait(client: Redis, namespace: str) -> None:
    gate = SweepGate(client, Keyspace(namespace), 30)
    assert gate.acquire() and not gate.acquire()
    assert 0 < client.pttl(f"{namespace}:sweep:pending") <= 30_000
    gate.release()
    assert gate.acquire()


def test_the_request_ledger_keeps_one_record_per_tenant_and_id(url: str, namespace: str) -> None:
    async def scenario() -> None:
        client = async_client(url)
        try:
            records = RequestRecords(client, Keyspace(namespace))
            assert await records.claim("acme", "r1", "pending", 60)
            assert not await records.claim("acme", "r1", "again", 60)
            assert await records.claim("other", "r1", "theirs", 60)  # another tenant's id
            await records.put("acme", "r1", "done", 60)
            assert await records.get("acme", "r1") == "done"
            await records.forget("acme", "r1")
            assert await records.get("acme", "r1") is None
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_streams_append_read_and_end_a_tree(client: Redis, url: str, namespace: str) -> None:
    # Given a tree whose root id has an index entry (its tag, as the store writes it)
    keys = Keyspace(namespace)
    client.set(keys.turn_index("root"), "tag-1")
    streams = EventStreams(client, keys)

    # When a provisional event, then the root's terminal event, are appended
    streams.append([event(AgentEventType.MODEL_STARTED, "root", "root")], 100, 60)
    streams.append([event(AgentEventType.TURN_COMPLETED, "root", "root", 1)], 100, 60)

    # Then both are read in order, the end is known, and the stream expires
    entries = streams.read("root", "0-0", None, 10)
    assert [e["type"] for _, e in entries] == ["MODEL_STARTED", "TURN_COMPLETED"]
    assert entries[1][1]["sequence"] == 1
    assert streams.end_id("root") == entries[1][0]
    assert [e.sequence for e in streams.committed("tag-1", "root", 10)] == [1]
    assert 0 < client.ttl(keys.events("tag-1", "root")) <= 60

    async def from_asyncio() -> tuple[bool, str | None, int]:
        aclient = async_client(url)
        try:
            reader = AsyncEventStreams(aclient, keys)
            found = await reader.read("root", "0-0", None, 10)
            return await reader.exists("root"), await reader.end_id("root"), len(found)
        finally:
            await aclient.aclose()

    assert asyncio.run(from_asyncio()) == (True, entries[1][0], 2)
