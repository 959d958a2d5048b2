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
import uuid
from collections.abc import Iterator, Sequence

from redis import Redis

from runner_core.errors import SnapshotCorruptedError, TurnNotFoundError
from runner_core.events import AgentEvent, stored_event_json
from runner_core.messages import Message
from runner_core.snapshot import AgentTurnSnapshot, ChildResult, LeaseInfo
from runner_core.status import AgentTurnStatus
from runner_core.store import CancelResult, Commit, SaveResult, TurnControl, Wakeups
from runner_core.store import arguments as check
from stores.redis.async_writer import (
    AsyncTurnMethods,
    AsyncWriter,
    ClientFactory,
    default_factory,
)
from stores.redis.cache import Known, TagIndex, TurnCache
from stores.redis.clock import ServerClock
from stores.redis.codec import Arg, TurnSummary, messages_of, snapshot_of, text
from stores.redis.connection import Guard, connect
from stores.redis.keys import PARTITION_BUCKETS, Keyspace
from stores.redis.memory import RedisChatMemory
from stores.redis.options import Tuning
from stores.redis.riders import StreamRiders
from stores.redis.scanner import Scanner
from stores.redis.scripts import Loaded, Scripts, answered, cancelled, code_of, loaded
from stores.redis.streams import EventStreams
from stores.redis.sweeper import Sweeper
from stores.redis.writer import Writer

log = logging.getLogger("stores.redis")


class RedisAgentTurnStore(AsyncTurnMethods):
    """Turns in Redis: CAS versions, fenced leases, append-only messages, cluster-safe keys.

    Also an ``AsyncTurnStore``: ``acommit``, ``aload``, ... go over ``redis.asyncio`` with
    a client per event loop (``async_redis`` builds it; default: the same server).
    """

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
        partition_buckets: int = PARTITION_BUCKETS,
        async_redis: ClientFactory | None = None,
    ) -> None:
        self.redis, self.url = connect(
            redis,
            username=username,
            password=password,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
        )
        self._owns_client = isinstance(redis, str)
        self.keys = Keyspace(namespace, partition_buckets)
        self.scripts = Scripts(self.redis)
        self.retention_seconds = retention_seconds
        self.tuning = Tuning(requeue_after, stream_maxlen, stream_ttl, events)
        self.cache = TurnCache(cache_size)
        self.guard = Guard(self.url)
        self.clock = ServerClock(self.redis, self.guard)
        self.tags = TagIndex(self.redis, self.keys, self.cache)
        self.scanner = Scanner(self.redis, self.keys, self.scripts)
        self.streams = EventStreams(self.redis, self.keys)
        self.sweeper = Sweeper(
            self.redis, self.keys, self.scripts, self.scanner, self.tags, self.clock, self.tuning
        )
        self.writer = Writer(
            self.redis, self.keys, self.scripts, self.tags, self.clock, self.tuning
        )
        self.aio = AsyncWriter(self, async_redis or default_factory(redis, self.redis, password))
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

    @property
    def requeue_after(self) -> float:
        """How long a queued wake-up is trusted before the sweeper sends another (seconds)."""
        return self.tuning.requeue_after

    @requeue_after.setter
    def requeue_after(self, seconds: float) -> None:
        self.tuning.requeue_after = seconds

    @property
    def records_events(self) -> bool:
        """Commits write their events to the tree's stream (the runner asks)."""
        return self.tuning.records_events

    def carry(self, riders: StreamRiders) -> bool:
        """Send the stream entries waiting in ``riders`` in each commit's round trip.

        Only on a single server through a pooled client (the commit is one packed write
        there): False otherwise, and nothing changes. ``EventStreams.ride_with`` calls it.
        """
        if not self.scripts.direct:
            return False
        self.writer.riders = riders
        return True

    # -- the AgentTurnStore protocol -----------------------------------------------------
    def now(self) -> float:
        """The Redis server clock (``TIME``), seconds since the epoch (see ``ServerClock``)."""
        return self.clock.now()

    def commit(self, commit: Commit) -> SaveResult:
        """The one write of a turn (``commit.lua``): one round trip; see ``Commit``."""
        check.commit(commit)
        with self.guard:
            try:
                return self.writer.commit(commit)
            except SnapshotCorruptedError as exc:
                self.sweeper.corrupt_commit(commit, exc)
                raise

    def report_child(self, child_turn_id: str) -> bool:
        """Record an ended child's result in its waiting parent; True if that woke it."""
        check.turn(child_turn_id, "child_turn_id")
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
            reply = self.sweeper.run_touching("report", keys, [child_turn_id, result], tag)
        return answered(reply) and text(reply[1]) == "1"

    def load(self, turn_id: str) -> AgentTurnSnapshot:
        """A copy of the stored turn; ``TurnNotFoundError`` if unknown."""
        check.turn(turn_id)
        with self.guard:
            tag = self.tag_of(turn_id)
            have = self.cached_messages(turn_id)
            data = loaded(self._run_read("load", tag, turn_id, [turn_id, str(len(have))]))
            assert data is not None
            return self._snapshot(turn_id, tag, data, have)

    def peek(self, turn_id: str) -> TurnControl:
        """Version, status, cancel flag, lease and the server clock in one round trip."""
        check.turn(turn_id)
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
        check.turn(conversation_id, "conversation_id")
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
        check.cancellation(turn_id, reason, events)
        with self.guard:
            tag = self.tag_of(turn_id)
            keys, args = self.cancel_input(tag, turn_id, reason, events)
            return cancelled(self.sweeper.run_touching("cancel", keys, args, tag))

    def cancel_input(
        self, tag: str, turn_id: str, reason: str | None, events: Sequence[AgentEvent]
    ) -> tuple[list[str], list[Arg]]:
        """KEYS and ARGV of cancel.lua (see its header)."""
        root = events[0].root_turn_id if events else turn_id
        k = self.keys
        keys = [k.header(tag, turn_id), k.runnable(tag), k.events(tag, root)]
        keys.append(k.events_end(tag, root))
        args: list[Arg] = [turn_id, json.dumps(reason), self.request_id(), str(len(events))]
        maxlen = str(self.tuning.stream_maxlen) if self.tuning.records_events else "0"
        return keys, [*args, maxlen, *(stored_event_json(e) for e in events)]

    def claim(
        self, turn_id: str, worker_id: str, now: float, lease_ms: int
    ) -> AgentTurnSnapshot | None:
        """Lease the turn if claimable: fresh lease id, version bumped; None otherwise."""
        check.claim(turn_id, worker_id, now, lease_ms)
        with self.guard:
            return self._claim(self.tag_of(turn_id), turn_id, worker_id, now, lease_ms)

    def claim_runnable(
        self, worker_id: str, now: float, lease_ms: int, limit: int
    ) -> list[AgentTurnSnapshot]:
        """Lease up to ``limit`` claimable turns, longest runnable first; skips corrupt ones."""
        check.claim_runnable(worker_id, now, lease_ms, limit)
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
        check.renew(turn_id, worker_id, lease_id, now, until)
        with self.guard:
            tag = self.tag_of(turn_id)
            args = [turn_id, worker_id, lease_id, repr(float(now)), repr(float(until))]
            return answered(self.scripts.run("renew", self._lease_keys(tag, turn_id), args))

    def release_lease(self, turn_id: str, worker_id: str, lease_id: str) -> bool:
        """Drop the lease of this owner and lease id (no version change)."""
        check.lease(turn_id, worker_id, lease_id)
        with self.guard:
            tag = self.tag_of(turn_id)
            args: list[Arg] = [turn_id, worker_id, lease_id, self.request_id()]
            keys = self._lease_keys(tag, turn_id)
            return answered(self.sweeper.run_touching("release", keys, args, tag))

    def children_of(self, parent_turn_id: str) -> list[str]:
        """Direct children, oldest first ([] for an unknown turn)."""
        check.turn(parent_turn_id, "parent_turn_id")
        with self.guard:
            try:
                tag = self.tag_of(parent_turn_id)
            except TurnNotFoundError:
                return []
            ids = self.redis.lrange(self.keys.children(tag, parent_turn_id), 0, -1)
            return [text(c) for c in ids]

    def find_terminal_children_with_waiting_parent(self, limit: int) -> list[tuple[str, str]]:
        """Ended children whose parent still lists them as awaited (the repair scan)."""
        check.count(limit)
        with self.guard:
            return self.scanner.repair(limit)

    def chat_memory(self, conversation_id: str) -> RedisChatMemory:
        """The conversation's chat memory in this Redis (a ``chat_memory_provider``)."""
        return RedisChatMemory(self.redis, self.keys, self.scripts, self.guard, conversation_id)

    # -- records that cannot be read, wake-ups (the Sweeper), events (EventStreams) ------
    def quarantine(self, turn_id: str, reason: str) -> bool:
        """Move a turn out of every index with the reason; False if it already was."""
        check.quarantine(turn_id, reason)
        with self.guard:
            return self.sweeper.quarantine(self.tag_of(turn_id), turn_id, reason)

    def quarantined(self, limit: int = 100) -> list[tuple[str, str, float]]:
        """(turn id, reason, when) of quarantined turns, newest first."""
        check.count(limit)
        with self.guard:
            return self.sweeper.quarantined(limit)

    def mark_queued(self, turn_ids: Sequence[str]) -> None:
        """A wake-up was sent for each turn: trust it for ``requeue_after`` seconds."""
        check.queued(turn_ids)
        with self.guard:
            self.sweeper.mark(turn_ids, repr(float(self.tuning.requeue_after)))

    def unmark_queued(self, turn_id: str) -> None:
        """The wake-up for this turn was not sent after all."""
        check.turn(turn_id)
        with self.guard:
            self.sweeper.mark([turn_id], "")

    def forget_queued(self, before: float) -> int:
        """Wake-ups marked queued before ``before`` may be lost: clear those marks."""
        check.times(before=before)
        with self.guard:
            return self.sweeper.forget(before)

    def due_turn_ids(self, now: float, limit: int = 1000) -> list[str]:
        """Scheduled retries whose time has come and no queued wake-up covers."""
        check.due(now, limit)
        with self.guard:
            return self.sweeper.due_retries(now, limit)

    def stale_turn_ids(self, now: float, older_than: float, limit: int = 1000) -> list[str]:
        """Turns runnable for ``older_than`` seconds that nobody serves.

        A turn with a queued wake-up scores the end of its mark in the runnable index, a
        leased one its lease expiry: both stay out until then.
        """
        check.stale(now, older_than, limit)
        with self.guard:
            return [c[2] for c in self.scanner.runnable(now - older_than, limit, False, limit)]

    def wakeups(self, now: float, lost_after: float, limit: int = 1000) -> Wakeups:
        """The sweeper's query: due retries and lost wake-ups, at the cost of what is due."""
        check.wakeups(now, lost_after, limit)
        with self.guard:
            return self.sweeper.wakeups(now, lost_after, limit)

    def read_events(
        self, root_turn_id: str, limit: int = 10_000, *, newest: bool = False
    ) -> list[AgentEvent]:
        """The committed events of a tree, oldest first (provisional ones left out).

        ``newest``: those among the stream's last ``limit`` entries.
        """
        check.read_events(root_turn_id, limit)
        with self.guard:
            try:
                tag = self.tag_of(root_turn_id)
            except TurnNotFoundError:
                return []
            return self.streams.committed(tag, root_turn_id, limit, newest=newest)

    def list_turns(
        self,
        status: AgentTurnStatus | None = None,
        root_turn_id: str | None = None,
        limit: int = 100,
        *,
        before: tuple[float, str] | None = None,
    ) -> list[TurnSummary]:
        """Summaries of stored turns, newest first: all, one status, or one turn tree.

        Newest first is by (created at, turn id); ``before`` lists only the turns older than
        that position (the last one of a previous page). See ``iter_turns``.
        """
        check.listing(status, root_turn_id, before, limit)
        return list(itertools.islice(self.iter_turns(status, root_turn_id, before=before), limit))

    def iter_turns(
        self,
        status: AgentTurnStatus | None = None,
        root_turn_id: str | None = None,
        *,
        before: tuple[float, str] | None = None,
    ) -> Iterator[TurnSummary]:
        """``list_turns`` without a limit: read from Redis as far as it is taken.

        The turn trees are read newest first (by their newest creation), in batches: a
        listing of the newest few costs a few batches, whatever the store holds.
        """
        check.listing(status, root_turn_id, before)
        with self.guard:
            if root_turn_id is not None:
                try:
                    tags = iter([(self.tag_of(root_turn_id), float("inf"))])
                except TurnNotFoundError:
                    return
            elif status is not None and not status.is_terminal:
                tags = self.scanner.newest_tags(self.keys.all_partitions())
            else:
                tags = self.scanner.newest_tags(self.keys.all_retained())
            yield from self.scanner.newest_turns(tags, status, root_turn_id, before)

    def expire_terminal(
        self,
        older_than_seconds: float | None = None,
        limit: int = 1000,
        *,
        skip: dict[str, int] | None = None,
    ) -> int:
        """Delete turns that ended ``older_than_seconds`` ago (default: retention_seconds).

        Never one a waiting parent still references, nor one with a live child. Returns
        how many were deleted. ``skip`` carries a run's place from batch to batch: per
        tag, how many of its oldest candidates were refused (so they are stepped over,
        and a run never stalls behind more refusals than one batch holds); it is updated.
        """
        check.expiry(older_than_seconds, limit)
        older = self.retention_seconds if older_than_seconds is None else older_than_seconds
        if older is None:
            return 0
        with self.guard:
            cutoff = self.now() - older
            candidates = self.scanner.expirable(cutoff, limit, skip)
            done, refused = self.scanner.expire(candidates)
        if skip is not None:
            for tag, turn_id, _ in candidates:
                if turn_id in refused:
                    skip[tag] = skip.get(tag, 0) + 1
        for turn_id in done:
            self.cache.forget(turn_id)
        return len(done)

    def prune_partitions(self, grace_seconds: float = 3600.0) -> int:
        """Forget empty tags in the partition sets (untouched for ``grace_seconds``)."""
        check.times(grace_seconds=grace_seconds)
        with self.guard:
            return self.scanner.prune(grace_seconds)

    def migrate_partitions(self) -> int:
        """Move tags of the single partition sets of earlier releases into their buckets."""
        with self.guard:
            return self.scanner.migrate()

    # -- internals -----------------------------------------------------------------------
    def request_id(self) -> str:
        """A unique id for one script call, so a replayed call is recognised."""
        return f"{self._rid_prefix}{next(self._rids)}"

    def tag_of(self, turn_id: str) -> str:
        """The turn's tag: cached, else from the global index; ``TurnNotFoundError``."""
        return self.tags.tag_of(turn_id)

    def _lease_keys(self, tag: str, turn_id: str) -> list[str]:
        return [self.keys.header(tag, turn_id), self.keys.runnable(tag), self.keys.leases(tag)]

    def cached_messages(self, turn_id: str) -> tuple[Message, ...]:
        """The stored messages of a turn this process still holds (a prefix; maybe none)."""
        known = self.cache.get(turn_id)
        return known.messages if known is not None and known.messages is not None else ()

    def _run_read(self, name: str, tag: str, turn_id: str, args: Sequence[Arg]) -> object:
        keys = [self.keys.header(tag, turn_id), self.keys.messages(tag, turn_id)]
        return self.scripts.run(name, keys, args)

    def _claim(
        self, tag: str, turn_id: str, worker_id: str, now: float, lease_ms: int
    ) -> AgentTurnSnapshot | None:
        have = self.cached_messages(turn_id)
        lease_id = uuid.uuid4().hex
        until = now + lease_ms / 1000
        k = self.keys
        keys = [k.header(tag, turn_id), k.messages(tag, turn_id), k.runnable(tag), k.leases(tag)]
        args = [turn_id, worker_id, lease_id, repr(float(now)), repr(until), str(len(have))]
        try:
            touch = [self.sweeper.touch(tag, until)]  # a dead worker's turn is due at lease expiry
            reply = self.scripts.pipelined([(self.scripts["claim"], keys, args)], (), touch)[0]
            data = loaded(reply)
            if data is None:
                return None
            return self._snapshot(turn_id, tag, data, have)
        except SnapshotCorruptedError as exc:
            self.sweeper.set_aside(tag, turn_id, str(exc))
            raise

    def _snapshot(
        self, turn_id: str, tag: str, data: Loaded, have: tuple[Message, ...]
    ) -> AgentTurnSnapshot:
        """Decode a load/claim reply on top of the cached message prefix ``have``."""
        snapshot = self.decode(turn_id, tag, data, have)
        return snapshot if snapshot is not None else self.load(turn_id)

    def decode(
        self, turn_id: str, tag: str, data: Loaded, have: tuple[Message, ...]
    ) -> AgentTurnSnapshot | None:
        """``_snapshot`` without the reload: None when the cached prefix was stale (dropped)."""
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
                return None
            raise SnapshotCorruptedError(turn_id, f"{len(messages)} messages, header says {stored}")
        snapshot = snapshot_of(turn_id, fields, list(messages))
        self.cache.put(turn_id, Known(tag, stored, last, messages))
        return snapshot
