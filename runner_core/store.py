"""The ``AgentTurnStore`` protocol: the single source of truth about turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from runner_core.snapshot import AgentTurnSnapshot, LeaseInfo
from runner_core.status import AgentTurnStatus


@dataclass(frozen=True, slots=True)
class SaveResult:
    """What a save stored: new version, merged cancel flag, and the lease given back.

    ``lease_released`` is True when a save named a lease in ``release`` and that lease is
    not held any more after the write.
    """

    version: int
    cancel_requested: bool
    lease_released: bool = False


LeaseRef = tuple[str, str]
"""(worker id, lease id) of a lease a save gives back in the same atomic write."""


@dataclass(frozen=True, slots=True)
class TurnControl:
    """The small part of a stored turn a runner re-reads before side effects."""

    version: int
    status: AgentTurnStatus
    cancel_requested: bool
    lease: LeaseInfo | None
    #: The store's clock when this was read (seconds since the epoch).
    now: float

    @property
    def live_lease(self) -> LeaseInfo | None:
        """The lease if it has not expired."""
        return self.lease if self.lease is not None and self.lease.until > self.now else None


class AgentTurnStore(Protocol):
    """Stores turns with compare-and-set versions, leases and a monotonic cancel flag.

    Contract (every implementation passes the same suite):

    * ``save(s, -1)`` creates version 0; ``save(s, v)`` stores ``v + 1``. A mismatch, or
      creating an id that exists, raises ``ConcurrentModificationError(id, expected,
      actual)``; an unknown id raises ``TurnNotFoundError``. Creating a root turn with a
      ``conversation_id`` raises ``AgentConversationBusyException`` when that conversation
      has a non-terminal turn; check and creation are one atomic operation.
    * Messages are append-only: a save whose stored messages differ raises
      ``HistoryRewrittenError``; only new messages are written.
    * Saves never change the lease (the store owns it) and never clear the cancel flag: the
      stored flag is OR-ed with the snapshot's and returned in ``SaveResult``.
    * ``claim``/``claim_runnable`` take READY turns, RUNNING turns without a live lease,
      RETRY_SCHEDULED turns that are due, and non-terminal turns with cancellation
      requested; never a turn with a live lease, never a child whose parent holds a live
      lease. A claim writes a fresh random lease id and bumps the version (fencing).
    * ``renew_lease``/``release_lease`` act only if owner and lease id match (renew also
      needs the lease unexpired) and change no version.
    * Times are seconds since the epoch on the store's clock (``now()``).
    * Returned snapshots are copies; changing them changes nothing stored.
    """

    def now(self) -> float:
        """The store's clock, in seconds since the epoch."""
        ...

    def save(
        self, snapshot: AgentTurnSnapshot, expected_version: int, release: LeaseRef | None = None
    ) -> SaveResult:
        """Create (``expected_version=-1``) or update a turn, compare-and-set on version.

        With ``release``, the same write drops the lease if that worker and lease id hold
        it (a worker's last save of a step: save and release in one round trip).
        """
        ...

    def save_parent_and_children(
        self,
        parent: AgentTurnSnapshot,
        expected_parent_version: int,
        children: Sequence[AgentTurnSnapshot],
        release: LeaseRef | None = None,
    ) -> SaveResult:
        """Update the parent and create its children in one atomic write (see ``save``)."""
        ...

    def load(self, turn_id: str) -> AgentTurnSnapshot:
        """A copy of the stored turn; ``TurnNotFoundError`` if unknown."""
        ...

    def peek(self, turn_id: str) -> TurnControl:
        """Version, status, cancel flag, lease and the store's clock, in one read."""
        ...

    def find_active_turn(self, conversation_id: str) -> tuple[str, AgentTurnStatus] | None:
        """The non-terminal root turn of a conversation, with its status, if any."""
        ...

    def request_cancellation(self, turn_id: str, reason: str | None = None) -> bool:
        """Set the cancel flag (and reason); False if terminal or the flag was already set."""
        ...

    def claim(
        self, turn_id: str, worker_id: str, now: float, lease_ms: int
    ) -> AgentTurnSnapshot | None:
        """Lease one turn if it is claimable; None otherwise."""
        ...

    def claim_runnable(
        self, worker_id: str, now: float, lease_ms: int, limit: int
    ) -> list[AgentTurnSnapshot]:
        """Lease up to ``limit`` claimable turns."""
        ...

    def renew_lease(
        self, turn_id: str, worker_id: str, lease_id: str, now: float, until: float
    ) -> bool:
        """Extend a live lease held by this worker and lease id."""
        ...

    def release_lease(self, turn_id: str, worker_id: str, lease_id: str) -> bool:
        """Drop the lease held by this worker and lease id."""
        ...

    def children_of(self, parent_turn_id: str) -> list[str]:
        """Ids of the direct children of a turn, oldest first."""
        ...

    def find_terminal_children_with_waiting_parent(self, limit: int) -> list[tuple[str, str]]:
        """(child id, parent id) pairs: ended children whose parent still waits on them."""
        ...


def waiting_child_ids(snapshot: AgentTurnSnapshot) -> list[str]:
    """The child ids a WAITING_FOR_CHILD turn waits on."""
    s = snapshot.suspension
    if snapshot.status is not AgentTurnStatus.WAITING_FOR_CHILD or s is None:
        return []
    ids = s.metadata.get("child_turn_ids")
    if isinstance(ids, list):
        return [str(i) for i in ids]
    return [s.correlation_id] if s.correlation_id else []


def is_claimable(snapshot: AgentTurnSnapshot, now: float, parent_lease: LeaseInfo | None) -> bool:
    """The claim rule of the contract, for one stored turn."""
    status = snapshot.status
    if status.is_terminal:
        return False
    if snapshot.lease is not None and snapshot.lease.until > now:
        return False
    if parent_lease is not None and parent_lease.until > now:
        return False
    if snapshot.cancel_requested:
        return True
    if status is AgentTurnStatus.RETRY_SCHEDULED:
        return snapshot.next_runnable_at is None or snapshot.next_runnable_at <= now
    return status in (AgentTurnStatus.READY, AgentTurnStatus.RUNNING)
