"""Turn stores: the in-memory default and the Redis store Celery workers share."""

from __future__ import annotations

from runner_core.memory_store import InMemoryAgentTurnStore
from stores.redis import (
    RedisAgentTurnStore,
    RedisChatMemory,
    StoreUnavailableError,
    TurnSummary,
)

__all__ = [
    "InMemoryAgentTurnStore",
    "RedisAgentTurnStore",
    "RedisChatMemory",
    "StoreUnavailableError",
    "TurnSummary",
]
