"""Failed sign-ins and credentials are throttled per client address.

A client whose credentials failed ``per_minute`` times in the last minute is answered 429
with ``Retry-After`` until the oldest of those failures is a minute old, before its
credentials are looked at, so guessing a token costs a minute per ``per_minute`` guesses.
The address is the ASGI client's: behind a proxy, run uvicorn with ``--proxy-headers`` and
``--forwarded-allow-ips`` so it is the caller's, not the proxy's. The count is per process
(each uvicorn worker keeps its own) and holds at most ``max_clients`` addresses.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any

from agentworker.http.errors import ApiError

WINDOW_SECONDS = 60.0


class FailureThrottle:
    """Counts credential failures per client address over a sliding minute."""

    def __init__(
        self,
        per_minute: int,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self.max_clients = max_clients
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """Raise 429 (``Retry-After``) if ``client`` failed too often in the last minute."""
        if self.per_minute <= 0:
            return
        with self._lock:
            times = self._recent(client)
            if times is None or len(times) < self.per_minute:
                return
            wait = times[0] + WINDOW_SECONDS - self.clock()
        raise ApiError(
            429,
            f"too many failed credentials from {client}; try again in {max(1.0, wait):.0f} s",
            retry_after=wait,
        )

    def failed(self, client: str) -> None:
        """Count one failure of ``client``."""
        if self.per_minute <= 0:
            return
        with self._lock:
            times = self._recent(client)
            if times is None:
                times = self._failures[client] = deque(maxlen=self.per_minute)
                while len(self._failures) > self.max_clients:
                    self._failures.popitem(last=False)  # the least recently failed
            else:
                self._failures.move_to_end(client)
            times.append(self.clock())

    def _recent(self, client: str) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        horizon = self.clock() - WINDOW_SECONDS
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times


def client_of(scope: Mapping[str, Any]) -> str:
    """The client address of an ASGI scope (``unknown`` when the server gives none)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"
