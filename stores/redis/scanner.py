"""Walks over the partitions of the indexes: runnable turns, repair, listings, retention.

Scans read the global ``partitions``/``retained`` sets (every bucket, and the single key
of earlier releases, in one round trip), then ask each tag in pipelined batches (one round
trip per batch). They are for the sweeper, pollers and operators, not the per-step path;
their cost grows with the number of live (resp. retained) turn trees, which is why
``prune`` and ``expire`` run on a schedule (``agentworker.housekeeping``).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis

from runner_core.status import AgentTurnStatus
from stores.redis.codec import SUMMARY_FIELDS, TurnSummary, text
from stores.redis.keys import MAX_PARTITION_BUCKETS, Keyspace
from stores.redis.scripts import Scripts, code_of

BATCH = 200
"""Tags asked per pipeline."""

CLOCK_SLACK = 5.0
"""How far apart the clocks of the processes that create turns may be, in seconds: a
listing reads tags whose last creation is up to this much older than what it found."""

HOLD = 30.0
"""Seconds a tag being read is out of the due index's reach (see ``Scanner.collect``)."""

Candidate = tuple[float, str, str]  # (runnable since, tag, turn id)


def _position(summary: TurnSummary) -> tuple[float, str]:
    """Where a turn stands in a listing (newest first is this, descending)."""
    return (summary.created_at, summary.turn_id)


@dataclass(frozen=True, slots=True)
class _Newest:
    """A heap entry: the newest turn is the smallest."""

    summary: TurnSummary

    def __lt__(self, other: _Newest) -> bool:
        return _position(self.summary) > _position(other.summary)


def _chunks(items: Sequence[Any], size: int = BATCH) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Scanner:
    """Index scans over every partition of one namespace."""

    def __init__(self, redis: Redis, keys: Keyspace, scripts: Scripts) -> None:
        self.redis = redis
        self.keys = keys
        self.scripts = scripts

    def tags(self, keys: Sequence[str]) -> list[str]:
        """Members of a bucketed global set (its buckets and legacy key), oldest first."""
        return [tag for tag, _ in self.scored_tags(keys)]

    def scored_tags(self, keys: Sequence[str]) -> list[tuple[str, float]]:
        """(tag, its last turn creation) of a bucketed global set, oldest first."""
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            pipe.zrange(key, 0, -1, withscores=True)
        scores: dict[str, float] = {}
        for entries in pipe.execute():
            for raw, score in entries:
                tag = text(raw)
                scores[tag] = max(float(score), scores.get(tag, float(score)))
        return sorted(scores.items(), key=lambda entry: entry[1])

    def partition_tags(self) -> list[str]:
        """Tags that may hold live turns."""
        return self.tags(self.keys.all_partitions())

    def retained_tags(self) -> list[str]:
        """Tags with any stored turn."""
        return self.tags(self.keys.all_retained())

    def runnable(
        self, bound: float, per_tag: int, server_clock: bool, most: int
    ) -> list[Candidate]:
        """Up to ``most`` entries of the runnable index with score <= bound, oldest first.

        Only the tags the due index says may hold such entries are asked (see ``collect``).
        """
        if server_clock:
            seconds, micros = self.redis.time()
            bound = max(bound, int(seconds) + int(micros) / 1e6)
        return heapq.nsmallest(most, self.collect(bound, per_tag, most))

    def collect(self, bound: float, per_tag: int, most_tags: int) -> list[Candidate]:
        """Entries <= bound of the tags the due index says are due, oldest first.

        Every visited tag's due-index score is then raised to its earliest entry, by
        compare-and-set after holding the tag out of reach (``HOLD`` seconds) while it is
        read: a write meanwhile (it lowers the score after its script) always wins, and
        tags with nothing due any more never crowd out those that are.
        """
        due_tags = self.due_tags(bound, most_tags)
        if not due_tags:
            return []
        hold = repr(max(bound, time.time()) + HOLD)
        self.settle([(shard, tag, repr(score), hold) for shard, tag, score in due_tags])
        visited = self.visit([tag for _, tag, _ in due_tags], bound, per_tag)
        self.settle(
            [(shard, tag, hold, visited[tag][0]) for shard, tag, _ in due_tags if tag in visited]
        )
        return sorted(c for _, entries in visited.values() for c in entries)

    def due_tags(self, bound: float, most: int) -> list[tuple[str, str, float]]:
        """(shard, tag, score) of the tags whose due-index score is <= bound."""
        pipe = self.redis.pipeline(transaction=False)
        for shard in self.keys.due_shards:
            pipe.zrangebyscore(shard, "-inf", repr(float(bound)), 0, most, withscores=True)
        found: list[tuple[str, str, float]] = []
        for shard, entries in zip(self.keys.due_shards, pipe.execute(), strict=True):
            found.extend((shard, text(tag), float(score)) for tag, score in entries)
        return found

    def visit(
        self, tags: Sequence[str], bound: float, per_tag: int
    ) -> dict[str, tuple[str, list[Candidate]]]:
        """Per tag: its earliest runnable score ('' if none) and its entries <= bound."""
        visit = self.scripts["visit"]
        args = [repr(float(bound)), str(per_tag)]
        out: dict[str, tuple[str, list[Candidate]]] = {}
        for batch in _chunks(tags):
            calls = [(visit, [self.keys.runnable(tag)], args) for tag in batch]
            for tag, reply in zip(batch, self.scripts.pipelined(calls), strict=True):
                entries = [
                    (float(reply[i + 1]), tag, text(reply[i])) for i in range(1, len(reply), 2)
                ]
                out[tag] = (text(reply[0]), entries)
        return out

    def settle(self, scores: Sequence[tuple[str, str, str, str]]) -> None:
        """Compare-and-set due-index scores: (shard, tag, score seen, new score or '')."""
        by_shard: dict[str, list[str]] = {}
        for shard, tag, seen, new in scores:
            by_shard.setdefault(shard, []).extend([tag, seen, new])
        calls = [(self.scripts["zcas"], [shard], args) for shard, args in by_shard.items()]
        for batch in _chunks(calls, 50):
            self.scripts.pipelined(batch)

    def backfill(self) -> int:
        """Put every tag with runnable entries into the due index (older data, a safety net)."""
        tags = self.partition_tags()
        visited = self.visit(tags, float("-inf"), 0)
        touches = [
            ("ZADD", self.keys.due_shard(tag), "LT", earliest, tag)
            for tag, (earliest, _) in visited.items()
            if earliest
        ]
        for batch in _chunks(touches, 500):
            pipe = self.redis.pipeline(transaction=False)
            for command in batch:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            pipe.execute()
        return len(touches)

    def statuses(self, candidates: Sequence[Candidate]) -> list[tuple[str, str]]:
        """(status, cancel flag) of each candidate, '' for a vanished one."""
        pipe = self.redis.pipeline(transaction=False)
        for _, tag, turn_id in candidates:
            pipe.hmget(self.keys.header(tag, turn_id), "st", "cx")
        return [(text(st), text(cx)) for st, cx in pipe.execute()]

    def repair(self, limit: int) -> list[tuple[str, str]]:
        """(child, parent) pairs: ended children whose parent still waits on them."""
        found: list[tuple[str, str]] = []
        repair = self.scripts["repair"]
        for batch in _chunks(self.partition_tags()):
            calls = [
                (repair, [self.keys.waits(tag), self.keys.ended(tag)], [str(limit)])
                for tag in batch
            ]
            for reply in self.scripts.pipelined(calls):
                found.extend((text(reply[i]), text(reply[i + 1])) for i in range(0, len(reply), 2))
            if len(found) >= limit:
                break
        return found[:limit]

    def newest_tags(self, keys: Sequence[str], page: int = 1000) -> Iterator[tuple[str, float]]:
        """(tag, its last turn creation) of a bucketed global set, newest first, read lazily.

        The first ``page`` entries of every bucket come in one round trip, each further page
        of a bucket in one more, when the walk gets there.
        """
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            pipe.zrevrange(key, 0, page - 1, withscores=True)
        firsts = pipe.execute()

        def bucket(key: str, entries: list[Any]) -> Iterator[tuple[str, float]]:
            offset = 0
            while entries:
                yield from ((text(raw), float(score)) for raw, score in entries)
                if len(entries) < page:
                    return
                offset += page
                entries = self.redis.zrevrange(key, offset, offset + page - 1, withscores=True)

        buckets = [bucket(k, first) for k, first in zip(keys, firsts, strict=True)]
        seen: set[str] = set()
        for tag, score in heapq.merge(*buckets, key=lambda entry: entry[1], reverse=True):
            if tag not in seen:  # in a bucket and the legacy key: its newest score came first
                seen.add(tag)
                yield tag, score

    def newest_turns(
        self,
        tags: Iterator[tuple[str, float]],
        status: AgentTurnStatus | None,
        root: str | None,
        before: tuple[float, str] | None = None,
    ) -> Iterator[TurnSummary]:
        """The turns of ``tags``, filtered, newest first, read as far as they are taken.

        ``tags``: (tag, when its newest turn was created), newest first. A turn found is
        given out once no tag left can hold a newer one: once it is newer than the next
        tag's score (plus ``CLOCK_SLACK`` for the clocks of the processes that created
        them). Newest first is by (created at, turn id); ``before`` keeps only the turns
        older than that position.
        """
        found: list[_Newest] = []
        while batch := list(itertools.islice(tags, BATCH)):
            bound = batch[0][1] + CLOCK_SLACK
            while found and found[0].summary.created_at > bound:
                yield heapq.heappop(found).summary
            for summary in self._summaries([tag for tag, _ in batch], status):
                if before is not None and _position(summary) >= before:
                    continue
                if root is None or summary.root_turn_id == root:
                    heapq.heappush(found, _Newest(summary))
        while found:
            yield heapq.heappop(found).summary

    def _summaries(
        self, tags: Sequence[str], status: AgentTurnStatus | None
    ) -> Iterator[TurnSummary]:
        ids = self._ids(tags, status)
        pipe = self.redis.pipeline(transaction=False)
        for tag, turn_id in ids:
            pipe.hmget(self.keys.header(tag, turn_id), *SUMMARY_FIELDS)
        for (_, turn_id), values in zip(ids, pipe.execute(), strict=True):
            summary = TurnSummary.of(turn_id, values)
            if summary is not None and (status is None or summary.status is status):
                yield summary

    def _ids(self, tags: Sequence[str], status: AgentTurnStatus | None) -> list[tuple[str, str]]:
        sets = []
        if status is None or not status.is_terminal:
            sets.append(self.keys.live)
        if status is None or status.is_terminal:
            sets.append(self.keys.ended)
        pipe = self.redis.pipeline(transaction=False)
        pairs = [(tag, which) for tag in tags for which in sets]
        for tag, which in pairs:
            pipe.zrange(which(tag), 0, -1)
        return [
            (tag, text(turn_id))
            for (tag, _), ids in zip(pairs, pipe.execute(), strict=True)
            for turn_id in ids
        ]

    def expirable(
        self, cutoff: float, limit: int, skip: Mapping[str, int] | None = None
    ) -> list[tuple[str, str, str]]:
        """(tag, turn id, parent id) of turns that ended before ``cutoff``.

        ``skip``: per tag, how many of its oldest candidates to step over (ones refused
        earlier in the same run).
        """
        skip = skip or {}
        found: list[tuple[str, str]] = []
        for batch in _chunks(self.retained_tags()):
            pipe = self.redis.pipeline(transaction=False)
            for tag in batch:
                pipe.zrangebyscore(
                    self.keys.ended(tag), "-inf", cutoff, start=skip.get(tag, 0), num=limit
                )
            for tag, ids in zip(batch, pipe.execute(), strict=True):
                found.extend((tag, text(i)) for i in ids)
            if len(found) >= limit:
                break
        found = found[:limit]
        pipe = self.redis.pipeline(transaction=False)
        for tag, turn_id in found:
            pipe.hget(self.keys.header(tag, turn_id), "par")
        return [(t, i, text(p)) for (t, i), p in zip(found, pipe.execute(), strict=True)]

    def expire(self, turns: Sequence[tuple[str, str, str]]) -> tuple[list[str], set[str]]:
        """Run expire.lua on each turn: the ids deleted (index keys too) and those refused.

        A turn another run deleted first is neither: it left the indexes, so a later batch
        must not step over a candidate on its account.
        """
        k, expire = self.keys, self.scripts["expire"]
        calls = [
            (
                expire,
                [
                    k.header(tag, turn_id),
                    k.messages(tag, turn_id),
                    k.children(tag, turn_id),
                    k.ended(tag),
                    k.waits(tag),
                    k.live(tag),
                    k.leases(tag),
                    k.children(tag, parent or turn_id),
                ],
                [turn_id, parent],
            )
            for tag, turn_id, parent in turns
        ]
        done: list[str] = []
        refused: set[str] = set()
        for batch in _chunks(calls):
            replies = self.scripts.pipelined(batch)
            for call, reply in zip(batch, replies, strict=True):
                code = code_of(reply)
                if code == "OK":
                    done.append(call[2][0])
                elif code != "NOT_FOUND":
                    refused.add(call[2][0])
        for batch in _chunks(done, 500):
            self.redis.delete(*(k.turn_index(turn_id) for turn_id in batch))
        return done, refused

    def prune(self, grace_seconds: float) -> int:
        """Drop tags with nothing left from the partition sets (not touched for a grace).

        Each removal is a compare-and-delete on the score read (``zrem_if.lua``): a root
        created meanwhile rewrites the score and keeps its tag. Safe to run concurrently.
        """
        cutoff = time.time() - grace_seconds
        removed = 0
        k = self.keys
        for keys, sets, watched in (
            (k.all_partitions(), (k.live,), True),  # the sweeper's scans walk these
            (k.all_retained(), (k.live, k.ended), False),
        ):
            pipe = self.redis.pipeline(transaction=False)
            for key in keys:
                pipe.zrangebyscore(key, "-inf", cutoff, withscores=True)
            entries = [
                (key, text(tag), float(score))
                for key, found in zip(keys, pipe.execute(), strict=True)
                for tag, score in found
            ]
            for batch in _chunks(entries):
                pipe = self.redis.pipeline(transaction=False)
                for _, tag, _ in batch:
                    for which in sets:
                        pipe.zcard(which(tag))
                counts = pipe.execute()
                width = len(sets)
                calls = [
                    (self.scripts["zrem_if"], [key], [tag, repr(score)])
                    for n, (key, tag, score) in enumerate(batch)
                    if not any(counts[n * width : (n + 1) * width])
                ]
                replies = self.scripts.pipelined(calls)
                removed += sum(int(r) for r in replies)
                if watched:  # nothing live: nothing the sweeper needs
                    gone = [c[2][0] for c, r in zip(calls, replies, strict=True) if int(r)]
                    self._forget_due(gone)
        return removed

    def migrate(self) -> int:
        """Move tags found outside their bucket into it; how many were moved.

        Sources: the single ``partitions``/``retained`` keys of earlier releases, and every
        possible bucket (after a change of the bucket count). A tag is added to its bucket
        (ZADD GT: the later creation time wins), then removed from the source only if its
        score there is still the one read, so a concurrent writer of the old layout is never
        lost (the next run moves it). Safe to run concurrently.
        """
        k = self.keys
        moved = 0
        for legacy, bucket_key, place in (
            (k.legacy_partitions, k.partitions_bucket, k.partitions),
            (k.legacy_retained, k.retained_bucket, k.retained),
        ):
            sources = [legacy, *(bucket_key(n) for n in range(MAX_PARTITION_BUCKETS))]
            pipe = self.redis.pipeline(transaction=False)
            for source in sources:
                pipe.zrange(source, 0, -1, withscores=True)
            misplaced = [
                (source, text(tag), float(score))
                for source, found in zip(sources, pipe.execute(), strict=True)
                for tag, score in found
                if place(text(tag)) != source
            ]
            for batch in _chunks(misplaced):
                adds = [("ZADD", place(tag), "GT", repr(score), tag) for _, tag, score in batch]
                calls = [
                    (self.scripts["zrem_if"], [source], [tag, repr(score)])
                    for source, tag, score in batch
                ]
                replies = self.scripts.pipelined((), adds) + self.scripts.pipelined(calls)
                moved += sum(int(r) for r in replies[len(adds) :])
        return moved

    def _forget_due(self, tags: Sequence[Any]) -> None:
        """Drop tags from the due index (a write racing this is caught by the backfill)."""
        if not tags:
            return
        pipe = self.redis.pipeline(transaction=False)
        for tag in tags:
            pipe.zrem(self.keys.due_shard(str(tag)), str(tag))
        pipe.execute()
