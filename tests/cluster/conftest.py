"""Fixtures of the Redis Cluster tests: the contract suite's local cluster and server."""

from __future__ import annotations

from tests.support.store_fixtures import namespace, redis_cluster, redis_server

__all__ = ["namespace", "redis_cluster", "redis_server"]
