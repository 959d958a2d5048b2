"""The ``AgentTurnStore`` protocol: the single source of truth about turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from runner_core.events import AgentEvent
from runner_core.snapshot import AgentTurnSnapshot, LeaseInfo, awaited_children
from runner_core.status import AgentTurnStatus

LeaseRef = tuple[str, str]
"""(worker id, lease id): the lease a writer holds, as a store names it."""


@dataclass(frozen=True, slots=True)
class Commit:
    """One change of one turn: the only way a stored turn is written (DESIGN.md, one door).

    The store checks, atomically: the stored version is ``expected_version`` (-1 creates);
    the writer holds the stored lease (``lease``) or, writing without one, nobody holds a
    live lease; the history is only appended to. Then it writes the snapshot, creates the
    ``children``, appends ``events`` to the tree's event log numbered from the turn's
    stored counter, records an ended child's result in its waiting parent (waking the
    parent when it was the last one), and with ``release`` gives the lease back. A replay
    of the same ``request_id`` (after a lost reply) answers as the first run did.

    ``renew_seconds``: a lease holder's commit that keeps its lease also extends it, to
    the store's present plus that many seconds, if it has not expired (an expired lease is
    written under as before, by its identity, but never brought back to life). With
    ``release`` the lease is kept and renewed instead when the written turn can run at once
    (READY, RUNNING or cancel requested), else given back: a worker's chain of steps holds
    it across them without a claim. ``unless_cancelled``: the writer has not seen a cancel
    request the store holds, so the store refuses the write with ``CancelRequestedError``
    (a step's work over a cancel is never recorded; the cancel is).
    """

    snapshot: AgentTurnSnapshot
    expected_version: int
    request_id: str
    lease: LeaseRef | None = None
    release: bool = False
    children: tuple[AgentTurnSnapshot, ...] = ()
    events: tuple[AgentEvent, ...] = ()
    #: The writer sends a wake-up for every turn this commit makes runnable (the turn, its
    #: new children, a parent it wakes): the store marks them queued, so the sweeper does
    #: not send another while that one waits in the broker.
    wake: bool = False
    renew_seconds: float | None = None
    unless_cancelled: bool = False


@dataclass(frozen=True, slots=True)
class SaveResult:
    """What a commit stored.

    ``lease_released``: the named lease is not held any more after the write.
    ``first_sequence``: the sequence number given to the commit's first event.
    ``parent_woken``: an ended child was the last one its parent waited on.
    ``lease_until``: when the lease the writer named expires after the write, on the
    store's clock (None: the writer named none, or it was given back). With the cancel flag
    it is what a step would re-read before its next side effect, so a step that follows a
    commit asks the store nothing first.
    """

    version: int
    cancel_requested: bool
    lease_released: bool = False
    first_sequence: int = 0
    parent_woken: bool = False
    lease_until: float | None = None


@dataclass(frozen=True, slots=True)
class Wakeups:
    """What a sweep should wake: due retries and runnable turns whose wake-up was lost."""

    due: list[str]
    lost: list[str]


@dataclass(frozen=True, slots=True)
class TurnListing:
    """One line of a listing (``list_turns``): the fields a store can filter on cheaply."""

    turn_id: str
    status: AgentTurnStatus
    agent_id: str
    root_turn_id: str
    parent_turn_id: str | None
    conversation_id: str | None
    version: int
    created_at: float
    updated_at: float
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What ``request_cancellation`` did; true when it set the flag."""

    requested: bool
    first_sequence: int = 0

    def __bool__(self) -> bool:
        return self.requested


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

    * A commit expecting version ``-1`` creates version 0; expecting ``v`` stores ``v + 1``.
      A mismatch, or creating an id that exists, raises ``ConcurrentModificationError(id,
      expected, actual)``; an unknown id raises ``TurnNotFoundError``. Creating a root turn
      with a ``conversation_id`` raises ``AgentConversationBusyException`` when that
      conversation has a non-terminal turn; check and creation are one atomic operation.
    * Messages are append-only: a save whose stored messages differ raises
      ``HistoryRewrittenError``; only new messages are written.
    * Every write is a ``commit``: a writer without the live lease is refused with
      ``TurnLeasedError`` (saying when it expires), a writer naming a lease that is not the
      stored one with ``LeaseLostError``.
    * Saves never change the lease (the store owns it) and never clear the cancel flag: the
      stored flag is OR-ed with the snapshot's and returned in ``SaveResult``.
    * Committed events are numbered 1, 2, 3, ... per turn by the store and kept in the
      tree's event log (``read_events``), exactly once per commit.
    * A child's terminal commit records ``ChildResult`` in its waiting parent's
      ``child_results``; the parent is claimable once every awaited child has reported.
    * ``claim``/``claim_runnable`` take READY turns, RUNNING turns without a live lease,
      RETRY_SCHEDULED turns that are due, and non-terminal turns with cancellation
      requested; never a turn with a live lease, never a child whose parent holds a live
      lease. A claim writes a fresh random lease id and bumps the version (fencing).
    * ``renew_lease``/``release_lease`` act only if owner and lease id match (renew also
      needs the lease unexpired) and change no version.
    * Times are seconds since the epoch on the store's clock (``now()``).
    * Returned snapshots are copies; changing them changes nothing stored.
    * A quarantined turn (a record that could not be read) is never claimed, queued, woken
      or written again; ``claim``, ``commit`` and ``request_cancellation`` of it raise
      ``SnapshotCorruptedError``.
    """

    def now(self) -> float:
        """The store's clock, in seconds since the epoch."""
        ...

    def commit(self, commit: Commit) -> SaveResult:
        """Write one change of a turn, or refuse it and change nothing (see ``Commit``)."""
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

    def request_cancellation(
        self, turn_id: str, reason: str | None = None, events: Sequence[AgentEvent] = ()
    ) -> CancelResult:
        """Set the cancel flag (and reason) and append ``events``; false if terminal or set.

        Changes no version: the flag is monotonic and every later commit keeps it.
        """
        ...

    def read_events(
        self, root_turn_id: str, limit: int = 10_000, *, newest: bool = False
    ) -> list[AgentEvent]:
        """The committed events of a turn tree, oldest first, numbered.

        ``newest``: the last ``limit`` of them (still oldest first) instead of the first.
        """
        ...

    def mark_queued(self, turn_ids: Sequence[str]) -> None:
        """A wake-up was sent for each turn: trust it for ``requeue_after`` seconds.

        A claim clears the mark. Turns a wake-up cannot serve (blocked, leased, ended)
        are not marked; unknown ids are skipped.
        """
        ...

    def unmark_queued(self, turn_id: str) -> None:
        """The wake-up for this turn was not sent after all (the broker refused it)."""
        ...

    def forget_queued(self, before: float) -> int:
        """Wake-ups marked queued before ``before`` may have been lost: clear those marks.

        Called when a worker's broker connection comes back: a message in flight when it
        broke may be gone. The turns count as runnable from now, so the sweeper re-sends
        those nobody claims within ``lost_wakeup_seconds``. Returns how many were cleared.
        """
        ...

    def wakeups(self, now: float, lost_after: float, limit: int = 1000) -> Wakeups:
        """The sweeper's query (``due_turn_ids`` and ``stale_turn_ids`` at once).

        Costs what is due, not what is live: stores index the time each turn next needs
        attention.
        """
        ...

    def due_turn_ids(self, now: float, limit: int = 1000) -> list[str]:
        """Scheduled retries whose time has come and no queued wake-up covers."""
        ...

    def stale_turn_ids(self, now: float, older_than: float, limit: int = 1000) -> list[str]:
        """Turns runnable for ``older_than`` seconds that nobody serves.

        READY/RUNNING turns, cancel requests and woken parents without a queued wake-up
        (or whose mark ran out ``older_than`` ago), leases that expired ``older_than`` ago
        (a killed worker), retries overdue by as much.
        """
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
        """(child id, parent id) pairs: ended children whose result never reached the parent.

        The child's terminal commit records its result itself, so this finds only records
        written before that was so (the repair scan of older data).
        """
        ...

    def quarantine(self, turn_id: str, reason: str) -> bool:
        """Set a turn aside for good, out of every index; False if it already was.

        ``TurnNotFoundError`` if unknown. Workers call it on a record they cannot read.
        """
        ...

    def quarantined(self, limit: int = 100) -> list[tuple[str, str, float]]:
        """(turn id, reason, when) of quarantined turns, newest first, at most ``limit``."""
        ...

    def report_child(self, child_turn_id: str) -> bool:
        """Record an ended child's result in its waiting parent; True if that woke the parent.

        What a child's terminal commit does, for ``find_terminal_children_with_waiting_parent``;
        a late or duplicate report changes nothing.
        """
        ...


@runtime_checkable
class AsyncTurnStore(Protocol):
    """The asyncio twins of the calls a producer makes (optional; see docs/async.md).

    A store that has them lets ``AgentRunner.astart``, ``asubmit_resume``, ``acancel``
    and ``arestore`` talk to it on the caller's event loop; each method keeps the contract
    of its sync twin on ``AgentTurnStore`` (same checks, same errors, same atomicity).
    A store without them is called from a worker thread instead.
    """

    async def anow(self) -> float:
        """``now()`` without blocking the loop."""
        ...

    async def acommit(self, commit: Commit) -> SaveResult:
        """``commit()`` without blocking the loop."""
        ...

    async def aload(self, turn_id: str) -> AgentTurnSnapshot:
        """``load()`` without blocking the loop."""
        ...

    async def arequest_cancellation(
        self, turn_id: str, reason: str | None = None, events: Sequence[AgentEvent] = ()
    ) -> CancelResult:
        """``request_cancellation()`` without blocking the loop."""
        ...

    async def achildren_of(self, parent_turn_id: str) -> list[str]:
        """``children_of()`` without blocking the loop."""
        ...


def waiting_child_ids(snapshot: AgentTurnSnapshot) -> list[str]:
    """The child ids a WAITING_FOR_CHILD turn waits on (reported or not)."""
    return awaited_children(snapshot)


def is_claimable(snapshot: AgentTurnSnapshot, now: float, parent_lease: LeaseInfo | None) -> bool:
    """The claim rule of the contract, for one stored turn (a woken parent included)."""
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
    if status is AgentTurnStatus.WAITING_FOR_CHILD:
        return snapshot.all_children_reported()
    return status in (AgentTurnStatus.READY, AgentTurnStatus.RUNNING)
