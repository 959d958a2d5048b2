"""``InMemoryAgentTurnStore``: the embedded default, thread-safe within one process."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from runner_core.errors import (
    AgentConversationBusyException,
    ConcurrentModificationError,
    HistoryRewrittenError,
    TurnNotFoundError,
)
from runner_core.messages import Message
from runner_core.snapshot import AgentTurnSnapshot, LeaseInfo
from runner_core.status import AgentTurnStatus
from runner_core.store import LeaseRef, SaveResult, TurnControl, is_claimable, waiting_child_ids


@dataclass(slots=True)
class _Record:
    header: AgentTurnSnapshot  # messages kept apart, append-only
    messages: list[Message] = field(default_factory=list)


class InMemoryAgentTurnStore:
    """Turns in a dict behind one lock; saves append new messages only."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._records: dict[str, _Record] = {}
        self._live: dict[str, None] = {}  # non-terminal ids, insertion ordered
        self._conversations: dict[str, str] = {}
        self._children: dict[str, list[str]] = {}

    def now(self) -> float:
        """Wall-clock seconds since the epoch."""
        return time.time()

    def save(
        self, snapshot: AgentTurnSnapshot, expected_version: int, release: LeaseRef | None = None
    ) -> SaveResult:
        """Create or compare-and-set update; see ``AgentTurnStore``."""
        with self._lock:
            if expected_version == -1:
                self._check_create(snapshot)
                return self._write(snapshot, None)
            record = self._existing(snapshot.id, expected_version)
            return self._released(self._write(snapshot, record), snapshot.id, release)

    def save_parent_and_children(
        self,
        parent: AgentTurnSnapshot,
        expected_parent_version: int,
        children: Sequence[AgentTurnSnapshot],
        release: LeaseRef | None = None,
    ) -> SaveResult:
        """Check everything first, then write the parent and create the children."""
        with self._lock:
            record = self._existing(parent.id, expected_parent_version)
            self._check_append_only(parent, record)
            for child in children:
                self._check_create(child)
            result = self._write(parent, record)
            for child in children:
                self._write(child, None)
            return self._released(result, parent.id, release)

    def load(self, turn_id: str) -> AgentTurnSnapshot:
        """A copy of the stored turn."""
        with self._lock:
            record = self._get(turn_id)
            copy = record.header.copy_state()
            copy.messages = list(record.messages)
            return copy

    def peek(self, turn_id: str) -> TurnControl:
        """The control fields of a turn and the clock."""
        with self._lock:
            h = self._get(turn_id).header
            return TurnControl(h.version, h.status, h.cancel_requested, h.lease, time.time())

    def find_active_turn(self, conversation_id: str) -> tuple[str, AgentTurnStatus] | None:
        """The conversation's non-terminal root turn, if any."""
        with self._lock:
            turn_id = self._conversations.get(conversation_id)
            if turn_id is None:
                return None
            status = self._records[turn_id].header.status
            return None if status.is_terminal else (turn_id, status)

    def request_cancellation(self, turn_id: str, reason: str | None = None) -> bool:
        """Set the monotonic cancel flag and its reason (no version change)."""
        with self._lock:
            h = self._get(turn_id).header
            if h.status.is_terminal or h.cancel_requested:
                return False
            h.cancel_requested, h.cancel_reason = True, reason
            return True

    def claim(
        self, turn_id: str, worker_id: str, now: float, lease_ms: int
    ) -> AgentTurnSnapshot | None:
        """Lease the turn if claimable: new lease id, version bumped."""
        with self._lock:
            record = self._get(turn_id)
            if not is_claimable(record.header, now, self._parent_lease(record.header)):
                return None
            h = record.header
            h.lease = LeaseInfo(
                owner=worker_id, lease_id=uuid.uuid4().hex, until=now + lease_ms / 1000
            )
            h.version += 1
            return self.load(turn_id)

    def claim_runnable(
        self, worker_id: str, now: float, lease_ms: int, limit: int
    ) -> list[AgentTurnSnapshot]:
        """Lease up to ``limit`` claimable turns, oldest first."""
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
        with self._lock:
            h = self._get(turn_id).header
            lease = h.lease
            if lease is None or (lease.owner, lease.lease_id) != (worker_id, lease_id):
                return False
            h.lease = None
            return True

    def children_of(self, parent_turn_id: str) -> list[str]:
        """Direct children, oldest first."""
        with self._lock:
            return list(self._children.get(parent_turn_id, ()))

    def find_terminal_children_with_waiting_parent(self, limit: int) -> list[tuple[str, str]]:
        """Ended children whose parent still lists them as awaited."""
        found: list[tuple[str, str]] = []
        with self._lock:
            for parent_id in self._live:
                parent = self._records[parent_id].header
                for child_id in waiting_child_ids(parent):
                    child = self._records.get(child_id)
                    if child is not None and child.header.status.is_terminal:
                        found.append((child_id, parent_id))
                        if len(found) >= limit:
                            return found
        return found

    # -- internals (caller holds the lock) -------------------------------------------

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

    def _released(self, result: SaveResult, turn_id: str, release: LeaseRef | None) -> SaveResult:
        if release is None:
            return result
        h = self._records[turn_id].header
        if h.lease is None or (h.lease.owner, h.lease.lease_id) != release:
            return result
        h.lease = None
        return SaveResult(result.version, result.cancel_requested, lease_released=True)

    def _parent_lease(self, h: AgentTurnSnapshot) -> LeaseInfo | None:
        if h.parent_turn_id is None:
            return None
        parent = self._records.get(h.parent_turn_id)
        return parent.header.lease if parent is not None else None

    def _write(self, snapshot: AgentTurnSnapshot, record: _Record | None) -> SaveResult:
        if record is None:
            version, cancel, lease, messages = 0, snapshot.cancel_requested, None, []
            reason = snapshot.cancel_reason
        else:
            self._check_append_only(snapshot, record)
            h = record.header
            version = h.version + 1
            cancel = h.cancel_requested or snapshot.cancel_requested
            lease, messages = h.lease, record.messages
            reason = h.cancel_reason or snapshot.cancel_reason
        header = snapshot.copy_state(with_messages=False)
        header.version, header.cancel_requested, header.lease = version, cancel, lease
        header.cancel_reason = reason
        messages.extend(snapshot.messages[len(messages) :])
        self._index(header, record is None)
        self._records[snapshot.id] = _Record(header, messages)
        return SaveResult(version, cancel)

    def _index(self, header: AgentTurnSnapshot, created: bool) -> None:
        if header.status.is_terminal:
            self._live.pop(header.id, None)
        else:
            self._live[header.id] = None
        if created:
            if header.parent_turn_id is not None:
                self._children.setdefault(header.parent_turn_id, []).append(header.id)
            elif header.conversation_id:
                self._conversations[header.conversation_id] = header.id
