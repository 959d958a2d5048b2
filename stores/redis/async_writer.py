"""The Redis store over ``redis.asyncio``: what producers call on their own event loop.

``AsyncWriter`` sends the same Lua scripts as the sync store (``scripts.py``), built from
the same KEYS and ARGV (``Writer.plan``, ``RedisAgentTurnStore.cancel_input``), and keeps
the same process cache (tags, stored counts, messages), so either side may write a turn
the other wrote. An asyncio client belongs to the loop it was made on: each running loop
gets its own, made on first use; clients of loops that have closed are dropped.

On a Redis Cluster the calls run the sync store's methods in a worker thread instead (the
sync store routes its script calls per slot itself).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from redis import Redis
from redis.exceptions import NoScriptError

from runner_core.errors import HistoryRewrittenError, SnapshotCorruptedError, TurnNotFoundError
from runner_core.events import AgentEvent
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.store import CancelResult, Commit, SaveResult
from runner_core.store import arguments as check
from stores.redis.cache import Known
from stores.redis.codec import Arg, text
from stores.redis.connection import async_client, async_retry, async_twin
from stores.redis.scripts import Call, NeedKeys, cancelled, code_of, loaded, saved
from stores.redis.sweeper import lower_due
from stores.redis.writer import check_prefix, own_replies

if TYPE_CHECKING:
    from stores.redis.store import RedisAgentTurnStore

#: Builds the asyncio client of one event loop (called on that loop).
ClientFactory = Callable[[], Any]


def default_factory(target: Redis | str, client: Redis, password: str | None) -> ClientFactory:
    """How each event loop gets its asyncio client: like the sync ``client`` of the store.

    From the store's URL when it was given one (the password passed beside it too), else
    from the sync client's connection settings.
    """
    if not isinstance(target, str):
        return lambda: async_twin(client)
    url = target

    def make() -> Any:
        kwargs = client.connection_pool.connection_kwargs
        return async_client(
            url,
            socket_timeout=kwargs.get("socket_timeout") or 5.0,
            connect_timeout=kwargs.get("socket_connect_timeout") or 2.0,
            username=kwargs.get("username"),
            password=password if password is not None else kwargs.get("password"),
            retry=async_retry(),
        )

    return make


class LoopClients:
    """One asyncio client per running event loop, made on first use there."""

    def __init__(self, factory: ClientFactory) -> None:
        self.factory = factory
        self._lock = threading.Lock()
        self._by_loop: dict[asyncio.AbstractEventLoop, Any] = {}

    def current(self) -> Any:
        """The running loop's client (``RuntimeError`` outside a running loop)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._by_loop.get(loop)
            if client is None:
                for old in [lp for lp in self._by_loop if lp.is_closed()]:
                    del self._by_loop[old]
                client = self._by_loop[loop] = self.factory()
            return client

    async def aclose(self) -> None:
        """Close the running loop's client, if it has one."""
        with self._lock:
            client = self._by_loop.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


class AsyncWriter:
    """The asyncio twins of the store's commit, load, cancel, children and clock calls."""

    def __init__(self, store: RedisAgentTurnStore, factory: ClientFactory) -> None:
        self.store = store
        self.clients = LoopClients(factory)
        #: A cluster client: run the sync calls in a worker thread.
        self.threaded = store.scripts.cluster

    async def now(self) -> float:
        """The server clock: the shared reading, or one ``TIME`` when it is due."""
        clock = self.store.clock
        cached = clock.cached()
        if cached is not None:
            return cached
        if self.threaded:
            return await asyncio.to_thread(self.store.now)
        with self.store.guard:
            sent = time.monotonic()
            seconds, micros = await self.clients.current().time()
            return clock.record(int(seconds), int(micros), sent, time.monotonic())

    async def commit(self, c: Commit) -> SaveResult:
        """``Writer.commit`` over asyncio (a child's creation goes through a thread)."""
        s = c.snapshot
        creating = c.expected_version == -1
        if self.threaded or c.children or (creating and s.parent_turn_id is not None):
            return await asyncio.to_thread(self.store.commit, c)
        writer = self.store.writer
        with self.store.guard:
            await self.now()  # so that planning reads the clock without a round trip
            tag = writer.new_tag(s) if creating else await self.tag_of(s.id)
            known, stored = writer.known(c)
            every_key, mismatches = False, 0
            while mismatches < 2:
                try:
                    reply = await self._call(tag, c, stored, every_key)
                    result = saved(reply, s.conversation_id)
                except SnapshotCorruptedError as exc:
                    await asyncio.to_thread(self._set_aside, c, exc)
                    raise
                if isinstance(result, SaveResult):
                    writer.remember(tag, c, known, stored)
                    return result
                if isinstance(result, NeedKeys):
                    if every_key:
                        raise RuntimeError(f"commit.lua refused every key of {s.id}")
                    every_key = True
                    continue
                check_prefix(s, result)
                stored, mismatches = result.stored, mismatches + 1
        raise HistoryRewrittenError(s.id, "the stored message count kept changing")

    def _set_aside(self, c: Commit, exc: SnapshotCorruptedError) -> None:
        with self.store.guard:
            self.store.sweeper.corrupt_commit(c, exc)

    async def _call(self, tag: str, c: Commit, stored: int, every_key: bool) -> object:
        writer = self.store.writer
        keys, args, before, after = writer.plan(tag, c, stored, every_key)
        call: Call = (self.store.scripts["commit"], keys, args)
        riding = writer.riding(c)
        try:
            replies = await self.pipelined([call], [*riding, *before], after, lenient=len(riding))
        except BaseException:
            writer.unride(c, riding)
            raise
        replies = own_replies(replies, riding)
        reply = replies[len(before)]
        if code_of(reply) not in ("OK", "MISMATCH"):
            ours = writer.entries_set(c, replies[: len(before) + 1])
            if ours:
                await self.clients.current().delete(*ours)
        return reply

    async def load(self, turn_id: str) -> AgentTurnSnapshot:
        """``RedisAgentTurnStore.load`` over asyncio."""
        if self.threaded:
            return await asyncio.to_thread(self.store.load, turn_id)
        store = self.store
        for _ in range(2):
            with store.guard:
                tag = await self.tag_of(turn_id)
                have = store.cached_messages(turn_id)
                keys = [store.keys.header(tag, turn_id), store.keys.messages(tag, turn_id)]
                call: Call = (store.scripts["load"], keys, [turn_id, str(len(have))])
                data = loaded((await self.pipelined([call]))[0])
                assert data is not None
                snapshot = store.decode(turn_id, tag, data, have)
            if snapshot is not None:
                return snapshot  # else the cached prefix was stale: read it all once more
        raise AssertionError("a load without a cached prefix always decodes")

    async def request_cancellation(
        self, turn_id: str, reason: str | None, events: Sequence[AgentEvent]
    ) -> CancelResult:
        """``RedisAgentTurnStore.request_cancellation`` over asyncio."""
        if self.threaded:
            return await asyncio.to_thread(self.store.request_cancellation, turn_id, reason, events)
        store = self.store
        with store.guard:
            tag = await self.tag_of(turn_id)
            keys, args = store.cancel_input(tag, turn_id, reason, events)
            touch = [lower_due(store.keys, tag, await self.now())]
            replies = await self.pipelined([(store.scripts["cancel"], keys, args)], (), touch)
        return cancelled(replies[0])

    async def children_of(self, parent_turn_id: str) -> list[str]:
        """``RedisAgentTurnStore.children_of`` over asyncio."""
        if self.threaded:
            return await asyncio.to_thread(self.store.children_of, parent_turn_id)
        with self.store.guard:
            try:
                tag = await self.tag_of(parent_turn_id)
            except TurnNotFoundError:
                return []
            ids = await self.clients.current().lrange(
                self.store.keys.children(tag, parent_turn_id), 0, -1
            )
        return [text(c) for c in ids]

    async def tag_of(self, turn_id: str) -> str:
        """``TagIndex.tag_of`` over asyncio (the same process cache)."""
        cache = self.store.cache
        known = cache.get(turn_id)
        if known is not None:
            return known.tag
        raw = await self.clients.current().get(self.store.keys.turn_index(turn_id))
        if raw is None:
            raise TurnNotFoundError(turn_id)
        tag = text(raw)
        cache.put(turn_id, Known(tag))
        return tag

    async def pipelined(
        self,
        calls: Sequence[Call],
        before: Sequence[Sequence[Arg]] = (),
        after: Sequence[Sequence[Arg]] = (),
        *,
        lenient: int = 0,
    ) -> list[Any]:
        """``Scripts.pipelined`` over asyncio: one round trip, NOSCRIPT handled the same way."""
        client = self.clients.current()
        replies = await _send(client, calls, before, after)
        scripted = replies[len(before) : len(before) + len(calls)]
        missing = [i for i, r in enumerate(scripted) if isinstance(r, NoScriptError)]
        if missing:
            for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
                await client.script_load(script.script)
            again = await _send(client, [calls[i] for i in missing], (), after)
            for i, reply in zip(missing, again, strict=False):
                scripted[i] = reply
            replies = [*replies[: len(before)], *scripted, *again[len(missing) :]]
        for reply in replies[lenient:]:
            if isinstance(reply, Exception):
                raise reply
        return replies


async def _send(
    client: Any,
    calls: Sequence[Call],
    before: Sequence[Sequence[Arg]],
    after: Sequence[Sequence[Arg]],
) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for command in before:
        pipe.execute_command(*command)
    for script, keys, args in calls:
        pipe.evalsha(script.sha, len(keys), *keys, *args)
    for command in after:
        pipe.execute_command(*command)
    replies: list[Any] = await pipe.execute(raise_on_error=False)
    return replies


class AsyncTurnMethods:
    """The ``AsyncTurnStore`` face of ``RedisAgentTurnStore`` (see ``AsyncWriter``)."""

    aio: AsyncWriter

    async def anow(self) -> float:
        """``now()`` without blocking the loop."""
        return await self.aio.now()

    async def acommit(self, commit: Commit) -> SaveResult:
        """``commit()`` over ``redis.asyncio``: the same script, checks and errors."""
        check.commit(commit)
        return await self.aio.commit(commit)

    async def aload(self, turn_id: str) -> AgentTurnSnapshot:
        """``load()`` over ``redis.asyncio``."""
        check.turn(turn_id)
        return await self.aio.load(turn_id)

    async def arequest_cancellation(
        self, turn_id: str, reason: str | None = None, events: Sequence[AgentEvent] = ()
    ) -> CancelResult:
        """``request_cancellation()`` over ``redis.asyncio``."""
        check.cancellation(turn_id, reason, events)
        return await self.aio.request_cancellation(turn_id, reason, events)

    async def achildren_of(self, parent_turn_id: str) -> list[str]:
        """``children_of()`` over ``redis.asyncio``."""
        check.turn(parent_turn_id, "parent_turn_id")
        return await self.aio.children_of(parent_turn_id)

    async def aclose(self) -> None:
        """Close the asyncio client of the running loop (the next call makes a new one)."""
        await self.aio.clients.aclose()
