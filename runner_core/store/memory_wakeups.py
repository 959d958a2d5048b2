"""The wake-up half of ``InMemoryAgentTurnStore``: queued marks and the sweeper's queries.

A mixin over the store's own state (its lock, records, live set and clock): the in-memory
counterpart of the Redis store's runnable index, marks and ``sweeps`` module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from runner_core.snapshot import AgentTurnSnapshot
from runner_core.status import AgentTurnStatus
from runner_core.store import Wakeups


class _HasHeader(Protocol):
    @property
    def header(self) -> AgentTurnSnapshot: ...


class MemoryWakeups:
    """Marks of queued wake-ups and the scans that find due and lost ones."""

    _lock: threading.RLock
    _records: Mapping[str, _HasHeader]
    _live: Mapping[str, None]
    _since: dict[str, float]  # since when a turn is runnable (if it is)
    _queued: dict[str, float]  # until when a queued wake-up is trusted
    _clock: Callable[[], float]
    #: How long a queued wake-up is trusted before the sweeper sends another (seconds).
    requeue_after: float

    def mark_queued(self, turn_ids: Sequence[str]) -> None:
        """A wake-up was sent for each turn: trust it for ``requeue_after`` seconds."""
        with self._lock:
            self._mark(
                [t for t in turn_ids if t in self._records], self._clock() + self.requeue_after
            )

    def unmark_queued(self, turn_id: str) -> None:
        """The wake-up for this turn was not sent after all."""
        with self._lock:
            self._queued.pop(turn_id, None)

    def forget_queued(self, before: float) -> int:
        """Wake-ups marked queued before ``before`` may be lost: clear those marks."""
        cutoff = before + self.requeue_after
        with self._lock:
            gone = [t for t, until in self._queued.items() if until <= cutoff]
            for turn_id in gone:
                del self._queued[turn_id]
                self._since[turn_id] = self._clock()
            return len(gone)

    def due_turn_ids(self, now: float, limit: int = 1000) -> list[str]:
        """Scheduled retries whose time has come and no queued wake-up covers."""
        with self._lock:
            return self._scan(now, limit, retries_only=True)

    def stale_turn_ids(self, now: float, older_than: float, limit: int = 1000) -> list[str]:
        """Turns runnable for ``older_than`` seconds that nobody serves."""
        with self._lock:
            return self._scan(now - older_than, limit, retries_only=False)

    def wakeups(self, now: float, lost_after: float, limit: int = 1000) -> Wakeups:
        """Due retries and lost wake-ups (a scan of live turns: the embedded store)."""
        return Wakeups(self.due_turn_ids(now, limit), self.stale_turn_ids(now, lost_after, limit))

    def _scan(self, bound: float, limit: int, *, retries_only: bool) -> list[str]:
        found: list[tuple[float, str]] = []
        for turn_id in self._live:
            h = self._records[turn_id].header
            if retries_only and (
                h.status is not AgentTurnStatus.RETRY_SCHEDULED or h.cancel_requested
            ):
                continue
            score = self._score(h)
            if score is not None and score <= bound:
                found.append((score, turn_id))
        return [turn_id for _, turn_id in sorted(found)[:limit]]

    def _score(self, h: AgentTurnSnapshot) -> float | None:
        """Since when the sweeper should care about a turn (the runnable index's score)."""
        if h.status.is_terminal:
            return None
        since = self._since.get(h.id, h.updated_at)
        if h.status is AgentTurnStatus.RETRY_SCHEDULED and not h.cancel_requested:
            since = h.next_runnable_at if h.next_runnable_at is not None else since
        elif not served_by_wake_up(h):
            return None
        if h.lease is not None:
            since = max(since, h.lease.until)
        return max(since, self._queued.get(h.id, since))

    def _mark(self, turn_ids: Sequence[str], until: float) -> None:
        now = self._clock()
        for turn_id in turn_ids:
            h = self._records[turn_id].header
            due = h.status is AgentTurnStatus.RETRY_SCHEDULED and (h.next_runnable_at or 0) <= now
            wakeable = due or served_by_wake_up(h)
            leased = h.lease is not None and h.lease.until > now
            if wakeable and not leased and not h.status.is_terminal:
                self._queued[turn_id] = until


def served_by_wake_up(h: AgentTurnSnapshot) -> bool:
    """READY, RUNNING, a cancel request or a woken parent: a wake-up makes it step."""
    return (
        h.cancel_requested
        or h.status in (AgentTurnStatus.READY, AgentTurnStatus.RUNNING)
        or h.all_children_reported()
    )
