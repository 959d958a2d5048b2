"""The Redis server clock, read every few seconds and counted locally in between."""

from __future__ import annotations

import time

from redis import Redis

from stores.redis.connection import Guard


class ServerClock:
    """``TIME`` of one Redis, so every worker agrees on one clock without a round trip each."""

    def __init__(self, redis: Redis, guard: Guard, sync_seconds: float = 5.0) -> None:
        self.redis = redis
        self.guard = guard
        #: How often ``now()`` reads ``TIME`` (seconds); in between it counts locally.
        self.sync_seconds = sync_seconds
        self._reading = (0.0, -1e18)

    def now(self) -> float:
        """The server clock, seconds since the epoch.

        ``TIME`` is read every ``sync_seconds`` and advanced by the local monotonic clock
        in between, so a local wall-clock jump changes nothing.
        """
        base, at = self._reading
        mono = time.monotonic()
        if mono - at > self.sync_seconds:
            for _ in range(2):  # a slow reading (a new connection: a cluster node) again
                with self.guard:
                    seconds, micros = self.redis.time()
                after = time.monotonic()
                if after - mono < 0.002:
                    break
                mono = time.monotonic()
            base, at = int(seconds) + int(micros) / 1_000_000 + (after - mono) / 2, after
            self._reading = (base, at)
            mono = after
        return base + (mono - at)

    def cached(self) -> float | None:
        """``now()`` from the last reading if it is recent enough; None when it is due."""
        base, at = self._reading
        mono = time.monotonic()
        return base + (mono - at) if mono - at <= self.sync_seconds else None

    def record(self, seconds: int, micros: int, sent: float, received: float) -> float:
        """Keep a ``TIME`` reply read between the monotonic times ``sent`` and ``received``."""
        base = seconds + micros / 1_000_000 + (received - sent) / 2
        self._reading = (base, received)
        return base + (time.monotonic() - received)
