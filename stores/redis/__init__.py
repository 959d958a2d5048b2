"""The Redis turn store: Lua-atomic, fenced, cluster-safe, append-only.

Production server settings: ``appendonly yes``, ``appendfsync everysec`` (or ``always``),
``maxmemory-policy noeviction``; see ``store.py`` and ``deploy/REDIS.md``.

Everything else of agentworker that keeps data in Redis does it through the names below:
the client factories, the keyspace, the webhook outbox, the event streams, beat's sweep
gate and the HTTP request ledger. Modules of this package not named here are private.
"""

from __future__ import annotations

from stores.redis.codec import TurnSummary
from stores.redis.connection import StoreUnavailableError, async_client, make_client
from stores.redis.counts import turn_counts
from stores.redis.gates import RequestRecords, SweepGate
from stores.redis.keys import Keyspace
from stores.redis.memory import RedisChatMemory
from stores.redis.outbox import Delivery, RedisOutbox
from stores.redis.store import RedisAgentTurnStore
from stores.redis.streams import AsyncEventStreams, EventStreams, parse_stream_reply, stream_client

__all__ = [
    "AsyncEventStreams",
    "Delivery",
    "EventStreams",
    "Keyspace",
    "RedisAgentTurnStore",
    "RedisChatMemory",
    "RedisOutbox",
    "RequestRecords",
    "StoreUnavailableError",
    "SweepGate",
    "TurnSummary",
    "async_client",
    "make_client",
    "parse_stream_reply",
    "stream_client",
    "turn_counts",
]
