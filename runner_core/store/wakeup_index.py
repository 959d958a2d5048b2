"""The in-memory store's wake-up index: since when live turns need attention, queued marks.

The in-memory counterpart of the Redis store's runnable index, queued marks and quarantine
(turns that never need attention again). The store owns one, calls it under its own lock
and hands it the headers it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from runner_core.errors import SnapshotCorruptedError
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.status import AgentTurnStatus


class WakeupIndex:
    """Since when each live turn is runnable, and until when a queued wake-up is trusted."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._since: dict[str, float] = {}  # since when a turn is runnable (if it is)
        self._queued: dict[str, float] = {}  # until when a queued wake-up is trusted
        #: Quarantined turns: id -> (reason, when); never scored, marked or woken.
        self.quarantine: dict[str, tuple[str, float]] = {}

    def written(self, h: AgentTurnSnapshot) -> None:
        """A write of the turn: runnable from now while it lives, forgotten once it ended."""
        if h.status.is_terminal:
            self._since.pop(h.id, None)
            self._queued.pop(h.id, None)
        else:
            self._since[h.id] = self._clock()

    def released(self, turn_id: str) -> None:
        """Its lease was given back: the turn counts as runnable from now."""
        self._since[turn_id] = self._clock()

    def claimed(self, turn_id: str) -> None:
        """A claim served the queued wake-up, if there was one."""
        self._queued.pop(turn_id, None)

    def mark(self, headers: Iterable[AgentTurnSnapshot], until: float) -> None:
        """Trust a sent wake-up until ``until`` for each turn one can serve now."""
        now = self._clock()
        for h in headers:
            if h.id in self.quarantine:
                continue
            due = h.status is AgentTurnStatus.RETRY_SCHEDULED and (h.next_runnable_at or 0) <= now
            wakeable = due or served_by_wake_up(h)
            leased = h.lease is not None and h.lease.until > now
            if wakeable and not leased and not h.status.is_terminal:
                self._queued[h.id] = until

    def set_aside(self, turn_id: str, reason: str) -> bool:
        """Quarantine the turn: no score, no mark from now on; False if it already was."""
        self._since.pop(turn_id, None)
        self._queued.pop(turn_id, None)
        if turn_id in self.quarantine:
            return False
        self.quarantine[turn_id] = (reason, self._clock())
        return True

    def check_writable(self, turn_id: str) -> None:
        """``SnapshotCorruptedError`` if the turn is quarantined (the Redis scripts refuse it)."""
        quarantined = self.quarantine.get(turn_id)
        if quarantined is not None:
            raise SnapshotCorruptedError(turn_id, f"quarantined: {quarantined[0]}")

    def unmark(self, turn_id: str) -> None:
        """The wake-up for this turn was not sent after all."""
        self._queued.pop(turn_id, None)

    def forget(self, cutoff: float) -> int:
        """Clear the marks trusted until ``cutoff`` or earlier; runnable from now."""
        gone = [t for t, until in self._queued.items() if until <= cutoff]
        for turn_id in gone:
            del self._queued[turn_id]
            self._since[turn_id] = self._clock()
        return len(gone)

    def scan(
        self, live: Iterable[AgentTurnSnapshot], bound: float, limit: int, *, retries_only: bool
    ) -> list[str]:
        """Ids of ``live`` turns that need attention since ``bound`` or earlier, oldest first."""
        found: list[tuple[float, str]] = []
        for h in live:
            if retries_only and (
                h.status is not AgentTurnStatus.RETRY_SCHEDULED or h.cancel_requested
            ):
                continue
            score = self._score(h)
            if score is not None and score <= bound:
                found.append((score, h.id))
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


def served_by_wake_up(h: AgentTurnSnapshot) -> bool:
    """READY, RUNNING, a cancel request or a woken parent: a wake-up makes it step."""
    return (
        h.cancel_requested
        or h.status in (AgentTurnStatus.READY, AgentTurnStatus.RUNNING)
        or h.all_children_reported()
    )
