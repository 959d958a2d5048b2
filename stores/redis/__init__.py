"""The Redis turn store: Lua-atomic, fenced, cluster-safe, append-only.

Production server settings: ``appendonly yes``, ``appendfsync everysec`` (or ``always``),
``maxmemory-policy noeviction``; see ``store.py`` and ``deploy/REDIS.md``.
"""

from __future__ import annotations

from stores.redis.codec import TurnSummary
from stores.redis.connection import StoreUnavailableError
from stores.redis.memory import RedisChatMemory
from stores.redis.store import RedisAgentTurnStore

__all__ = ["RedisAgentTurnStore", "RedisChatMemory", "StoreUnavailableError", "TurnSummary"]
