"""Turn stores: the in-memory default and the Redis store Celery workers share."""

from __future__ import annotations

from runner_core.store.memory import InMemoryAgentTurnStore
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
