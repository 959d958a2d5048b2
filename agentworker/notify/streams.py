"""Every event of a turn tree in one Redis Stream, so any process can follow it live.

One stream per turn tree, ``{namespace}:{<tag>}:ev:<root id>``, in the tree's hash slot
(the store's tag of the tree), so the store's commit script appends the tree's committed
events atomically with the change they describe. Entries hold ``event`` (the AgentEvent as
JSON) and, for committed events, ``seq`` (the turn's event number, 1, 2, 3, ...).
Provisional events (model/tool started, deltas, tool progress) are appended by
``RedisEventBridge`` (riding in the store's next commit when ``make_runner`` wires them,
``stores.redis.riders``), marked ``"provisional": true`` with the ``attempt`` that made them:
an attempt whose work was never committed (a fenced or killed worker) shows up as
provisional events with no committed events after them. The stream is trimmed to about
``maxlen`` entries and expires ``ttl_after_end`` seconds after the root's terminal event.
The Redis side of all this (keys, XADD/XREAD, trimming, expiry) is ``stores.redis.streams``
(``EventStreams``, ``AsyncEventStreams``); this module is its public face.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import redis
from redis import asyncio as aioredis

from runner_core import AgentEvent, AgentEventType
from runner_core.errors import shorten
from runner_core.events import TERMINAL_EVENTS
from runner_core.events import event_to_dict as _event_to_dict
from stores.redis import (
    AsyncEventStreams,
    EventStreams,
    Keyspace,
    parse_stream_reply,
    stream_client,
)

log = logging.getLogger("agentworker.events")

Entry = tuple[str, dict[str, Any]]

#: The events that end a turn; the root's one ends the tree's stream.
TERMINAL_TYPES = frozenset(e.value for e in TERMINAL_EVENTS)

_STREAM_ID = re.compile(r"^\d+-\d+$")


@functools.lru_cache(maxsize=64)
def _keys(namespace: str) -> Keyspace:
    return Keyspace(namespace)


def stream_key(namespace: str, tag: str, root_turn_id: str) -> str:
    """The stream of a turn tree whose store tag is ``tag``."""
    return _keys(namespace).events(tag, root_turn_id)


def end_key(namespace: str, tag: str, root_turn_id: str) -> str:
    """Holds the stream id of the root's terminal event once the tree has ended."""
    return _keys(namespace).events_end(tag, root_turn_id)


def tree_tag(client: redis.Redis, namespace: str, root_turn_id: str) -> str:
    """The store tag of a tree (one GET, then cached)."""
    return EventStreams(client, _keys(namespace)).tag(root_turn_id)


async def tree_tag_async(client: aioredis.Redis, namespace: str, root_turn_id: str) -> str:
    """``tree_tag`` for asyncio code."""
    return await AsyncEventStreams(client, _keys(namespace)).tag(root_turn_id)


def event_to_dict(event: AgentEvent) -> dict[str, Any]:
    """Every field of the event as JSON-ready values (enums as their values)."""
    return _event_to_dict(event)


def is_root_terminal(event: dict[str, Any]) -> bool:
    """True for the terminal event of the tree's root itself."""
    return event.get("type") in TERMINAL_TYPES and event.get("turn_id") == event.get("root_turn_id")


class RedisEventBridge:
    """An event listener that appends events to their tree's stream; never raises.

    With a Redis store the commit already wrote every committed event, so the bridge
    writes only provisional ones (the default). With another store (the embedded
    in-memory one) pass ``committed=True``: it then writes committed events too, after
    their commit. Provisional *started* events are flushed at once, so a follower sees a long
    tool call begin when it begins; deltas wait at most ``max_delay``. After
    ``bridge.streams.ride_with(store)`` a flush rides in the store's next commit, or goes
    on its own 20 ms later (``stores.redis.riders``).
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        namespace: str,
        maxlen: int = 10_000,
        ttl_after_end: int = 3600,
        *,
        committed: bool = False,
    ) -> None:
        self.redis = redis_client
        self.namespace = namespace
        self.streams = EventStreams(redis_client, _keys(namespace))
        self.maxlen = maxlen
        self.ttl_after_end = ttl_after_end
        self.committed = committed
        #: Seconds to drop events after a Redis error, instead of waiting on every one.
        self.pause_after_error = 5.0
        self._quiet_until = 0.0
        self._dropped = 0
        #: Events wait at most this long (seconds) or this many before a flush of their own.
        self.max_delay = 0.05
        self.max_buffer = 256
        self._buffer: list[AgentEvent] = []
        self._first_at = 0.0
        self._lock = threading.Lock()

    def __call__(self, event: AgentEvent) -> None:
        """Buffer ``event``; flushed by the runner after each operation, or when it waits."""
        if not (event.provisional or self.committed):
            return
        if time.monotonic() < self._quiet_until:
            self._dropped += 1
            return
        with self._lock:
            self._buffer.append(event)
            now = time.monotonic()
            if len(self._buffer) == 1:
                self._first_at = now
            due = (
                event.type in _AT_ONCE
                or len(self._buffer) >= self.max_buffer
                or now - self._first_at >= self.max_delay
            )
        if due:  # a call that starts, or a long streaming model call: seen within max_delay
            self.flush()

    def flush(self) -> None:
        """Append the buffered events in one round trip; a Redis failure is logged."""
        with self._lock:
            events, self._buffer = self._buffer, []
        if not events:
            return
        try:
            self._append(events)
        except Exception as exc:  # noqa: BLE001 - events are best effort by design
            # a hanging Redis must not cost every event a socket timeout: pause a while
            self.streams.drop_pipeline()
            self._quiet_until = time.monotonic() + self.pause_after_error
            self._dropped += len(events)

            log.warning(
                "%d events of turn %s not streamed (pausing %.0fs): %s",
                len(events),
                events[0].turn_id,
                self.pause_after_error,
                exc,
            )
            return
        if self._dropped:
            log.warning("events streamed again after %d were dropped", self._dropped)
            self._dropped = 0

    def _append(self, events: list[AgentEvent]) -> None:
        self.streams.append(events, self.maxlen, self.ttl_after_end)


#: Provisional events a follower should see the moment they happen.
_AT_ONCE = frozenset({AgentEventType.MODEL_STARTED, AgentEventType.TOOL_STARTED})


def bridge_client(url: str, timeout: float = 2.0) -> redis.Redis:
    """A client for the bridge: short timeouts and one quick retry, so errors come fast.

    A Redis Cluster for a ``redis+cluster://`` URL (``stores.redis.connection``).
    """
    return stream_client(url, timeout)


def check_stream_id(value: str) -> str:
    """``value`` if it is a stream id (``<ms>-<seq>``), else ``ValueError``."""
    if not _STREAM_ID.match(value):
        raise ValueError(f"not a stream id: {shorten(value)} (expected '<ms>-<seq>')")
    return value


def id_key(stream_id: str) -> tuple[int, int]:
    """A stream id as a sortable pair."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def read_events(
    client: redis.Redis,
    namespace: str,
    root_turn_id: str,
    after: str = "0-0",
    block_ms: int | None = None,
    count: int = 100,
) -> list[Entry]:
    """Up to ``count`` events strictly after the stream id ``after``, oldest first.

    With ``block_ms``, waits that long for the first new event (``[]`` if none came).
    """
    streams = EventStreams(client, _keys(namespace))
    return streams.read(root_turn_id, check_stream_id(after), block_ms, count)


async def read_events_async(
    client: aioredis.Redis,
    namespace: str,
    root_turn_id: str,
    after: str = "0-0",
    block_ms: int | None = None,
    count: int = 100,
) -> list[Entry]:
    """``read_events`` for asyncio code (the HTTP app's event stream)."""
    streams = AsyncEventStreams(client, _keys(namespace))
    return await streams.read(root_turn_id, check_stream_id(after), block_ms, count)


def parse_reply(reply: Any) -> list[Entry]:
    """Decode an XREAD reply (RESP2 list or RESP3 dict, bytes or str) into entries."""
    return parse_stream_reply(reply)


def end_id(client: redis.Redis, namespace: str, root_turn_id: str) -> str | None:
    """The stream id of the root's terminal event, once the tree has ended."""
    return EventStreams(client, _keys(namespace)).end_id(root_turn_id)


def follow(
    client: redis.Redis,
    namespace: str,
    root_turn_id: str,
    after: str = "0-0",
    timeout: float | None = None,
    block_ms: int = 1000,
) -> Iterator[Entry]:
    """Yield the tree's events after ``after`` until the root's terminal event or timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last = check_stream_id(after)
    while True:
        ended = end_id(client, namespace, root_turn_id)
        if ended is not None and id_key(last) >= id_key(ended):
            return
        wait = block_ms
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            wait = max(1, min(block_ms, int(left * 1000)))
        for stream_id, event in read_events(client, namespace, root_turn_id, last, wait):
            last = stream_id
            yield stream_id, event
            if is_root_terminal(event):
                return
