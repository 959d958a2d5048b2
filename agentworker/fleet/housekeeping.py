"""Housekeeping of the Redis store: retention of ended turns, pruning of the partition sets.

Beat sends ``agentworker.housekeeping`` every ``housekeeping_interval`` seconds to the
sweep queue. One run moves tags of the single partition sets of earlier releases into
their buckets, deletes turns that ended more than ``retention_seconds`` ago (never one a
waiting parent still references, nor one with a live child), then forgets tags with
nothing left in them, so scans that walk every tag (the repair scan, the due-index
backfill, listings) cost what is stored, not everything that ever was.

Deletions stop after ``budget_seconds`` (the next run goes on), so a run holds a sweep
worker for seconds, not minutes. Safe to run concurrently (two workers, or a run that
overlaps the next): every deletion is a script that checks its turn first, and every
removal from a partition set is a compare-and-delete on the score it read.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from runner_core.errors import InvalidArgumentError
from runner_core.store import arguments as check

log = logging.getLogger("agentworker.housekeeping")

#: Tags are pruned once no turn was created in them for this long (seconds).
PRUNE_GRACE_SECONDS = 3600.0


class Housekept(Protocol):
    """What housekeeping needs of a store (``RedisAgentTurnStore`` has it)."""

    def migrate_partitions(self) -> int:
        """Move tags of the single partition sets into their buckets."""

    def expire_terminal(
        self,
        older_than_seconds: float | None = None,
        limit: int = 1000,
        *,
        skip: dict[str, int] | None = None,
    ) -> int:
        """Delete turns that ended ``older_than_seconds`` ago; how many.

        ``skip``: the run's refused candidates per tag, stepped over and updated.
        """

    def prune_partitions(self, grace_seconds: float = 3600.0) -> int:
        """Forget tags with nothing left; how many entries were removed."""


@dataclass(frozen=True)
class HousekeepingReport:
    """What one run did."""

    migrated: int
    expired: int
    pruned: int


def housekeep(
    store: Housekept,
    retention_seconds: float,
    *,
    grace_seconds: float = PRUNE_GRACE_SECONDS,
    batch: int = 1000,
    budget_seconds: float = 10.0,
) -> HousekeepingReport:
    """One run: migrate, expire in batches until none finds anything (or the budget), prune.

    ``retention_seconds`` 0 keeps every turn (the partition sets are still pruned of tags
    whose turns are gone). A bad argument is an ``InvalidArgumentError`` naming it, before
    anything is read.
    """
    check.times(
        retention_seconds=retention_seconds,
        grace_seconds=grace_seconds,
        budget_seconds=budget_seconds,
    )
    for name, value in (
        ("retention_seconds", retention_seconds),
        ("budget_seconds", budget_seconds),
    ):
        if value < 0:
            raise InvalidArgumentError(f"{name} is {value}; it must be 0 or more", field=name)
    check.count(batch, "batch")
    if batch == 0:
        raise InvalidArgumentError("batch is 0; a run deletes 1 or more at a time", field="batch")
    migrated = store.migrate_partitions()
    expired = 0
    if retention_seconds > 0:
        deadline = time.monotonic() + budget_seconds
        refused: dict[str, int] = {}  # stepped over in later batches: never a stall
        while True:
            before = sum(refused.values())
            done = store.expire_terminal(retention_seconds, limit=batch, skip=refused)
            expired += done
            # a short batch may only mean another run took some of it: stop once a batch
            # neither deleted nor refused anything (nothing left to look at)
            looked = done or sum(refused.values()) > before
            if not looked or time.monotonic() > deadline:
                break
    pruned = store.prune_partitions(grace_seconds)
    report = HousekeepingReport(migrated, expired, pruned)
    if migrated or expired or pruned:
        log.info("housekeeping: %s", report)
    return report
