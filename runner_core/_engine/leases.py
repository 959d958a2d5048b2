"""Leases this process holds: their deadline, renewal and release, and one heartbeat thread.

A worker acts on a turn only inside ``_SAFETY`` of its lease; ``LeaseKeeper`` renews every
held lease from one thread, so no step waits on a renewal.
"""

from __future__ import annotations

import logging
import threading
import time

from runner_core.errors import LeaseLostError, TurnNotFoundError
from runner_core.snapshot import LeaseInfo
from runner_core.store import AgentTurnStore

log = logging.getLogger("runner_core.worker")

FRESH_SECONDS = 0.1
"""How long a claim's reading of the turn stands in for the step-entry check."""

_SAFETY = 0.8
"""Act only within this fraction of the lease, so clock drift never lets two workers act."""


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
        #: Until then the claim's own reading of the turn (cancel flag included) counts as
        #: the step-entry check, which saves a round trip when a step follows its claim.
        self.fresh_until = since + FRESH_SECONDS
        self._deadline = since + seconds * _SAFETY

    def ref(self) -> tuple[str, str]:
        """(worker id, lease id), as a store names a lease."""
        return self.owner, self.lease_id

    def released_by_save(self) -> None:
        """The step's last save gave the lease back: nothing more may be written."""
        self.released = True
        self.lost = True

    def take_fresh(self) -> bool:
        """True once, if the claim was made moments ago."""
        fresh = time.monotonic() < self.fresh_until
        self.fresh_until = 0.0
        return fresh

    def check(self) -> None:
        """Raise ``LeaseLostError`` if the lease was lost or may have expired."""
        if self.lost:
            raise LeaseLostError(self.turn_id, f"lease {self.lease_id} of {self.owner!r} was lost")
        if time.monotonic() > self._deadline:
            raise LeaseLostError(self.turn_id, f"lease {self.lease_id} of {self.owner!r} expired")

    def renew(self) -> bool:
        """Extend the lease in the store; a refusal marks it lost for good."""
        if self.lost:
            return False
        started = time.monotonic()
        try:
            now = self.store.now()
            ok = self.store.renew_lease(
                self.turn_id, self.owner, self.lease_id, now, now + self.seconds
            )
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

    def release(self) -> bool:
        """Give the lease back (a no-op if the step's last save already did)."""
        self.lost = True
        if self.released:
            return True
        self.released = True
        return self.store.release_lease(self.turn_id, self.owner, self.lease_id)


class LeaseKeeper:
    """One daemon thread per runner that renews every held lease at a third of its length."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[HeldLease, float]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, lease: HeldLease) -> None:
        """Start renewing ``lease``."""
        with self._lock:
            self._held[id(lease)] = (lease, lease.since + lease.seconds / 3)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
                self._thread.start()
        self._wake.set()

    def drop(self, lease: HeldLease) -> None:
        """Stop renewing ``lease``."""
        with self._lock:
            self._held.pop(id(lease), None)

    def _loop(self) -> None:
        while True:
            with self._lock:
                due = [
                    (key, lease)
                    for key, (lease, at) in self._held.items()
                    if at <= time.monotonic()
                ]
            for key, lease in due:
                lease.renew()
                with self._lock:
                    if lease.lost:
                        self._held.pop(key, None)  # lost or released: never renewed again
                    elif key in self._held:
                        self._held[key] = (lease, time.monotonic() + lease.seconds / 3)
            with self._lock:
                next_at = min((at for _, at in self._held.values()), default=None)
            self._wake.clear()
            self._wake.wait(None if next_at is None else max(0.0, next_at - time.monotonic()))
