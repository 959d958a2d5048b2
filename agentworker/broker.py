"""The Redis broker transport: kombu's, with one client per channel instead of per command.

kombu's Redis channel builds a new ``redis.Redis`` object (same connection pool) for every
publish, every unacked record and every ack (``Channel._create_client``); with redis-py 6
and newer each one costs tens of microseconds, three times per step. This transport keeps
one synchronous client per channel and pool (a client on a pool is thread-safe), and is
otherwise kombu's own. Selected through Celery's ``broker_transport`` for ``redis://``
broker URLs only.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

TRANSPORT = "agentworker.broker:RedisTransport"


class RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel, reusing its synchronous client."""

    _reused: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        pool = self.pool
        reused = self._reused
        if reused is None or reused[0] is not pool:
            reused = self._reused = (pool, super()._create_client())  # type: ignore[no-untyped-call]
        return reused[1]


class RedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with ``RedisChannel``."""

    Channel = RedisChannel


def transport_for(broker_url: str) -> str | None:
    """``broker_transport`` for a broker URL: ours for ``redis://``, else kombu's choice."""
    return TRANSPORT if broker_url.startswith("redis://") else None
