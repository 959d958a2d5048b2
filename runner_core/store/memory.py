"""``InMemoryAgentTurnStore``: the embedded default, thread-safe within one process."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from runner_core.errors import (
    AgentConversationBusyException,
    CancelRequestedError,
    ConcurrentModificationError,
    HistoryRewrittenError,
    LeaseLostError,
    TurnLeasedError,
    TurnNotFoundError,
)
from runner_core.events import AgentEvent
from runner_core.messages import Message
from runner_core.snapshot import AgentTurnSnapshot, ChildResult, LeaseInfo
from runner_core.status import AgentTurnStatus
from runner_core.store import (
    CancelResult,
    Commit,
    LeaseRef,
    SaveResult,
    TurnControl,
    TurnListing,
    Wakeups,
    is_claimable,
    waiting_child_ids,
)
from runner_core.store import arguments as check
from runner_core.store.wakeup_index import WakeupIndex


@dataclass(slots=True)
class _Record:
    header: AgentTurnSnapshot  # messages kept apart, append-only
    messages: list[Message] = field(default_factory=list)
    #: request id and reply of the last commit (a replay answers the same)
    last: tuple[str, SaveResult] | None = None


class InMemoryAgentTurnStore:
    """Turns in a dict behind one lock; saves append new messages only.

    ``keep_events``: committed events are kept per tree (at most ``max_events`` each) for
    ``read_events``; off by default, as an embedded runner's listeners see them anyway.
    """

    def __init__(
        self,
        *,
        keep_events: bool = False,
        max_events: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.RLock()
        self._records: dict[str, _Record] = {}
        self._live: dict[str, None] = {}  # non-terminal ids, insertion ordered
        self._conversations: dict[str, str] = {}
        self._children: dict[str, list[str]] = {}
        self._events: dict[str, deque[AgentEvent]] | None = {} if keep_events else None
        self._wakeups = WakeupIndex(clock)
        #: How long a queued wake-up is trusted before the sweeper sends another (seconds).
        self.requeue_after = 300.0
        #: Whether committed events are kept (a runner builds them only then, or to listeners).
        self.records_events = keep_events
        self._max_events = max_events
        self._clock = clock

    def now(self) -> float:
        """Seconds since the epoch (wall clock unless a ``clock`` was given)."""
        return self._clock()

    def commit(self, commit: Commit) -> SaveResult:
        """Check everything, then write; see ``Commit``."""
        check.commit(commit)
        s = commit.snapshot
        with self._lock:
            if commit.expected_version == -1:
                self._check_create(s)
                for child in commit.children:
                    self._check_create(child)
                return self._apply(commit, None)
            record = self._get(s.id)
            self._wakeups.check_writable(s.id)
            if record.last is not None and record.last[0] == commit.request_id:
                if record.header.version == commit.expected_version + 1:
                    return record.last[1]  # a replay after a lost reply
            record = self._existing(s.id, commit.expected_version)
            self._check_writer(record.header, commit.lease)
            if commit.unless_cancelled and record.header.cancel_requested:
                if not s.cancel_requested:
                    raise CancelRequestedError(s.id)
            self._check_append_only(s, record)
            for child in commit.children:
                self._check_create(child)
            return self._apply(commit, record)

    def read_events(
        self, root_turn_id: str, limit: int = 10_000, *, newest: bool = False
    ) -> list[AgentEvent]:
        """Committed events of the tree, oldest first (``keep_events`` must be on)."""
        check.read_events(root_turn_id, limit)
        with self._lock:
            if self._events is None:
                return []
            events = list(self._events.get(root_turn_id, ()))
            return events[-limit:] if newest else events[:limit]

    def report_child(self, child_turn_id: str) -> bool:
        """Record an ended child's result in its waiting parent; True if that woke it."""
        check.turn(child_turn_id, "child_turn_id")
        with self._lock:
            child = self._get(child_turn_id).header
            if not child.status.is_terminal:
                return False
            return self._fan_in(child)

    def load(self, turn_id: str) -> AgentTurnSnapshot:
        """A copy of the stored turn."""
        check.turn(turn_id)
        with self._lock:
            record = self._get(turn_id)
            copy = record.header.copy_state()
            copy.messages = list(record.messages)
            return copy

    def peek(self, turn_id: str) -> TurnControl:
        """The control fields of a turn and the clock."""
        check.turn(turn_id)
        with self._lock:
            h = self._get(turn_id).header
            return TurnControl(h.version, h.status, h.cancel_requested, h.lease, self._clock())

    def turn_counts(self) -> dict[str, int]:
        """Live turns by the states the Redis store's indexes count (``agentworker_turns``)."""
        with self._lock:
            now = self._clock()
            headers = self._live_headers()
        return {
            "live": len(headers),
            "runnable": sum(1 for h in headers if _indexed_runnable(h)),
            "leased": sum(1 for h in headers if h.lease is not None and h.lease.until > now),
            "waiting_for_children": sum(
                1
                for h in headers
                if h.status is AgentTurnStatus.WAITING_FOR_CHILD and not h.all_children_reported()
            ),
            "quarantined": len(self._wakeups.quarantine),
        }

    def find_active_turn(self, conversation_id: str) -> tuple[str, AgentTurnStatus] | None:
        """The conversation's non-terminal root turn, if any."""
        check.turn(conversation_id, "conversation_id")
        with self._lock:
            turn_id = self._conversations.get(conversation_id)
            if turn_id is None:
                return None
            status = self._records[turn_id].header.status
            return None if status.is_terminal else (turn_id, status)

    def request_cancellation(
        self, turn_id: str, reason: str | None = None, events: Sequence[AgentEvent] = ()
    ) -> CancelResult:
        """Set the monotonic cancel flag and its reason (no version change)."""
        check.cancellation(turn_id, reason, events)
        with self._lock:
            self._wakeups.check_writable(turn_id)
            h = self._get(turn_id).header
            if h.status.is_terminal or h.cancel_requested:
                return CancelResult(False)
            h.cancel_requested, h.cancel_reason = True, reason
            return CancelResult(True, self._log(h, events))

    def claim(
        self, turn_id: str, worker_id: str, now: float, lease_ms: int
    ) -> AgentTurnSnapshot | None:
        """Lease the turn if claimable: new lease id, version bumped."""
        check.claim(turn_id, worker_id, now, lease_ms)
        with self._lock:
            record = self._get(turn_id)
            self._wakeups.check_writable(turn_id)
            if not is_claimable(record.header, now, self._parent_lease(record.header)):
                return None
            h = record.header
            h.lease = LeaseInfo(
                owner=worker_id, lease_id=uuid.uuid4().hex, until=now + lease_ms / 1000
            )
            h.version += 1
            self._wakeups.claimed(turn_id)
            return self.load(turn_id)

    def claim_runnable(
        self, worker_id: str, now: float, lease_ms: int, limit: int
    ) -> list[AgentTurnSnapshot]:
        """Lease up to ``limit`` claimable turns, oldest first."""
        check.claim_runnable(worker_id, now, lease_ms, limit)
        claimed: list[AgentTurnSnapshot] = []
        with self._lock:
            for turn_id in list(self._live):
                if len(claimed) >= limit:
                    break
                snapshot = self.claim(turn_id, worker_id, now, lease_ms)
                if snapshot is not None:
                    claimed.append(snapshot)
        return claimed

    def renew_lease(
        self, turn_id: str, worker_id: str, lease_id: str, now: float, until: float
    ) -> bool:
        """Extend a live lease of this owner and lease id."""
        check.renew(turn_id, worker_id, lease_id, now, until)
        with self._lock:
            h = self._get(turn_id).header
            lease = h.lease
            if lease is None or (lease.owner, lease.lease_id) != (worker_id, lease_id):
                return False
            if lease.until <= now:
                return False
            h.lease = LeaseInfo(owner=worker_id, lease_id=lease_id, until=until)
            return True

    def release_lease(self, turn_id: str, worker_id: str, lease_id: str) -> bool:
        """Drop the lease of this owner and lease id."""
        check.lease(turn_id, worker_id, lease_id)
        with self._lock:
            h = self._get(turn_id).header
            lease = h.lease
            if lease is None or (lease.owner, lease.lease_id) != (worker_id, lease_id):
                return False
            h.lease = None
            self._wakeups.released(turn_id)
            return True

    def mark_queued(self, turn_ids: Sequence[str]) -> None:
        """A wake-up was sent for each turn: trust it for ``requeue_after`` seconds."""
        check.queued(turn_ids)
        with self._lock:
            known = [self._records[t].header for t in turn_ids if t in self._records]
            self._wakeups.mark(known, self._clock() + self.requeue_after)

    def unmark_queued(self, turn_id: str) -> None:
        """The wake-up for this turn was not sent after all."""
        check.turn(turn_id)
        with self._lock:
            self._wakeups.unmark(turn_id)

    def forget_queued(self, before: float) -> int:
        """Wake-ups marked queued before ``before`` may be lost: clear those marks."""
        check.times(before=before)
        with self._lock:
            return self._wakeups.forget(before + self.requeue_after)

    def due_turn_ids(self, now: float, limit: int = 1000) -> list[str]:
        """Scheduled retries whose time has come and no queued wake-up covers."""
        check.due(now, limit)
        with self._lock:
            return self._wakeups.scan(self._live_headers(), now, limit, retries_only=True)

    def stale_turn_ids(self, now: float, older_than: float, limit: int = 1000) -> list[str]:
        """Turns runnable for ``older_than`` seconds that nobody serves."""
        check.stale(now, older_than, limit)
        with self._lock:
            bound = now - older_than
            return self._wakeups.scan(self._live_headers(), bound, limit, retries_only=False)

    def wakeups(self, now: float, lost_after: float, limit: int = 1000) -> Wakeups:
        """Due retries and lost wake-ups (a scan of live turns: the embedded store)."""
        check.wakeups(now, lost_after, limit)
        return Wakeups(self.due_turn_ids(now, limit), self.stale_turn_ids(now, lost_after, limit))

    def list_turns(
        self,
        status: AgentTurnStatus | None = None,
        root_turn_id: str | None = None,
        limit: int = 100,
        *,
        before: tuple[float, str] | None = None,
    ) -> list[TurnListing]:
        """Stored turns, newest first: all, one status, or one turn tree (as the Redis store).

        Newest first is by (created at, turn id); ``before`` lists only the turns older than
        that position (the last one of a previous page).
        """
        check.listing(status, root_turn_id, before, limit)
        return list(itertools.islice(self.iter_turns(status, root_turn_id, before=before), limit))

    def iter_turns(
        self,
        status: AgentTurnStatus | None = None,
        root_turn_id: str | None = None,
        *,
        before: tuple[float, str] | None = None,
    ) -> Iterator[TurnListing]:
        """``list_turns`` without a limit."""
        check.listing(status, root_turn_id, before)
        with self._lock:
            headers = [r.header for r in self._records.values()]
        found = [
            TurnListing(
                h.id,
                h.status,
                h.agent_id,
                h.root_turn_id,
                h.parent_turn_id,
                h.conversation_id,
                h.version,
                h.created_at,
                h.updated_at,
                h.cancel_requested,
            )
            for h in headers
            if (status is None or h.status is status)
            and (root_turn_id is None or h.root_turn_id == root_turn_id)
            and (before is None or (h.created_at, h.id) < before)
        ]
        found.sort(key=lambda t: (t.created_at, t.turn_id), reverse=True)
        yield from found

    def children_of(self, parent_turn_id: str) -> list[str]:
        """Direct children, oldest first."""
        check.turn(parent_turn_id, "parent_turn_id")
        with self._lock:
            return list(self._children.get(parent_turn_id, ()))

    def quarantine(self, turn_id: str, reason: str) -> bool:
        """Set a turn aside for good (nothing claims, wakes or writes it); False if it was."""
        check.quarantine(turn_id, reason)
        with self._lock:
            self._get(turn_id).header.lease = None
            self._live.pop(turn_id, None)
            return self._wakeups.set_aside(turn_id, reason)

    def quarantined(self, limit: int = 100) -> list[tuple[str, str, float]]:
        """(turn id, reason, when) of quarantined turns, newest first."""
        check.count(limit)
        with self._lock:
            found = [(t, reason, when) for t, (reason, when) in self._wakeups.quarantine.items()]
        return sorted(found, key=lambda f: -f[2])[:limit]

    def find_terminal_children_with_waiting_parent(self, limit: int) -> list[tuple[str, str]]:
        """Ended children whose result has not reached the parent that waits on them."""
        check.count(limit)
        found: list[tuple[str, str]] = []
        with self._lock:
            for parent_id in self._live:
                parent = self._records[parent_id].header
                for child_id in waiting_child_ids(parent):
                    if child_id in parent.child_results:
                        continue
                    child = self._records.get(child_id)
                    if child is not None and child.header.status.is_terminal:
                        found.append((child_id, parent_id))
                        if len(found) >= limit:
                            return found
        return found

    # -- internals (caller holds the lock) -------------------------------------------

    def _live_headers(self) -> list[AgentTurnSnapshot]:
        return [self._records[turn_id].header for turn_id in self._live]

    def _get(self, turn_id: str) -> _Record:
        record = self._records.get(turn_id)
        if record is None:
            raise TurnNotFoundError(turn_id)
        return record

    def _existing(self, turn_id: str, expected_version: int) -> _Record:
        record = self._get(turn_id)
        if record.header.version != expected_version:
            raise ConcurrentModificationError(turn_id, expected_version, record.header.version)
        return record

    def _check_create(self, snapshot: AgentTurnSnapshot) -> None:
        existing = self._records.get(snapshot.id)
        if existing is not None:
            raise ConcurrentModificationError(snapshot.id, -1, existing.header.version)
        cid = snapshot.conversation_id
        if cid and snapshot.parent_turn_id is None:
            active = self.find_active_turn(cid)
            if active is not None:
                raise AgentConversationBusyException(cid, active[0], active[1])

    def _check_append_only(self, snapshot: AgentTurnSnapshot, record: _Record) -> None:
        stored = record.messages
        new = snapshot.messages
        if len(new) < len(stored) or (stored and new[len(stored) - 1].id != stored[-1].id):
            raise HistoryRewrittenError(
                snapshot.id, f"save has {len(new)} messages, {len(stored)} stored differ"
            )

    def _check_writer(self, h: AgentTurnSnapshot, lease: LeaseRef | None) -> None:
        held = h.lease
        if held is None and lease is None:
            return
        if lease is not None:
            if held is None or (held.owner, held.lease_id) != lease:
                raise LeaseLostError(h.id, f"lease {lease[1]} of {lease[0]!r} is not held")
            return
        now = self._clock()
        if held is not None and held.until > now:
            raise TurnLeasedError(h.id, held.owner, held.until - now)

    def _apply(self, commit: Commit, record: _Record | None) -> SaveResult:
        s = commit.snapshot
        was_terminal = record is not None and record.header.status.is_terminal
        record = self._write(s, record)
        h = record.header
        for child in commit.children:
            self._write(child, None, parent=h)
        first = self._log(h, commit.events)
        released, lease_until = self._settle_lease(commit, h)
        woken = False
        if s.parent_turn_id is not None and s.status.is_terminal and not was_terminal:
            woken = self._fan_in(h)
        if commit.wake:
            until = self._clock() + self.requeue_after
            marked = [s.id, *(c.id for c in commit.children)]
            if woken and s.parent_turn_id:
                marked.append(s.parent_turn_id)
            self._wakeups.mark([self._records[t].header for t in marked], until)
        result = SaveResult(h.version, h.cancel_requested, released, first, woken, lease_until)
        record.last = (commit.request_id, result)
        return result

    def _settle_lease(self, commit: Commit, h: AgentTurnSnapshot) -> tuple[bool, float | None]:
        """Give back, keep or renew the writer's lease; (released, its expiry after)."""
        if commit.lease is None:
            return False, None
        held = h.lease
        ours = held is not None and (held.owner, held.lease_id) == commit.lease
        if commit.release and not (commit.renew_seconds is not None and _runs_at_once(h)):
            if ours:
                h.lease = None
            return True, None
        if held is None or not ours:
            return False, None
        now = self._clock()
        if commit.renew_seconds is not None and held.until > now:
            held = h.lease = LeaseInfo(
                owner=held.owner, lease_id=held.lease_id, until=now + commit.renew_seconds
            )
        return False, held.until

    def _log(self, h: AgentTurnSnapshot, events: Sequence[AgentEvent]) -> int:
        """Number ``events`` from the turn's counter and keep them; the first number."""
        first = h.event_sequence + 1
        if not events:
            return first
        h.event_sequence += len(events)
        if self._events is not None:
            log = self._events.get(h.root_turn_id)
            if log is None:
                log = self._events[h.root_turn_id] = deque(maxlen=self._max_events)
            log.extend(e.sequenced(first + i) for i, e in enumerate(events))
        return first

    def _fan_in(self, child: AgentTurnSnapshot) -> bool:
        parent_id = child.parent_turn_id
        record = self._records.get(parent_id or "")
        if record is None:
            return False
        parent = record.header
        if child.id not in waiting_child_ids(parent) or child.id in parent.child_results:
            return False
        parent.child_results = {**parent.child_results, child.id: ChildResult.of(child)}
        return parent.all_children_reported()

    def _parent_lease(self, h: AgentTurnSnapshot) -> LeaseInfo | None:
        if h.parent_turn_id is None:
            return None
        parent = self._records.get(h.parent_turn_id)
        return parent.header.lease if parent is not None else None

    def _write(
        self,
        snapshot: AgentTurnSnapshot,
        record: _Record | None,
        parent: AgentTurnSnapshot | None = None,
    ) -> _Record:
        results: dict[str, ChildResult] = {}
        if record is None:
            version, cancel, lease, messages = 0, snapshot.cancel_requested, None, []
            reason, sequence = snapshot.cancel_reason, 0
            if parent is not None and parent.cancel_requested:
                # a cancel request that reached the parent before this write covers its new
                # children too (the request's cascade listed the tree before they existed)
                cancel, reason = True, reason or parent.cancel_reason
        else:
            h = record.header
            version = h.version + 1
            cancel = h.cancel_requested or snapshot.cancel_requested
            lease, messages = h.lease, record.messages
            reason, sequence = h.cancel_reason or snapshot.cancel_reason, h.event_sequence
            # results stay only for children the written state still waits on
            if h.child_results:
                waiting = waiting_child_ids(snapshot)
                results = {c: r for c, r in h.child_results.items() if c in waiting}
        header = snapshot.copy_state(
            with_messages=False,
            version=version,
            cancel_requested=cancel,
            lease=lease,
            cancel_reason=reason,
            event_sequence=sequence,
            child_results=results,
        )
        messages.extend(snapshot.messages[len(messages) :])
        self._index(header, record is None)
        if record is None:
            record = self._records[snapshot.id] = _Record(header, messages)
        else:
            record.header = header
        return record

    def _index(self, header: AgentTurnSnapshot, created: bool) -> None:
        if header.status.is_terminal:
            self._live.pop(header.id, None)
        else:
            self._live[header.id] = None
        self._wakeups.written(header)
        if created:
            if header.parent_turn_id is not None:
                self._children.setdefault(header.parent_turn_id, []).append(header.id)
            elif header.conversation_id:
                self._conversations[header.conversation_id] = header.id


def _runs_at_once(h: AgentTurnSnapshot) -> bool:
    """Whether a written turn's next step can follow at once (a chain keeps its lease)."""
    if h.status.is_terminal:
        return False
    return h.cancel_requested or h.status in (AgentTurnStatus.READY, AgentTurnStatus.RUNNING)


def _indexed_runnable(h: AgentTurnSnapshot) -> bool:
    """In the Redis store's runnable index: not blocked (retries count), or woken."""
    runnable = (AgentTurnStatus.READY, AgentTurnStatus.RUNNING, AgentTurnStatus.RETRY_SCHEDULED)
    return h.status in runnable or h.cancel_requested or h.all_children_reported()
