"""The Redis store's asyncio side: producers' store calls go over ``redis.asyncio``.

Runs against the suite's own redis-server (and the local cluster, where the asyncio
methods run the sync calls in a worker thread).
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections import Counter
from typing import Any

import pytest
from redis import Redis
from redis import asyncio as aioredis
from redis.asyncio.connection import Connection as AsyncConnection
from redis.connection import Connection, ConnectionPool

from runner_core import (
    AgentConversationBusyException,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnStatus,
    ConcurrentModificationError,
    InMemoryAgentLoader,
    InvalidResumeError,
    StoreUnavailableError,
    TurnLeasedError,
    TurnNotFoundError,
)
from runner_core.store import AsyncTurnStore
from runner_core.testing import EventLog
from stores import RedisAgentTurnStore
from tests.support.agents import approval_agent
from tests.support.loop_watch import MAX_STALL_SECONDS, calmest_workout
from tests.support.servers import RedisServer

S = AgentTurnStatus
APPROVE = AgentResumeCommand.approve_tool("c1")


def _names(args: tuple[Any, ...]) -> str:
    name = args[0]
    return (name.decode() if isinstance(name, bytes) else str(name)).split(" ")[0].upper()


class CountingAsyncConnection(AsyncConnection):
    """A real redis.asyncio connection that counts the commands it sends."""

    seen: Counter[str] = Counter()

    def pack_command(self, *args: Any) -> Any:
        CountingAsyncConnection.seen[_names(args)] += 1
        return super().pack_command(*args)

    def pack_commands(self, commands: Any) -> Any:
        commands = list(commands)
        for args in commands:
            CountingAsyncConnection.seen[_names(args)] += 1
        return super().pack_commands(commands)


class CountingConnection(Connection):
    """The same for the sync client."""

    seen: Counter[str] = Counter()

    def pack_command(self, *args: Any) -> Any:
        CountingConnection.seen[_names(args)] += 1
        return super().pack_command(*args)

    def pack_commands(self, commands: Any) -> Any:
        commands = list(commands)
        for args in commands:
            CountingConnection.seen[_names(args)] += 1
        return super().pack_commands(commands)


def _runner(store: RedisAgentTurnStore, sent: list[str] | None = None) -> AgentRunner:
    dispatcher = sent.append if sent is not None else None
    return AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader(), dispatcher=dispatcher)


def test_the_loop_keeps_ticking_on_the_redis_store(redis_store: RedisAgentTurnStore) -> None:
    runner = _runner(redis_store)
    log = EventLog()
    runner.add_event_listener(log)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        done = calmest_workout(runner)

    assert done.max_gap < MAX_STALL_SECONDS, done.max_gap
    assert done.statuses == {
        "napped": S.COMPLETED,
        "resumed": S.COMPLETED,
        "submitted": S.RUNNING,
        "cancelled": S.CANCELLED,
        "restored": S.COMPLETED,
    }
    stored = redis_store.load(done.ids["cancelled"])
    assert stored.status is S.CANCELLED and stored.terminal_reason == "changed my mind"
    events = [e.type.value for e in redis_store.read_events(done.ids["cancelled"])]
    assert events[-1] == "TURN_CANCELLED" and "CANCELLATION_REQUESTED" in events


def test_start_resume_and_cancel_go_over_redis_asyncio(
    redis_server: RedisServer, namespace: str
) -> None:
    # Given a store whose sync and asyncio clients count what they send to the real server
    pool = ConnectionPool(connection_class=CountingConnection, port=redis_server.port)
    store = RedisAgentTurnStore(
        Redis(connection_pool=pool),
        namespace=namespace,
        async_redis=lambda: aioredis.Redis.from_pool(
            aioredis.ConnectionPool(
                connection_class=CountingAsyncConnection, port=redis_server.port
            )
        ),
    )
    sent: list[str] = []
    runner = _runner(store, sent)
    waiting = runner.run(approval_agent(), "pay")
    CountingConnection.seen.clear()
    CountingAsyncConnection.seen.clear()

    async def produce() -> tuple[str, str]:
        started = await runner.astart(approval_agent(), "pay later")
        await runner.asubmit_resume(waiting.id, APPROVE)
        await runner.acancel(started.id)
        await store.aclose()
        return started.id, waiting.id

    started_id, waiting_id = asyncio.run(produce())

    # Then every script call went over redis.asyncio; the sync client sent none
    async_calls = CountingAsyncConnection.seen
    assert async_calls["EVALSHA"] >= 5, async_calls  # create, load, commit, load, cancel, ...
    assert CountingConnection.seen["EVALSHA"] == 0, CountingConnection.seen
    assert sent == [started_id, waiting_id]  # the wake-ups, sent from a thread
    assert store.load(started_id).status is S.CANCELLED
    assert store.load(waiting_id).status is S.RUNNING
    store.close()


def test_a_client_per_event_loop(redis_store: RedisAgentTurnStore) -> None:
    runner = _runner(redis_store)
    ids: list[str] = []

    def one_loop() -> None:
        async def start() -> None:
            ids.append((await runner.astart(approval_agent(), "pay")).id)
            await redis_store.aclose()

        asyncio.run(start())

    one_loop()
    one_loop()  # a new loop: the first loop's client is not reused here
    threads = [threading.Thread(target=one_loop) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(ids) == 5
    assert all(redis_store.load(i).status is S.READY for i in ids)


def test_turns_written_over_asyncio_go_on_with_the_sync_writer(
    redis_store: RedisAgentTurnStore,
) -> None:
    runner = _runner(redis_store)

    async def start() -> str:
        turn = await runner.astart(approval_agent(), "pay 5")
        await redis_store.aclose()
        return turn.id

    turn_id = asyncio.run(start())
    waiting = runner.run_until_blocked(runner.restore(turn_id))
    assert waiting.status is S.WAITING_FOR_APPROVAL

    async def approve() -> None:
        await runner.asubmit_resume(turn_id, APPROVE)
        await redis_store.aclose()

    asyncio.run(approve())
    done = runner.run_until_blocked(runner.restore(turn_id))
    assert done.status is S.COMPLETED and done.final_output == "done: paid 5.0"
    assert redis_store.load(turn_id).messages == done.state.messages


def test_bad_input_is_refused_over_asyncio_and_nothing_stored(
    redis_store: RedisAgentTurnStore,
) -> None:
    runner = AgentRunner(
        turn_store=redis_store,
        agent_loader=InMemoryAgentLoader(),
        chat_memory_provider=redis_store.chat_memory,
    )
    waiting = runner.run(approval_agent(), "pay")
    busy = runner.run(approval_agent(), "pay", conversation_id="conv")
    versions = {waiting.id: waiting.state.version, busy.id: busy.state.version}

    async def refused() -> None:
        with pytest.raises(ConcurrentModificationError):
            await runner.astart(approval_agent(), "again", turn_id=waiting.id)
        with pytest.raises(AgentConversationBusyException):
            await runner.astart(approval_agent(), "more", conversation_id="conv")
        with pytest.raises(TurnNotFoundError):
            await runner.asubmit_resume("nope", APPROVE)
        with pytest.raises(TurnNotFoundError):
            await runner.acancel("nope")
        with pytest.raises(InvalidResumeError, match="c9"):
            await runner.asubmit_resume(waiting.id, AgentResumeCommand.approve_tool("c9"))
        with pytest.raises(TypeError, match="agent must be an Agent"):
            await runner.astart(42, "pay")  # type: ignore[arg-type]
        await redis_store.aclose()

    asyncio.run(refused())
    listed = {t.turn_id for t in redis_store.list_turns()}
    assert listed == set(versions)
    assert {tid: redis_store.load(tid).version for tid in versions} == versions


def test_an_unavailable_store_raises_the_same_error(own_redis: RedisServer, namespace: str) -> None:
    store = RedisAgentTurnStore(own_redis.url, namespace=namespace, connect_timeout=0.5)
    assert isinstance(store, AsyncTurnStore)
    runner = _runner(store)
    own_redis.stop()

    async def start() -> None:
        await runner.astart(approval_agent(), "pay")

    with pytest.raises(StoreUnavailableError):
        asyncio.run(start())
    with pytest.raises(StoreUnavailableError):
        runner.start(approval_agent(), "pay")


def test_a_live_lease_refuses_the_async_resume_and_keeps_the_cancel_a_flag(
    redis_store: RedisAgentTurnStore,
) -> None:
    # Given a turn waiting for approval while the worker that took it holds its lease
    sent: list[str] = []
    runner = _runner(redis_store, sent)
    started = runner.start(approval_agent(), "pay")
    held = runner.claim(started.id, "worker-1")
    assert held is not None
    while held.status is not S.WAITING_FOR_APPROVAL:
        runner.step(held)
    version = redis_store.load(started.id).version
    sent.clear()
    waiting = held

    async def produce() -> AgentTurnStatus:
        with pytest.raises(TurnLeasedError):
            await runner.asubmit_resume(waiting.id, AgentResumeCommand.approve_tool("c1"))
        status = (await runner.acancel(waiting.id, "stop")).status
        await redis_store.aclose()
        return status

    # When a producer resumes it (refused) and cancels it (the flag only)
    status = asyncio.run(produce())

    # Then nothing was applied over the lease; the owner will end the turn
    stored = redis_store.load(waiting.id)
    assert status is S.WAITING_FOR_APPROVAL and stored.status is S.WAITING_FOR_APPROVAL
    assert stored.version == version and stored.cancel_requested
    assert sent == [waiting.id]  # the owner's wake-up, sent from a thread
    runner.release(held)


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "ab12", 2, "k1", b"k2", "é", 1.5, -3, b"\x00\xff"),
        ("SCRIPT LOAD", "return 1"),
        (b"CLIENT SETNAME", "agentworker"),
        ("SET", "k", "x" * 10_000),
    ],
)
def test_asyncio_connections_pack_with_hiredis_byte_for_byte(args: tuple[Any, ...]) -> None:
    from stores.redis.connection import _PackedConnection, async_client

    packed = b"".join(_PackedConnection().pack_command(*args))
    assert packed == b"".join(AsyncConnection().pack_command(*args))
    client = async_client("redis://127.0.0.1:1/0")
    assert client.connection_pool.connection_class is _PackedConnection
