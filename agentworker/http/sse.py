"""``GET /turns/{id}/events``: the tree's Redis Stream as Server-Sent Events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from redis import asyncio as aioredis

from agentworker.notify.streams import id_key, is_root_terminal, read_events_async
from stores.redis import AsyncEventStreams, Keyspace

#: Seconds without events after which a comment line keeps proxies from closing the stream.
PING_SECONDS = 15.0
BLOCK_MS = 1000


def format_event(stream_id: str, event: dict[str, Any]) -> str:
    """One SSE message: ``id`` is the stream id, ``event`` the type, ``data`` the JSON."""
    data = json.dumps(event, separators=(",", ":"))
    return f"id: {stream_id}\nevent: {event.get('type', 'message')}\ndata: {data}\n\n"


async def already_over(client: aioredis.Redis, namespace: str, root_id: str, after: str) -> bool:
    """True when nothing is left to send: the reader has the root's terminal event."""
    ended = await AsyncEventStreams(client, Keyspace(namespace)).end_id(root_id)
    return ended is not None and id_key(after) >= id_key(ended)


async def stream_exists(client: aioredis.Redis, namespace: str, root_id: str) -> bool:
    """True once the tree's stream has at least one event (and has not expired)."""
    return await AsyncEventStreams(client, Keyspace(namespace)).exists(root_id)


async def event_source(
    client: aioredis.Redis,
    namespace: str,
    root_id: str,
    after: str,
    root_ended: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """SSE text after ``after`` until the root's terminal event.

    ``root_ended`` is asked when the stream has been idle for a while: a tree that ended
    without a terminal event in the stream (events off in the workers) ends the response.
    """
    last, idle = after, 0.0
    while True:
        entries = await read_events_async(client, namespace, root_id, last, BLOCK_MS)
        if not entries:
            idle += BLOCK_MS / 1000
            if idle >= PING_SECONDS:
                idle = 0.0
                if await root_ended():
                    return
                yield ": ping\n\n"
            continue
        idle = 0.0
        for stream_id, event in entries:
            last = stream_id
            yield format_event(stream_id, event)
            if is_root_terminal(event):
                return
