"""The Redis side of the event streams: one stream per turn tree, in the tree's hash slot.

Stream ``ns:{T}:ev:<root id>`` (``Keyspace.events``) holds entries with ``event`` (the
AgentEvent as compact JSON, ``stored_event_json``) and, for committed events, ``seq`` (the
turn's event number). The
commit script appends committed events; ``EventStreams.append`` appends the others (and
those of a store that does not stream, with ``committed=True`` in the bridge). The stream
is trimmed to about ``maxlen`` entries; once the root's terminal event is in it, the
``:end`` key holds that entry's id and both expire ``ttl_after_end`` seconds later.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from runner_core.events import TERMINAL_EVENTS, AgentEvent, event_from_dict, stored_event_json
from stores.redis.codec import text
from stores.redis.connection import make_client
from stores.redis.keys import Keyspace
from stores.redis.riders import DELAY, Command, StreamRiders

log = logging.getLogger("stores.redis.streams")

#: One stream entry: its id and the event as a dict (``sequence`` set for committed ones).
Entry = tuple[str, dict[str, Any]]

# (namespace, root id) -> tag: a tag never changes, so every reader in the process shares it
_TAGS: dict[tuple[str, str], str] = {}
_TAGS_LOCK = threading.Lock()


def stream_client(url: str, timeout: float = 2.0) -> Redis:
    """A client with short timeouts and one quick retry, so a stream write fails fast."""
    return make_client(
        url, socket_timeout=timeout, connect_timeout=timeout, retry=Retry(NoBackoff(), 1)
    )


def _known_tag(keys: Keyspace, root_turn_id: str) -> str | None:
    return _TAGS.get((keys.namespace, root_turn_id))


def _remember_tag(keys: Keyspace, root_turn_id: str, raw: Any) -> str:
    """A root's tag from its index entry (the root id itself for a turn Redis does not store)."""
    if raw is None:
        return root_turn_id
    tag = text(raw)
    with _TAGS_LOCK:
        if len(_TAGS) > 100_000:
            _TAGS.clear()
        _TAGS[(keys.namespace, root_turn_id)] = tag
    return tag


def full_event(doc: dict[str, Any], seq: Any = None) -> dict[str, Any]:
    """A stored entry's document with every field of an event (entries of any age).

    Puts back what ``stored_event_json`` leaves out; ``seq`` is the entry's number.
    """
    doc.setdefault("root_turn_id", doc.get("turn_id"))
    doc.setdefault("parent_turn_id", None)
    doc.setdefault("provisional", False)
    doc.setdefault("attempt", None)
    if seq is not None:
        doc["sequence"] = int(text(seq))
    else:
        doc.setdefault("sequence", 0)
    return doc


def parse_stream_reply(reply: Any) -> list[Entry]:
    """Decode an XREAD reply (RESP2 list or RESP3 dict, bytes or str) into entries."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else (s[1] for s in reply)
    entries: list[Entry] = []
    for stream_entries in streams:
        if len(stream_entries) == 1 and isinstance(stream_entries[0], list):
            stream_entries = stream_entries[0]  # RESP3 wraps the entries once more
        for raw_id, fields in stream_entries:
            event = full_event(json.loads(text(_field(fields, "event"))), _field(fields, "seq"))
            entries.append((text(raw_id), event))
    return entries


def _field(fields: dict[Any, Any], name: str) -> Any:
    return fields.get(name, fields.get(name.encode()))


def _ends_tree(event: AgentEvent) -> bool:
    return event.type in TERMINAL_EVENTS and event.turn_id == event.root_turn_id


def _same_server(a: Any, b: Any) -> bool:
    """Whether two pooled clients talk to the same server and database."""
    pools = [getattr(c, "connection_pool", None) for c in (a, b)]
    wanted = ("host", "port", "path", "db")
    found = [{k: p.connection_kwargs.get(k) for k in wanted} for p in pools if p is not None]
    return len(found) == 2 and found[0] == found[1]


class EventStreams:
    """The event streams of one namespace, through a synchronous client."""

    def __init__(self, redis: Redis, keys: Keyspace) -> None:
        self.redis = redis
        self.keys = keys
        self._local = threading.local()
        #: Where appends wait for the store's next commit (``ride_with``); None: sent at once.
        self.riders: StreamRiders | None = None

    def ride_with(self, store: Any, delay: float = DELAY) -> bool:
        """Send entries in the round trip of ``store``'s next commit; False if it cannot.

        ``store`` (a ``RedisAgentTurnStore`` on the same server; any other store cannot)
        takes them ahead of its commit script; what no commit takes within ``delay``
        seconds goes on its own.
        Entries that end a tree are still sent at once (their reply starts the expiry).
        """
        if not _same_server(self.redis, getattr(store, "redis", None)):
            return False
        riders = StreamRiders(self._send_riding, delay)
        if not store.carry(riders):
            return False
        self.riders = riders
        return True

    def tag(self, root_turn_id: str) -> str:
        """The store tag of a tree (one GET, then cached)."""
        known = _known_tag(self.keys, root_turn_id)
        if known is not None:
            return known
        raw = self.redis.get(self.keys.turn_index(root_turn_id))
        return _remember_tag(self.keys, root_turn_id, raw)

    def append(self, events: Sequence[AgentEvent], maxlen: int, ttl_after_end: int) -> None:
        """Append ``events`` to their trees' streams; a root's end starts the expiry."""
        if self.riders is not None and not any(_ends_tree(e) for e in events):
            for event in events:
                self.riders.put(event.turn_id, [self._xadd(event, maxlen)])
            return
        pipe = self._pipeline()
        trees: list[tuple[str, str]] = []
        for event in events:
            trees.append((self.tag(event.root_turn_id), event.root_turn_id))
            pipe.execute_command(*self._xadd(event, maxlen))
        ids = pipe.execute()
        ends = [
            (tree, stream_id)
            for event, tree, stream_id in zip(events, trees, ids, strict=True)
            if _ends_tree(event)
        ]
        if not ends:
            return
        pipe = self._pipeline()
        for (tag, root), stream_id in ends:
            pipe.set(self.keys.events_end(tag, root), stream_id, ex=ttl_after_end)
            pipe.expire(self.keys.events(tag, root), ttl_after_end)
        pipe.execute()

    def _xadd(self, event: AgentEvent, maxlen: int) -> Command:
        """The XADD of one event: ``seq`` (committed ones) and ``event``, trimmed to ~maxlen."""
        root = event.root_turn_id
        key = self.keys.events(self.tag(root), root)
        body = stored_event_json(event)
        if event.provisional:
            return ("XADD", key, "MAXLEN", "~", str(maxlen), "*", "event", body)
        seq = str(event.sequence)
        return ("XADD", key, "MAXLEN", "~", str(maxlen), "*", "seq", seq, "event", body)

    def _send_riding(self, commands: Sequence[Command]) -> None:
        """Send what no commit took in time; a failure is logged, never raised."""
        try:
            pipe = self._pipeline()
            for command in commands:
                pipe.execute_command(*command)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - events are best effort by design
            self.drop_pipeline()
            log.warning("%d stream entries not written: %s", len(commands), exc)

    def drop_pipeline(self) -> None:
        """Forget this thread's pipeline (after an error: its connection may be broken)."""
        self._local.pipe = None

    def _pipeline(self) -> Any:
        # one pipeline per thread, reused: building one costs more than the round trip
        pipe = getattr(self._local, "pipe", None)
        if pipe is None:
            pipe = self._local.pipe = self.redis.pipeline(transaction=False)
        return pipe

    def read(self, root_turn_id: str, after: str, block_ms: int | None, count: int) -> list[Entry]:
        """Up to ``count`` entries after the stream id ``after`` (waiting ``block_ms``)."""
        key = self.keys.events(self.tag(root_turn_id), root_turn_id)
        return parse_stream_reply(self.redis.xread({key: after}, count=count, block=block_ms))

    def end_id(self, root_turn_id: str) -> str | None:
        """The stream id of the root's terminal event, once the tree has ended."""
        value = self.redis.get(self.keys.events_end(self.tag(root_turn_id), root_turn_id))
        return text(value) if value is not None else None

    def committed(
        self, tag: str, root_turn_id: str, limit: int, *, newest: bool = False
    ) -> list[AgentEvent]:
        """The committed events of a tree, oldest first (provisional ones left out).

        ``newest``: those among the stream's last ``limit`` entries.
        """
        if limit == 0:
            return []  # XRANGE takes no count of 0
        key = self.keys.events(tag, root_turn_id)
        if newest:
            entries = list(reversed(self.redis.xrevrange(key, count=limit) or []))
        else:
            entries = self.redis.xrange(key, count=limit) or []
        events: list[AgentEvent] = []
        for _, raw in entries:
            fields = {text(k): text(v) for k, v in (raw or {}).items()}
            if "seq" not in fields:
                continue  # a provisional event
            doc = full_event(json.loads(fields["event"]), fields["seq"])
            events.append(event_from_dict(doc))
        return events


class AsyncEventStreams:
    """The event streams of one namespace, through an asyncio client (the HTTP app)."""

    def __init__(self, redis: Any, keys: Keyspace) -> None:
        self.redis = redis
        self.keys = keys

    async def tag(self, root_turn_id: str) -> str:
        """The store tag of a tree (one GET, then cached)."""
        known = _known_tag(self.keys, root_turn_id)
        if known is not None:
            return known
        raw = await self.redis.get(self.keys.turn_index(root_turn_id))
        return _remember_tag(self.keys, root_turn_id, raw)

    async def read(
        self, root_turn_id: str, after: str, block_ms: int | None, count: int
    ) -> list[Entry]:
        """Up to ``count`` entries after the stream id ``after`` (waiting ``block_ms``)."""
        key = self.keys.events(await self.tag(root_turn_id), root_turn_id)
        return parse_stream_reply(await self.redis.xread({key: after}, count=count, block=block_ms))

    async def end_id(self, root_turn_id: str) -> str | None:
        """The stream id of the root's terminal event, once the tree has ended."""
        tag = await self.tag(root_turn_id)
        value = await self.redis.get(self.keys.events_end(tag, root_turn_id))
        return text(value) if value is not None else None

    async def exists(self, root_turn_id: str) -> bool:
        """True once the tree's stream has an entry (and has not expired)."""
        tag = await self.tag(root_turn_id)
        return bool(await self.redis.exists(self.keys.events(tag, root_turn_id)))
