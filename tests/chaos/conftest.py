"""Chaos tests reuse the end-to-end fixtures (private redis-server, real workers)."""

from tests.e2e.conftest import fleet, fleet_env, producer_env, redis_server

__all__ = ["fleet", "fleet_env", "producer_env", "redis_server"]
