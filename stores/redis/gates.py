"""Small Redis records beside the turn store: beat's sweep gate, the HTTP request ledger.

Each is one key family of ``keys.py`` (``ns:sweep:pending``, ``ns:http:request:*``),
written with single-key commands; what they mean to the fleet or the HTTP API stays with
their callers (``agentworker.fleet.beat``, ``agentworker.http.auth``).
"""

from __future__ import annotations

from typing import Any

from redis import Redis

from stores.redis.codec import text
from stores.redis.keys import Keyspace


class SweepGate:
    """The ``<namespace>:sweep:pending`` mark: set by beat on send, deleted by the sweep."""

    def __init__(self, client: Redis, keys: Keyspace, ttl_seconds: float) -> None:
        self.client = client
        self.key = keys.sweep_pending()
        self.ttl_ms = max(1, int(ttl_seconds * 1000))

    def acquire(self) -> bool:
        """Mark a sweep as pending; false if one already is."""
        return bool(self.client.set(self.key, "1", nx=True, px=self.ttl_ms))

    def release(self) -> None:
        """The pending sweep started (or was never sent): the next one may go."""
        self.client.delete(self.key)


class RequestRecords:
    """The HTTP request ledger's entries, one expiring string per (tenant, request id).

    ``client`` is an asyncio client (``async_client``); records are opaque text.
    """

    def __init__(self, client: Any, keys: Keyspace) -> None:
        self.redis = client
        self.keys = keys

    async def claim(self, tenant: str, request_id: str, record: str, seconds: int) -> bool:
        """Store ``record`` unless the request id has one; True if this call stored it."""
        key = self.keys.http_request(tenant, request_id)
        return bool(await self.redis.set(key, record, nx=True, ex=seconds))

    async def get(self, tenant: str, request_id: str) -> str | None:
        """The request id's record, if it has one."""
        raw = await self.redis.get(self.keys.http_request(tenant, request_id))
        return None if raw is None else text(raw)

    async def put(self, tenant: str, request_id: str, record: str, seconds: int) -> None:
        """Replace the request id's record."""
        await self.redis.set(self.keys.http_request(tenant, request_id), record, ex=seconds)

    async def forget(self, tenant: str, request_id: str) -> None:
        """Drop the request id's record."""
        await self.redis.delete(self.keys.http_request(tenant, request_id))
