"""Every event of a turn tree in one Redis Stream, so any process can follow it live.

One stream per root turn, ``{namespace}:events:{<root id>}`` (the root id is the Redis
Cluster hash tag, so a tree's stream and its end marker share a slot). Entries hold one
field, ``event``: the AgentEvent as JSON. The stream is trimmed to about ``maxlen`` entries
and expires ``ttl_after_end`` seconds after the root's terminal event; a reader that falls
further behind than ``maxlen`` entries loses the trimmed ones.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from enum import Enum
from typing import Any

import redis
from redis import asyncio as aioredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from runner_core import AgentEvent, AgentEventType

log = logging.getLogger("agentworker.events")

Entry = tuple[str, dict[str, Any]]

#: The events that end a turn; the root's one ends the tree's stream.
TERMINAL_TYPES = frozenset(
    {
        AgentEventType.TURN_COMPLETED.value,
        AgentEventType.TURN_FAILED.value,
        AgentEventType.TURN_CANCELLED.value,
        AgentEventType.MAX_ITERATIONS_REACHED.value,
        AgentEventType.MAX_STEPS_REACHED.value,
        AgentEventType.BUDGET_EXCEEDED.value,
    }
)

_STREAM_ID = re.compile(r"^\d+-\d+$")


def stream_key(namespace: str, root_turn_id: str) -> str:
    """The stream of a turn tree."""
    return f"{namespace}:events:{{{root_turn_id}}}"


def end_key(namespace: str, root_turn_id: str) -> str:
    """Holds the stream id of the root's terminal event once the tree has ended."""
    return stream_key(namespace, root_turn_id) + ":end"


def event_to_dict(event: AgentEvent) -> dict[str, Any]:
    """Every field of the event as JSON-ready values (enums as their values)."""
    return {
        "event_id": event.event_id,
        "type": event.type.value,
        "turn_id": event.turn_id,
        "root_turn_id": event.root_turn_id,
        "parent_turn_id": event.parent_turn_id,
        "agent_id": event.agent_id,
        "agent_version": event.agent_version,
        "sequence": event.sequence,
        "occurred_at": event.occurred_at,
        "data": dict(event.data),
    }


def is_root_terminal(event: dict[str, Any]) -> bool:
    """True for the terminal event of the tree's root itself."""
    return event.get("type") in TERMINAL_TYPES and event.get("turn_id") == event.get("root_turn_id")


class RedisEventBridge:
    """An event listener that appends every event to its tree's stream; never raises."""

    def __init__(
        self,
        redis_client: redis.Redis,
        namespace: str,
        maxlen: int = 10_000,
        ttl_after_end: int = 3600,
    ) -> None:
        self.redis = redis_client
        self.namespace = namespace
        self.maxlen = maxlen
        self.ttl_after_end = ttl_after_end
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
        self._local = threading.local()

    def __call__(self, event: AgentEvent) -> None:
        """Buffer ``event``; flushed by the runner after each operation, or when it waits."""
        if time.monotonic() < self._quiet_until:
            self._dropped += 1
            return
        with self._lock:
            self._buffer.append(event)
            if len(self._buffer) == 1:
                self._first_at = time.monotonic()
                return
            due = (
                len(self._buffer) >= self.max_buffer
                or time.monotonic() - self._first_at >= self.max_delay
            )
        if due:  # e.g. a long streaming model call: followers see deltas within max_delay
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
            self._local.pipe = None
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

    def _pipeline(self) -> Any:
        # one pipeline per thread, reused: building one costs more than the round trip
        pipe = getattr(self._local, "pipe", None)
        if pipe is None:
            pipe = self._local.pipe = self.redis.pipeline(transaction=False)
        return pipe

    def _append(self, events: list[AgentEvent]) -> None:
        payloads = [event_to_dict(e) for e in events]
        pipe = self._pipeline()

        for payload in payloads:
            key = stream_key(self.namespace, payload["root_turn_id"])
            body = json.dumps(payload, default=_json_default, separators=(",", ":"))
            pipe.xadd(key, {"event": body}, maxlen=self.maxlen, approximate=True)
        ids = pipe.execute()
        ends = [(p, i) for p, i in zip(payloads, ids, strict=True) if is_root_terminal(p)]
        if not ends:
            return
        pipe = self._pipeline()
        for payload, stream_id in ends:
            root = payload["root_turn_id"]
            pipe.set(end_key(self.namespace, root), stream_id, ex=self.ttl_after_end)
            pipe.expire(stream_key(self.namespace, root), self.ttl_after_end)
        pipe.execute()


def bridge_client(url: str, timeout: float = 2.0) -> redis.Redis:
    """A client for the bridge: short timeouts and one quick retry, so errors come fast."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def check_stream_id(value: str) -> str:
    """``value`` if it is a stream id (``<ms>-<seq>``), else ``ValueError``."""
    if not _STREAM_ID.match(value):
        raise ValueError(f"not a stream id: {value!r} (expected '<ms>-<seq>')")
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
    key = stream_key(namespace, root_turn_id)
    reply = client.xread({key: check_stream_id(after)}, count=count, block=block_ms)
    return parse_reply(reply)


async def read_events_async(
    client: aioredis.Redis,
    namespace: str,
    root_turn_id: str,
    after: str = "0-0",
    block_ms: int | None = None,
    count: int = 100,
) -> list[Entry]:
    """``read_events`` for asyncio code (the HTTP app's event stream)."""
    key = stream_key(namespace, root_turn_id)
    reply = await client.xread({key: check_stream_id(after)}, count=count, block=block_ms)
    return parse_reply(reply)


def parse_reply(reply: Any) -> list[Entry]:
    """Decode an XREAD reply (RESP2 list or RESP3 dict, bytes or str) into entries."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else (s[1] for s in reply)
    entries: list[Entry] = []
    for stream_entries in streams:
        if len(stream_entries) == 1 and isinstance(stream_entries[0], list):
            stream_entries = stream_entries[0]  # RESP3 wraps the entries once more
        for raw_id, fields in stream_entries:
            entries.append((_text(raw_id), json.loads(_text(_field(fields, "event")))))
    return entries


def _field(fields: dict[Any, Any], name: str) -> Any:
    return fields.get(name, fields.get(name.encode()))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def end_id(client: redis.Redis, namespace: str, root_turn_id: str) -> str | None:
    """The stream id of the root's terminal event, once the tree has ended."""
    value = client.get(end_key(namespace, root_turn_id))
    return _text(value) if value is not None else None


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
