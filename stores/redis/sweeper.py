"""The sweeper's side of the Redis store: wake-up marks, the due index, quarantine, sweeps.

The due index (``Keyspace.due_shard``) holds, per tag, a lower bound of the earliest score
of its runnable partition: every write lowers it right after its script (``lower_due``),
and a sweep raises it once it has looked (``Scanner.collect``). A sweep therefore costs
what is due, not what is live.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from redis import Redis

from runner_core.errors import SnapshotCorruptedError, TurnNotFoundError
from runner_core.status import AgentTurnStatus
from runner_core.store import Commit, Wakeups
from stores.redis.cache import Known, TagIndex
from stores.redis.clock import ServerClock
from stores.redis.codec import Arg, text
from stores.redis.keys import Keyspace
from stores.redis.options import Tuning
from stores.redis.scanner import Candidate, Scanner
from stores.redis.scripts import Scripts, code_of

log = logging.getLogger("stores.redis")


def lower_due(keys: Keyspace, tag: str, score: float) -> tuple[str, ...]:
    """The command lowering ``tag``'s due-index score; sent right after a script."""
    return ("ZADD", keys.due_shard(tag), "LT", repr(float(score)), tag)


class Sweeper:
    """Wake-up marks, the due index, quarantine and the sweeper's queries of one namespace."""

    def __init__(
        self,
        redis: Redis,
        keys: Keyspace,
        scripts: Scripts,
        scanner: Scanner,
        tags: TagIndex,
        clock: ServerClock,
        tuning: Tuning,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.scripts = scripts
        self.scanner = scanner
        self.tags = tags
        self.clock = clock
        self.tuning = tuning
        #: How often (seconds) a sweep puts every tag in the due index again.
        self.backfill_seconds = 600.0
        self.backfilled_at = -1e18

    def touch(self, tag: str, score: float) -> tuple[str, ...]:
        """The command lowering ``tag``'s due-index score to ``score``."""
        return lower_due(self.keys, tag, score)

    def run_touching(self, name: str, keys: list[str], args: Sequence[Arg], tag: str) -> Any:
        """One script call followed by a due-index touch at now, in one round trip."""
        call = (self.scripts[name], keys, args)
        return self.scripts.pipelined([call], (), [self.touch(tag, self.clock.now())])[0]

    def mark(self, turn_ids: Sequence[str], seconds: str) -> None:
        """Mark each turn's wake-up queued for ``seconds`` (or clear the mark: '')."""
        calls = []
        touches = []
        for turn_id in turn_ids:
            try:
                tag = self.tags.tag_of(turn_id)
            except TurnNotFoundError:
                continue
            keys = [self.keys.runnable(tag), self.keys.header(tag, turn_id)]
            calls.append((self.scripts["queue"], keys, [turn_id, seconds]))
            if not seconds:  # unmarked: runnable from now on
                touches.append(self.touch(tag, self.clock.now()))
        if calls:
            self.scripts.pipelined(calls, (), touches)

    def forget(self, before: float) -> int:
        """Clear the queued marks set before ``before``; how many were cleared.

        Visits only the tags whose due-index score says they may hold such a mark (a marked
        turn scores its mark's end, which is at most ``before + requeue_after``).
        """
        cutoff = repr(float(before) + float(self.tuning.requeue_after))
        tags = [tag for _, tag, _ in self.scanner.due_tags(float(cutoff), 1_000_000)]
        forget = self.scripts["forget"]
        cleared = 0
        for batch in range(0, len(tags), 200):
            chunk = tags[batch : batch + 200]
            calls = [
                (forget, [self.keys.runnable(t)], [self.keys.header(t, ""), cutoff]) for t in chunk
            ]
            touches = [self.touch(t, self.clock.now()) for t in chunk]
            replies = self.scripts.pipelined(calls, (), touches)
            cleared += sum(int(n) for n in replies[: len(calls)])
        return cleared

    def wakeups(self, now: float, lost_after: float, limit: int) -> Wakeups:
        """Due retries and lost wake-ups, visiting only the tags the due index says are due.

        See ``Scanner.collect``. Every ``backfill_seconds`` all tags are put in the index
        again (older data, a safety net).
        """
        if time.monotonic() - self.backfilled_at > self.backfill_seconds:
            self.scanner.backfill()
            self.backfilled_at = time.monotonic()
        found = self.scanner.collect(now, limit, limit)
        found, states = self.present(found, self.scanner.statuses(found))
        bound = now - lost_after
        stale = [turn_id for score, _, turn_id in found if score <= bound]
        return Wakeups(self.retries(found, states)[:limit], stale[:limit])

    def due_retries(self, now: float, limit: int) -> list[str]:
        """Scheduled retries whose time has come and no queued wake-up covers."""
        candidates = self.scanner.runnable(now, max(limit, 100), False, 4 * limit)
        return self.retries(candidates, self.scanner.statuses(candidates))[:limit]

    def retries(
        self, candidates: Sequence[Candidate], states: Sequence[tuple[str, str]]
    ) -> list[str]:
        """The candidates that are scheduled retries (not cancel requests)."""
        return [
            turn_id
            for (_, _, turn_id), (st, cx) in zip(candidates, states, strict=True)
            if st == AgentTurnStatus.RETRY_SCHEDULED.value and cx != "1"
        ]

    def present(
        self, candidates: Sequence[Candidate], states: Sequence[tuple[str, str]]
    ) -> tuple[list[Candidate], list[tuple[str, str]]]:
        """The candidates whose record exists; index entries of vanished ones are dropped.

        An entry without its record (deleted behind the index) would be woken on every
        sweep, since nothing can claim or mark it: it is removed, if its score is still
        the one read. A record whose status cannot be read stays (its claim quarantines it).
        """
        unread = [i for i, (st, _) in enumerate(states) if not st]
        if not unread:
            return list(candidates), list(states)
        pipe = self.redis.pipeline(transaction=False)
        for i in unread:
            _, tag, turn_id = candidates[i]
            pipe.exists(self.keys.header(tag, turn_id))
        gone = {i for i, exists in zip(unread, pipe.execute(), strict=True) if not exists}
        drop = self.scripts["zrem_if"]
        calls = []
        for i in sorted(gone):
            score, tag, turn_id = candidates[i]
            calls.append((drop, [self.keys.runnable(tag)], [turn_id, repr(float(score))]))
            log.warning("turn %s: in the runnable index without a record; dropped", turn_id)
        if calls:
            self.scripts.pipelined(calls)
        kept = [i for i in range(len(candidates)) if i not in gone]
        return [candidates[i] for i in kept], [states[i] for i in kept]

    def quarantine(self, tag: str, turn_id: str, reason: str) -> bool:
        """Move a turn out of every index, with the reason; False if it already was."""
        k = self.keys
        keys = [
            k.header(tag, turn_id),
            k.runnable(tag),
            k.live(tag),
            k.leases(tag),
            k.quarantine(tag),
            k.waits(tag),
        ]
        reply = self.scripts.run("quarantine", keys, [turn_id, reason])
        moved = code_of(reply) == "OK"
        if moved:
            log.error("turn %s quarantined (never claimed or woken again): %s", turn_id, reason)
        return moved

    def set_aside(self, tag: str, turn_id: str, reason: str) -> None:
        """Quarantine a turn found spoiled, and drop the messages this process cached."""
        self.tags.cache.put(turn_id, Known(tag))
        self.quarantine(tag, turn_id, reason)

    def corrupt_commit(self, commit: Commit, exc: SnapshotCorruptedError) -> None:
        """A commit found a stored record spoiled: quarantine it (never a creation's turn)."""
        turn_id = exc.turn_id or commit.snapshot.id
        if commit.expected_version != -1 or turn_id != commit.snapshot.id:
            self.set_aside(self.tags.tag_of(turn_id), turn_id, str(exc))

    def quarantined(self, limit: int) -> list[tuple[str, str, float]]:
        """(turn id, reason, when) of quarantined turns, newest first."""
        found: list[tuple[str, str, float]] = []
        for tag in self.scanner.retained_tags():
            key = self.keys.quarantine(tag)
            entries: list[Any] = self.redis.zrange(key, 0, -1, withscores=True)
            for raw, when in entries:
                turn_id = text(raw)
                reason = self.redis.hget(self.keys.header(tag, turn_id), "qr")
                found.append((turn_id, text(reason) if reason else "", float(when)))
        return sorted(found, key=lambda f: -f[2])[:limit]
