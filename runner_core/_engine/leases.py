"""Leases this process holds: their deadline, renewal and release, and one heartbeat thread.

A worker acts on a turn only inside ``_SAFETY`` of its lease; ``LeaseKeeper`` renews every
held lease from one thread, so no step waits on a renewal.

The backstop: with a step time limit, a lease is never renewed past its step's deadline
plus ``step_grace`` (the calls of a step stop at the deadline; the grace lets the step save
what they answered). At that point the lease is cut short in the store, the step's later
writes are fenced (``HeldLease.check`` here, the lease check of every commit in the
store), and the sweeper wakes the turn for another worker. That covers what the in-call
deadline cannot stop (a hung sync model call, a hung middleware): the stuck thread itself
is not stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from runner_core.errors import LeaseLostError, TurnNotFoundError
from runner_core.snapshot import LeaseInfo
from runner_core.store import AgentTurnStore, SaveResult

log = logging.getLogger("runner_core.worker")

FRESH_SECONDS = 0.1
"""How long a claim's or a commit's reading of the turn stands in for the step-entry check."""

_SAFETY = 0.8
"""Act only within this fraction of the lease, so clock drift never lets two workers act."""

STEP_GRACE_SECONDS = 2.0
"""How long a step may run past its deadline before its lease is cut (see ``step_grace``)."""


def step_grace(step_time_limit: float) -> float:
    """The grace after a step's deadline: ``STEP_GRACE_SECONDS``, or the limit if shorter."""
    return min(STEP_GRACE_SECONDS, step_time_limit)


def _no_deadline() -> float | None:
    return None


class _Cuts:
    """Leases this process cut at the backstop: a count, and who to tell (per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[Callable[[str], None], None] = {}
        self.count = 0

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(turn_id)`` on every cut (once per listener however often added)."""
        with self._lock:
            self._listeners[listener] = None

    def cut(self, turn_id: str) -> None:
        with self._lock:
            self.count += 1
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(turn_id)
            except Exception:
                log.warning("a lease-cut listener failed", exc_info=True)


CUTS = _Cuts()
"""The steps whose lease this process cut because they ran past the step time limit."""


class HeldLease:
    """A lease this process holds on one turn; ``check()`` before every side effect."""

    def __init__(
        self,
        store: AgentTurnStore,
        turn_id: str,
        lease: LeaseInfo,
        seconds: float,
        since: float | None = None,
    ) -> None:
        """``since``: the monotonic time just before the clock reading the claim sent.

        The store dates the lease from that reading, so the lease is counted from it here
        too: a claim that reached the store late holds a lease already partly spent.
        """
        since = time.monotonic() if since is None else since
        self.store = store
        self.turn_id = turn_id
        self.owner = lease.owner
        self.lease_id = lease.lease_id
        self.seconds = seconds
        self.since = since
        self.lost = False
        #: Set by ``runner.step(turn, release=True)``: the step's last save releases.
        self.release_on_last_save = False
        self.released = False
        #: Set by a chain of steps (``time.monotonic()``): until then a step's last save
        #: keeps the lease (renewed) while the turn can run at once, instead of giving it
        #: back (``Commit.renew_seconds``).
        self.keep_until = 0.0
        #: ``time.monotonic()`` just before the last commit was sent (a renewal dates from it).
        self.sent_at = since
        #: Until then the claim's own reading of the turn (cancel flag included) counts as
        #: the step-entry check, which saves a round trip when a step follows its claim.
        self.fresh_until = since + FRESH_SECONDS
        self._deadline = since + seconds * _SAFETY
        #: The running step's deadline (``time.monotonic()``; None: no limit), read by the
        #: keeper's thread; ``grace`` after it the lease is cut (``LeaseKeeper.hold``).
        self.step_deadline: Callable[[], float | None] = _no_deadline
        self.grace = 0.0
        #: Set once the lease was cut because its step ran past the deadline and grace.
        self.overran = False

    def ref(self) -> tuple[str, str]:
        """(worker id, lease id), as a store names a lease."""
        return self.owner, self.lease_id

    def released_by_save(self) -> None:
        """The step's last save gave the lease back: nothing more may be written."""
        self.released = True
        self.lost = True

    def saved(self, result: SaveResult, renewed: bool) -> None:
        """A commit under this lease landed: its reply is the step-entry check for a moment.

        After a renewal asked of the commit, the lease is counted from the expiry the reply
        names, on the store's clock, and never past the commit's send plus a full lease:
        a lease the store did not renew (it had expired) gains nothing here.
        """
        if result.lease_released:
            self.released_by_save()
            return
        now = time.monotonic()
        self.fresh_until = now + FRESH_SECONDS
        if renewed and result.lease_until is not None:
            left = result.lease_until - self.store.now()
            if left > 0:
                ends = min(now + left, self.sent_at + self.seconds)
                # the same margin a claimed lease keeps: act only until its last fifth
                self._deadline = max(self._deadline, ends - self.seconds * (1 - _SAFETY))

    def keeps(self) -> bool:
        """Whether a last save now should keep the lease for the next step of a chain."""
        return time.monotonic() < self.keep_until

    def take_fresh(self) -> bool:
        """True once, if the claim was made moments ago."""
        fresh = time.monotonic() < self.fresh_until
        self.fresh_until = 0.0
        return fresh

    def backstop(self) -> float | None:
        """When the lease stops being renewed (the step's deadline plus grace), if ever."""
        deadline = self.step_deadline()
        return None if deadline is None else deadline + self.grace

    def check(self) -> None:
        """Raise ``LeaseLostError`` if the lease was lost, may have expired, or was cut."""
        now = time.monotonic()
        backstop = self.backstop()
        if self.overran or (backstop is not None and now > backstop):
            raise LeaseLostError(
                self.turn_id,
                f"lease {self.lease_id} of {self.owner!r} was cut: the step ran past its "
                "time limit",
            )
        if self.lost:
            raise LeaseLostError(self.turn_id, f"lease {self.lease_id} of {self.owner!r} was lost")
        if now > self._deadline:
            raise LeaseLostError(self.turn_id, f"lease {self.lease_id} of {self.owner!r} expired")

    def renew(self) -> bool:
        """Extend the lease in the store; a refusal marks it lost for good.

        Never past the backstop: a renewal ends there, and one at or after it cuts the lease.
        """
        if self.lost:
            return False
        started = time.monotonic()
        length = self.seconds
        backstop = self.backstop()
        if backstop is not None:
            length = min(length, backstop - started)
            if length <= 0:
                self.cut()
                return False
        try:
            now = self.store.now()
            ok = self.store.renew_lease(self.turn_id, self.owner, self.lease_id, now, now + length)
        except TurnNotFoundError:
            self.lost = True  # the turn is gone: nothing left to hold
            return False
        except Exception:
            log.warning("renewing lease of turn %s failed", self.turn_id, exc_info=True)
            if time.monotonic() > self._deadline:
                self.lost = True  # expired meanwhile: stop renewing, the step is fenced
            return False
        if ok:
            self._deadline = started + self.seconds * _SAFETY
        else:
            self.lost = True
        return ok

    def cut(self) -> None:
        """The step ran past its deadline and grace: end the lease now, and say so.

        The lease ends in the store (a renewal to the store's present), so the sweeper hands
        the turn to another worker; if the store cannot be reached the lease runs out at the
        end of its last renewal, which ``renew`` never set past the backstop.
        """
        self.lost = self.overran = True
        log.warning(
            "turn %s: its step is still running %g s after the step time limit; its lease %s "
            "is cut and no longer renewed, its writes are fenced, and another worker takes "
            "the turn",
            self.turn_id,
            self.grace,
            self.lease_id,
        )
        try:
            now = self.store.now()
            self.store.renew_lease(self.turn_id, self.owner, self.lease_id, now, now)
        except Exception:
            log.warning("cutting the lease of turn %s failed", self.turn_id, exc_info=True)
        CUTS.cut(self.turn_id)

    def release(self) -> bool:
        """Give the lease back (a no-op if the step's last save already did)."""
        self.lost = True
        if self.released:
            return True
        self.released = True
        return self.store.release_lease(self.turn_id, self.owner, self.lease_id)


class LeaseKeeper:
    """One daemon thread per runner that renews every held lease at a third of its length.

    With ``step_time_limit`` it also wakes at each lease's backstop, to cut it there.
    """

    def __init__(self, step_time_limit: float | None = None) -> None:
        self.step_time_limit = step_time_limit
        self._held: dict[int, tuple[HeldLease, float]] = {}
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # a renewal in flight has ended
        self._renewing: int | None = None
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(
        self, lease: HeldLease, step_deadline: Callable[[], float | None] | None = None
    ) -> None:
        """Start renewing ``lease``; ``step_deadline`` reads the deadline of its running step."""
        at = lease.since + lease.seconds / 3
        limit = self.step_time_limit
        if limit is not None and step_deadline is not None:
            lease.step_deadline, lease.grace = step_deadline, step_grace(limit)
            at = min(at, lease.since + limit + lease.grace)  # the earliest its step can overrun
        with self._lock:
            self._held[id(lease)] = (lease, at)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
                self._thread.start()
        self._wake.set()

    def drop(self, lease: HeldLease) -> None:
        """Stop renewing ``lease``; a renewal of it in flight ends before this returns.

        So a caller that releases the lease and then closes its store has no renewal still
        talking to it (a renewal stuck on an unreachable store is waited on for at most the
        lease's length).
        """
        key = id(lease)
        with self._lock:
            self._held.pop(key, None)
            if threading.current_thread() is not self._thread:
                self._settled.wait_for(lambda: self._renewing != key, timeout=lease.seconds)

    def _loop(self) -> None:
        while True:
            with self._lock:
                due = [
                    (key, lease)
                    for key, (lease, at) in self._held.items()
                    if at <= time.monotonic()
                ]
            for key, lease in due:
                with self._lock:
                    if key not in self._held:
                        continue  # dropped since
                    self._renewing = key
                try:
                    lease.renew()
                finally:
                    with self._lock:
                        self._renewing = None
                        self._settled.notify_all()
                with self._lock:
                    if lease.lost:
                        self._held.pop(key, None)  # lost or released: never renewed again
                    elif key in self._held:
                        self._held[key] = (lease, _next_visit(lease))
            with self._lock:
                next_at = min((at for _, at in self._held.values()), default=None)
            self._wake.clear()
            self._wake.wait(None if next_at is None else max(0.0, next_at - time.monotonic()))


def _next_visit(lease: HeldLease) -> float:
    """The next renewal, or the backstop if that comes first."""
    at = time.monotonic() + lease.seconds / 3
    backstop = lease.backstop()
    return at if backstop is None else min(at, backstop)
