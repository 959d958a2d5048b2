"""``RedisAgentTurnStore``: the production ``AgentTurnStore`` that Celery workers share.

Every operation on a turn is one Lua script on one hash slot (see ``keys.py``), one round
trip in the steady state: ``save``, ``peek``, ``load``, ``claim``, ``renew_lease``,
``release_lease`` and ``request_cancellation`` each send a single EVALSHA once this process
knows the turn's tag (after creating, loading or claiming it; else one GET first). A save
sends the header and only the messages that are new since the stored count.

Redis server settings for production (see ``deploy/REDIS.md``):

* ``appendonly yes`` with ``appendfsync everysec`` (a crash may lose the last second of
  steps; the lost steps are redone from the last stored snapshot, as after a killed
  worker) or ``appendfsync always`` (nothing acknowledged is ever lost, slower writes).
* ``maxmemory-policy noeviction``: evicting a turn's header or messages would corrupt it;
  a full Redis must refuse writes instead. Retention (``expire_terminal``) frees memory.
* Replication is asynchronous: a failover may lose the last acknowledged writes. Fencing
  still holds (versions and leases); a few steps may be replayed.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from redis import Redis

from runner_core.errors import SnapshotCorruptedError, TurnNotFoundError
from runner_core.events import AgentEvent, event_from_dict, event_json
from runner_core.messages import Message
from runner_core.snapshot import AgentTurnSnapshot, ChildResult, LeaseInfo
from runner_core.status import AgentTurnStatus
from runner_core.store import CancelResult, Commit, LeaseRef, SaveResult, TurnControl, Wakeups
from stores.redis import writes
from stores.redis.cache import Known, TurnCache
from stores.redis.codec import Arg, TurnSummary, messages_of, snapshot_of, text
from stores.redis.connection import Guard, connect
from stores.redis.keys import Keyspace
from stores.redis.memory import RedisChatMemory
from stores.redis.scans import Scanner
from stores.redis.scripts import Loaded, Scripts, answered, code_of, loaded

log = logging.getLogger("stores.redis")


class RedisAgentTurnStore:
    """Turns in Redis: CAS versions, fenced leases, append-only messages, cluster-safe keys."""

    def __init__(
        self,
        redis: Redis | str,
        namespace: str = "agentworker",
        *,
        username: str | None = None,
        password: str | None = None,
        socket_timeout: float = 5.0,
        connect_timeout: float = 2.0,
        retention_seconds: float | None = 7 * 24 * 3600,
        cache_size: int = 10_000,
        check_connection: bool = True,
        stream_maxlen: int = 10_000,
        stream_ttl: int = 3600,
        events: bool = True,
        requeue_after: float = 300.0,
    ) -> None:
        self.redis, self.url = connect(
            redis,
            username=username,
            password=password,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
        )
        self._owns_client = isinstance(redis, str)
        self.keys = Keyspace(namespace)
        self.scripts = Scripts(self.redis)
        self.scanner = Scanner(self.redis, self.keys, self.scripts)
        self.retention_seconds = retention_seconds
        #: A tree's event stream keeps about this many entries ...
        self.stream_maxlen = stream_maxlen
        #: ... and lives this many seconds after its root's terminal event.
        self.stream_ttl = stream_ttl
        #: The sweeper puts a tag out of reach this long while it reads it (seconds).
        self.visit_horizon = 30.0
        #: How often (seconds) a sweep puts every tag in the due index again.
        self.backfill_seconds = 600.0
        self._backfilled = -1e18
        #: How long a queued wake-up is trusted before the sweeper sends another (seconds):
        #: longer than any backlog should last, short enough to recover a lost message.
        self.requeue_after = requeue_after
        #: Commits write their events to the tree's stream (``events=False``: they are
        #: numbered, not streamed, as with ``AGENTWORKER_EVENTS=false``).
        self.records_events = events
        self.cache = TurnCache(cache_size)
        self.guard = Guard(self.url)
        #: How often ``now()`` reads ``TIME`` (seconds); in between it counts locally.
        self.clock_sync_seconds = 5.0
        self._clock = (0.0, -1e18)

        self._rid_prefix = uuid.uuid4().hex[:12]
        self._rids = itertools.count()
        if check_connection:
            with self.guard:
                self.redis.ping()

    def __repr__(self) -> str:
        return f"RedisAgentTurnStore({self.url!r}, namespace={self.keys.namespace!r})"

    def close(self) -> None:
        """Close the connection pool if this store created it."""
        if self._owns_client:
            self.redis.close()

    # -- the AgentTurnStore protocol -----------------------------------------------------
    def now(self) -> float:
        """The Redis server clock (``TIME``), seconds since the epoch.

        ``TIME`` is read every ``clock_sync_seconds`` and advanced by the local monotonic
        clock in between, so workers agree on the server's clock without a round trip per
        reading (a local wall-clock jump changes nothing).
        """
        base, at = self._clock
        mono = time.monotonic()
        if mono - at > self.clock_sync_seconds:
            with self.guard:
                seconds, micros = self.redis.time()
            after = time.monotonic()
            base, at = int(seconds) + int(micros) / 1_000_000 + (after - mono) / 2, after
            self._clock = (base, at)
            mono = after
        return base + (mono - at)

    def commit(self, commit: Commit) -> SaveResult:
        """The one write of a turn (``commit.lua``): one round trip; see ``Commit``."""
        with self.guard:
            return writes.commit(self, commit)

    def save(
        self,
        snapshot: AgentTurnSnapshot,
        expected_version: int,
        release: LeaseRef | None = None,
        *,
        lease: LeaseRef | None = None,
    ) -> SaveResult:
        """A commit without events; ``lease``: written as its holder; ``release``: and freed."""
        writer = release if release is not None else lease
        return self.commit(
            Commit(snapshot, expected_version, self.request_id(), writer, release is not None)
        )

    def save_parent_and_children(
        self,
        parent: AgentTurnSnapshot,
        expected_parent_version: int,
        children: Sequence[AgentTurnSnapshot],
        release: LeaseRef | None = None,
    ) -> SaveResult:
        """A commit that also creates ``children`` (all checked first)."""
        rid = self.request_id()
        held = release is not None
        return self.commit(
            Commit(parent, expected_parent_version, rid, release, held, tuple(children))
        )

    def read_events(self, root_turn_id: str, limit: int = 10_000) -> list[AgentEvent]:
        """The committed events of a tree, oldest first (provisional ones left out)."""
        with self.guard:
            try:
                tag = self.tag_of(root_turn_id)
            except TurnNotFoundError:
                return []
            entries = self.redis.xrange(self.keys.events(tag, root_turn_id), count=limit) or []
        events: list[AgentEvent] = []
        for _, raw in entries:
            fields = {text(k): text(v) for k, v in (raw or {}).items()}
            if "seq" not in fields:
                continue  # a provisional event
            doc = json.loads(fields["event"])
            events.append(event_from_dict(doc).sequenced(int(fields["seq"])))
        return events

    def report_child(self, child_turn_id: str) -> bool:
        """Record an ended child's result in its waiting parent; True if that woke it."""
        child = self.load(child_turn_id)
        if not child.status.is_terminal or child.parent_turn_id is None:
            return False
        with self.guard:
            tag = self.tag_of(child_turn_id)
            keys = [
                *self.keys.tag_keys(tag),
                self.keys.header(tag, child_turn_id),
                self.keys.header(tag, child.parent_turn_id),
            ]
            result = ChildResult.of(child).model_dump_json()
            reply = self._run_touching("report", keys, [child_turn_id, result], tag)
        return answered(reply) and text(reply[1]) == "1"

    def load(self, turn_id: str) -> AgentTurnSnapshot:
        """A copy of the stored turn; ``TurnNotFoundError`` if unknown."""
        with self.guard:
            tag = self.tag_of(turn_id)
            have = self._cached_messages(turn_id)
            data = loaded(self._run_read("load", tag, turn_id, [turn_id, str(len(have))]))
            assert data is not None
            return self._snapshot(turn_id, tag, data, have)

    def peek(self, turn_id: str) -> TurnControl:
        """Version, status, cancel flag, lease and the server clock in one round trip."""
        with self.guard:
            tag = self.tag_of(turn_id)
            reply = self.scripts.run("peek", [self.keys.header(tag, turn_id)], [turn_id])
        if code_of(reply) != "OK":
            answered(reply)  # raises
        _, v, st, cx, lo, lid, lu, sec, usec = (text(x) for x in reply)
        try:
            lease = LeaseInfo(owner=lo, lease_id=lid, until=float(lu)) if lo else None
            status = AgentTurnStatus(st)
            return TurnControl(int(v), status, cx == "1", lease, int(sec) + int(usec) / 1e6)
        except ValueError as exc:
            raise SnapshotCorruptedError(turn_id, f"bad control fields ({exc})") from exc

    def find_active_turn(self, conversation_id: str) -> tuple[str, AgentTurnStatus] | None:
        """The conversation's non-terminal root turn, from its marker."""
        marker = self.keys.conversation(self.keys.conversation_tag(conversation_id))
        with self.guard:
            turn_id, st = self.redis.hmget(marker, "turn", "st")
        if not turn_id or not st:
            return None
        status = AgentTurnStatus(text(st))
        return None if status.is_terminal else (text(turn_id), status)

    def request_cancellation(
        self, turn_id: str, reason: str | None = None, events: Sequence[AgentEvent] = ()
    ) -> CancelResult:
        """Set the monotonic cancel flag (no version change) and append ``events``."""
        with self.guard:
            tag = self.tag_of(turn_id)
            root = events[0].root_turn_id if events else turn_id
            keys = [
                self.keys.header(tag, turn_id),
                self.keys.runnable(tag),
                self.keys.events(tag, root),
                self.keys.events_end(tag, root),
            ]
            args: list[Arg] = [turn_id, json.dumps(reason), self.request_id(), str(len(events))]
            maxlen = str(self.stream_maxlen) if self.records_events else "0"
            args += [maxlen, *(event_json(e) for e in events)]
            reply = self._run_touching("cancel", keys, args, tag)
        if not answered(reply):
            return CancelResult(False)
        first = text(reply[1])
        return CancelResult(True, int(first) if first else 0)

    def claim(
        self, turn_id: str, worker_id: str, now: float, lease_ms: int
    ) -> AgentTurnSnapshot | None:
        """Lease the turn if claimable: fresh lease id, version bumped; None otherwise."""
        with self.guard:
            return self._claim(self.tag_of(turn_id), turn_id, worker_id, now, lease_ms)

    def claim_runnable(
        self, worker_id: str, now: float, lease_ms: int, limit: int
    ) -> list[AgentTurnSnapshot]:
        """Lease up to ``limit`` claimable turns, longest runnable first; skips corrupt ones."""
        claimed: list[AgentTurnSnapshot] = []
        if limit <= 0:
            return claimed
        with self.guard:
            most = max(4 * limit, 50)
            for _, tag, turn_id in self.scanner.runnable(now, most, True, most):
                try:
                    snapshot = self._claim(tag, turn_id, worker_id, now, lease_ms)
                except SnapshotCorruptedError:
                    continue  # quarantined (and logged) by _claim
                except TurnNotFoundError:
                    continue
                if snapshot is not None:
                    claimed.append(snapshot)
                    if len(claimed) >= limit:
                        break
        return claimed

    def renew_lease(
        self, turn_id: str, worker_id: str, lease_id: str, now: float, until: float
    ) -> bool:
        """Extend a live lease of this owner and lease id (no version change)."""
        with self.guard:
            tag = self.tag_of(turn_id)
            args = [turn_id, worker_id, lease_id, repr(float(now)), repr(float(until))]
            return answered(self.scripts.run("renew", self._lease_keys(tag, turn_id), args))

    def release_lease(self, turn_id: str, worker_id: str, lease_id: str) -> bool:
        """Drop the lease of this owner and lease id (no version change)."""
        with self.guard:
            tag = self.tag_of(turn_id)
            args: list[Arg] = [turn_id, worker_id, lease_id, self.request_id()]
            keys = self._lease_keys(tag, turn_id)
            return answered(self._run_touching("release", keys, args, tag))

    def children_of(self, parent_turn_id: str) -> list[str]:
        """Direct children, oldest first ([] for an unknown turn)."""
        with self.guard:
            try:
                tag = self.tag_of(parent_turn_id)
            except TurnNotFoundError:
                return []
            ids = self.redis.lrange(self.keys.children(tag, parent_turn_id), 0, -1)
            return [text(c) for c in ids]

    def find_terminal_children_with_waiting_parent(self, limit: int) -> list[tuple[str, str]]:
        """Ended children whose parent still lists them as awaited (the repair scan)."""
        with self.guard:
            return self.scanner.repair(limit)

    def chat_memory(self, conversation_id: str) -> RedisChatMemory:
        """The conversation's chat memory in this Redis (a ``chat_memory_provider``)."""
        return RedisChatMemory(self.redis, self.keys, self.scripts, self.guard, conversation_id)

    # -- records that cannot be read ------------------------------------------------------------
    def quarantine(self, turn_id: str, reason: str) -> bool:
        """Move a turn out of every index with the reason; False if it already was."""
        with self.guard:
            return self._quarantine(self.tag_of(turn_id), turn_id, reason)

    def _quarantine(self, tag: str, turn_id: str, reason: str) -> bool:
        k = self.keys
        keys = [k.header(tag, turn_id), k.runnable(tag), k.live(tag), k.leases(tag)]
        reply = self.scripts.run("quarantine", [*keys, k.quarantine(tag)], [turn_id, reason])
        moved = code_of(reply) == "OK"
        if moved:
            log.error("turn %s quarantined (never claimed or woken again): %s", turn_id, reason)
        return moved

    def quarantined(self, limit: int = 100) -> list[tuple[str, str, float]]:
        """(turn id, reason, when) of quarantined turns, newest first."""
        found: list[tuple[str, str, float]] = []
        with self.guard:
            for tag in self.scanner.tags(self.keys.retained):
                key = self.keys.quarantine(tag)
                entries: list[Any] = self.redis.zrange(key, 0, -1, withscores=True)
                for raw, when in entries:
                    turn_id = text(raw)
                    reason = self.redis.hget(self.keys.header(tag, turn_id), "qr")
                    found.append((turn_id, text(reason) if reason else "", float(when)))
        return sorted(found, key=lambda f: -f[2])[:limit]

    # -- wake-ups and the sweeper -----------------------------------------------------------
    def mark_queued(self, turn_ids: Sequence[str]) -> None:
        """A wake-up was sent for each turn: trust it for ``requeue_after`` seconds."""
        self._queue(turn_ids, repr(float(self.requeue_after)))

    def unmark_queued(self, turn_id: str) -> None:
        """The wake-up for this turn was not sent after all."""
        self._queue([turn_id], "")

    def _queue(self, turn_ids: Sequence[str], seconds: str) -> None:
        calls = []
        touches = []
        with self.guard:
            for turn_id in turn_ids:
                try:
                    tag = self.tag_of(turn_id)
                except TurnNotFoundError:
                    continue
                keys = [self.keys.runnable(tag), self.keys.header(tag, turn_id)]
                calls.append((self.scripts["queue"], keys, [turn_id, seconds]))
                if not seconds:  # unmarked: runnable from now on
                    touches.append(self.touch(tag, self.now()))
            if calls:
                self.scripts.pipelined(calls, (), touches)

    def touch(self, tag: str, score: float) -> tuple[str, ...]:
        """The command lowering ``tag``'s due-index score; sent right after the script."""
        return ("ZADD", self.keys.due_shard(tag), "LT", repr(float(score)), tag)

    def _run_touching(self, name: str, keys: list[str], args: list[Arg], tag: str) -> Any:
        """One script call followed by a due-index touch at now, in one round trip."""
        call = (self.scripts[name], keys, args)
        return self.scripts.pipelined([call], (), [self.touch(tag, self.now())])[0]


    def due_turn_ids(self, now: float, limit: int = 1000) -> list[str]:
        """Scheduled retries whose time has come and no queued wake-up covers (read-only)."""
        with self.guard:
            candidates = self.scanner.runnable(now, max(limit, 100), False, 4 * limit)
            return self._retries(candidates)[:limit]

    def stale_turn_ids(self, now: float, older_than: float, limit: int = 1000) -> list[str]:
        """Turns runnable for ``older_than`` seconds that nobody serves (see the protocol).

        A turn with a queued wake-up scores the end of its mark in the runnable index, a
        leased one its lease expiry: both stay out until then. Read-only.
        """
        with self.guard:
            return [c[2] for c in self.scanner.runnable(now - older_than, limit, False, limit)]

    def wakeups(self, now: float, lost_after: float, limit: int = 1000) -> Wakeups:
        """The sweeper's query: due retries and lost wake-ups, at the cost of what is due.

        Visits only the tags whose due-index score has come; each visited tag's score is
        then raised to its earliest runnable entry (compare-and-set, after putting it out
        of reach for ``visit_horizon`` seconds while it is read, so a write meanwhile
        always wins). Every ``backfill_seconds`` all tags are put in the index again.
        """
        with self.guard:
            if time.monotonic() - self._backfilled > self.backfill_seconds:
                self.scanner.backfill()
                self._backfilled = time.monotonic()
            due_tags = self.scanner.due_tags(now, limit)
            hold = repr(float(now + self.visit_horizon))
            self.scanner.settle([(sh, tag, repr(sc), hold) for sh, tag, sc in due_tags])
            visited = self.scanner.visit([tag for _, tag, _ in due_tags], now, limit)
            self.scanner.settle(
                [(sh, tag, hold, visited[tag][0]) for sh, tag, _ in due_tags if tag in visited]
            )
            found = sorted(c for _, entries in visited.values() for c in entries)
            due = self._retries(found)
        bound = now - lost_after
        stale = [turn_id for score, _, turn_id in found if score <= bound]
        return Wakeups(due[:limit], stale[:limit])

    def _retries(self, candidates: Sequence[tuple[float, str, str]]) -> list[str]:
        states = self.scanner.statuses(candidates)
        return [
            turn_id
            for (_, _, turn_id), (st, cx) in zip(candidates, states, strict=True)
            if st == AgentTurnStatus.RETRY_SCHEDULED.value and cx != "1"
        ]

    def list_turns(
        self,
        status: AgentTurnStatus | None = None,
        root_turn_id: str | None = None,
        limit: int = 100,
    ) -> list[TurnSummary]:
        """Summaries of stored turns, newest first: all, one status, or one turn tree."""
        with self.guard:
            if root_turn_id is not None:
                try:
                    tags = [self.tag_of(root_turn_id)]
                except TurnNotFoundError:
                    return []
            elif status is not None and not status.is_terminal:
                tags = self.scanner.tags(self.keys.partitions)
            else:
                tags = self.scanner.tags(self.keys.retained)
            return self.scanner.summaries(tags, status, root_turn_id, limit)

    def expire_terminal(self, older_than_seconds: float | None = None, limit: int = 1000) -> int:
        """Delete turns that ended ``older_than_seconds`` ago (default: retention_seconds).

        Never one a waiting parent still references, nor one with a live child.
        Returns how many were deleted.
        """
        older = self.retention_seconds if older_than_seconds is None else older_than_seconds
        if older is None:
            return 0
        with self.guard:
            cutoff = self.now() - older
            done = self.scanner.expire(self.scanner.expirable(cutoff, limit))
        for turn_id in done:
            self.cache.forget(turn_id)
        return len(done)

    def prune_partitions(self, grace_seconds: float = 3600.0) -> int:
        """Forget empty tags in the partition sets (untouched for ``grace_seconds``)."""
        with self.guard:
            return self.scanner.prune(grace_seconds)

    # -- internals -----------------------------------------------------------------------
    def request_id(self) -> str:
        """A unique id for one script call, so a replayed call is recognised."""
        return f"{self._rid_prefix}{next(self._rids)}"

    def tag_of(self, turn_id: str) -> str:
        """The turn's tag: cached, else from the global index; ``TurnNotFoundError``."""
        known = self.cache.get(turn_id)
        if known is not None:
            return known.tag
        raw = self.redis.get(self.keys.turn_index(turn_id))
        if raw is None:
            raise TurnNotFoundError(turn_id)
        tag = text(raw)
        self.cache.put(turn_id, Known(tag))
        return tag

    def _lease_keys(self, tag: str, turn_id: str) -> list[str]:
        return [self.keys.header(tag, turn_id), self.keys.runnable(tag), self.keys.leases(tag)]

    def _cached_messages(self, turn_id: str) -> tuple[Message, ...]:
        known = self.cache.get(turn_id)
        return known.messages if known is not None and known.messages is not None else ()

    def _run_read(self, name: str, tag: str, turn_id: str, args: Sequence[Arg]) -> object:
        keys = [self.keys.header(tag, turn_id), self.keys.messages(tag, turn_id)]
        return self.scripts.run(name, keys, args)

    def _claim(
        self, tag: str, turn_id: str, worker_id: str, now: float, lease_ms: int
    ) -> AgentTurnSnapshot | None:
        have = self._cached_messages(turn_id)
        lease_id = uuid.uuid4().hex
        until = now + lease_ms / 1000
        k = self.keys
        keys = [k.header(tag, turn_id), k.messages(tag, turn_id), k.runnable(tag), k.leases(tag)]
        args = [turn_id, worker_id, lease_id, repr(float(now)), repr(until), str(len(have))]
        try:
            touch = [self.touch(tag, until)]  # a dead worker's turn is due at lease expiry
            reply = self.scripts.pipelined([(self.scripts["claim"], keys, args)], (), touch)[0]
            data = loaded(reply)
            if data is None:
                return None
            return self._snapshot(turn_id, tag, data, have)
        except SnapshotCorruptedError as exc:
            self._quarantine(tag, turn_id, str(exc))
            raise

    def _snapshot(
        self, turn_id: str, tag: str, data: Loaded, have: tuple[Message, ...]
    ) -> AgentTurnSnapshot:
        """Decode a load/claim reply on top of the cached message prefix ``have``."""
        fields = data.fields
        new = messages_of(turn_id, data.messages, len(have))
        messages = (*have, *new)
        try:
            stored = int(fields.get("n", ""))
        except ValueError as exc:
            raise SnapshotCorruptedError(turn_id, "header has no message count") from exc
        last = messages[-1].id if messages else ""
        if len(messages) != stored or last != fields.get("last", ""):
            if have:  # the cached prefix is not a prefix any more (data lost in a failover)
                self.cache.put(turn_id, Known(tag))
                return self.load(turn_id)
            raise SnapshotCorruptedError(turn_id, f"{len(messages)} messages, header says {stored}")
        snapshot = snapshot_of(turn_id, fields, list(messages))
        self.cache.put(turn_id, Known(tag, stored, last, messages))
        return snapshot
