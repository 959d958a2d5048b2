"""The write path of the Redis store: every write of a turn is one ``commit.lua`` call.

A commit is one EVALSHA in the normal case: the header, the events, and only the messages
after the stored count this process knows (``cache.Known``). If that count is off (another
process appended), the script answers MISMATCH with the stored count and the commit is
sent again once, after checking the snapshot still holds the stored history. A creation
also writes the turn's global ``id -> tag`` entry (and the partition indexes) in the same
round trip, before the script, and so do the stream entries of provisional events that
wait for it (``riders``: they land ahead of the commit's own events).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from redis import Redis

from runner_core.errors import HistoryRewrittenError, TurnNotFoundError
from runner_core.events import TERMINAL_EVENTS
from runner_core.snapshot import AgentTurnSnapshot, ChildResult
from runner_core.status import AgentTurnStatus as S
from runner_core.store import Commit, SaveResult, waiting_child_ids
from stores.redis.cache import Known, TagIndex, TurnCache
from stores.redis.clock import ServerClock
from stores.redis.codec import Arg, turn_block
from stores.redis.entries import event_args
from stores.redis.keys import Keyspace
from stores.redis.options import Tuning
from stores.redis.riders import Command, StreamRiders
from stores.redis.scripts import Mismatch, NeedKeys, Scripts, code_of, saved
from stores.redis.sweeper import lower_due

log = logging.getLogger("stores.redis.writer")

#: commit.lua's KEYS and ARGV, and the plain commands sent before and after it.
Planned = tuple[list[str], list[Arg], list[tuple[Arg, ...]], list[tuple[Arg, ...]]]


class Writer:
    """Runs ``commit.lua``: creations, compare-and-set updates, children, events."""

    def __init__(
        self,
        redis: Redis,
        keys: Keyspace,
        scripts: Scripts,
        tags: TagIndex,
        clock: ServerClock,
        tuning: Tuning,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.scripts = scripts
        self.tags = tags
        self.cache: TurnCache = tags.cache
        self.clock = clock
        self.tuning = tuning
        #: Stream entries sent ahead of each commit script (``RedisAgentTurnStore.carry``).
        self.riders: StreamRiders | None = None

    def commit(self, c: Commit) -> SaveResult:
        """Run commit.lua for ``c``: create or compare-and-set update, all checks in the script."""
        s = c.snapshot
        tag = self.new_tag(s) if c.expected_version == -1 else self.tags.tag_of(s.id)
        known, stored = self.known(c)
        every_key, mismatches = False, 0
        while mismatches < 2:
            result = saved(self._call(tag, c, stored, every_key), s.conversation_id)
            if isinstance(result, SaveResult):
                self.remember(tag, c, known, stored)
                return result
            if isinstance(result, NeedKeys):
                if every_key:
                    raise RuntimeError(f"commit.lua refused every key of {s.id}")
                every_key = True  # the stored turn needs a key this commit thought unused
                continue
            check_prefix(s, result)
            stored, mismatches = result.stored, mismatches + 1
        raise HistoryRewrittenError(s.id, "the stored message count kept changing")

    def known(self, c: Commit) -> tuple[Known | None, int]:
        """What this process knows of the turn, and the stored message count to send."""
        s = c.snapshot
        if c.expected_version == -1:
            return None, 0
        known = self.cache.get(s.id)
        count = len(s.messages)
        if known is not None and 0 <= known.stored <= count:
            return known, known.stored
        return known, count

    def _call(self, tag: str, c: Commit, stored: int, every_key: bool) -> object:
        """The commit script and, in the same round trip, the index writes around it."""
        keys, args, before, after = self.plan(tag, c, stored, every_key)
        riding = self.riding(c)
        if not before and not after and not riding:
            return self.scripts.run("commit", keys, args)
        try:
            replies = self.scripts.pipelined(
                [(self.scripts["commit"], keys, args)],
                [*riding, *before],
                after,
                lenient=len(riding),
            )
        except BaseException:
            self.unride(c, riding)
            raise
        replies = own_replies(replies, riding)
        reply = replies[len(before)]
        if code_of(reply) not in ("OK", "MISMATCH"):
            ours = self.entries_set(c, replies[: len(before) + 1])
            if ours:
                self.redis.delete(*ours)
        return reply

    def riding(self, c: Commit) -> list[Command]:
        """The stream entries of ``c``'s turn that wait to go ahead of its script."""
        return self.riders.take(c.snapshot.id) if self.riders is not None else []

    def unride(self, c: Commit, riding: list[Command]) -> None:
        """The write that carried ``riding`` failed: they wait for the next one again."""
        if riding and self.riders is not None:
            self.riders.put_back(c.snapshot.id, riding)

    def plan(self, tag: str, c: Commit, stored: int, every_key: bool = False) -> Planned:
        """KEYS and ARGV of commit.lua, and the index writes sent before and after it."""
        s, k = c.snapshot, self.keys
        keys, args = self._script_input(tag, c, stored, every_key)
        created = [s, *c.children] if c.expected_version == -1 else list(c.children)
        # the id -> tag entries first (``entries_set`` reads their replies in this order)
        before: list[tuple[Arg, ...]] = [("SET", k.turn_index(t.id), tag, "NX") for t in created]
        if created:
            # the tag's score is its last turn creation: listings read the newest tags first
            stamp = repr(time.time())
            before += [
                ("ZADD", k.partitions(tag), stamp, tag),
                ("ZADD", k.retained(tag), stamp, tag),
            ]
        score = self.attention(c)
        after: list[tuple[Arg, ...]] = [] if score is None else [lower_due(self.keys, tag, score)]
        return keys, args, before, after

    def _script_input(
        self, tag: str, c: Commit, stored: int, every_key: bool
    ) -> tuple[list[str], list[Arg]]:
        """KEYS and ARGV of commit.lua (see its header)."""
        s, k = c.snapshot, self.keys
        creating = c.expected_version == -1
        own_list = k.children(tag, s.parent_turn_id if creating and s.parent_turn_id else s.id)
        parent = k.header(tag, s.parent_turn_id) if s.parent_turn_id else k.header(tag, s.id)
        keys = [
            *k.tag_keys(tag),
            k.header(tag, s.id),
            k.messages(tag, s.id),
            own_list,
            k.events(tag, s.root_turn_id),
            k.events_end(tag, s.root_turn_id),
            parent,
        ]
        ends = s.parent_turn_id is None and s.status.is_terminal
        report = ""
        if s.parent_turn_id is not None and s.status.is_terminal:
            report = ChildResult.of(s).model_dump_json()
        worker, lease_id = c.lease if c.lease is not None else ("", "")
        end_marked = ends and any(e.type in TERMINAL_EVENTS for e in c.events)
        roles = range(len(keys)) if every_key else self._roles(c, bool(report), end_marked)
        keys = [keys[i] for i in roles]
        args: list[Arg] = [
            c.request_id,
            str(len(c.children)),
            worker,
            lease_id,
            "1" if c.release else "0",
            str(len(c.events)),
            str(self.tuning.stream_maxlen) if self.tuning.records_events else "0",
            str(self.tuning.stream_ttl),
            "1" if end_marked else "0",
            report,
            repr(float(self.tuning.requeue_after)) if c.wake else "",
            "" if c.renew_seconds is None else repr(float(c.renew_seconds)),
            "1" if c.unless_cancelled else "0",
            ",".join(str(i + 1) for i in roles),
            *event_args(s, c.events),
            *turn_block(s, c.expected_version, stored),
        ]
        for child in c.children:
            keys += [k.header(tag, child.id), k.messages(tag, child.id), k.children(tag, s.id)]
            args += turn_block(child, -1, 0)
        return keys, args

    def _roles(self, c: Commit, reports: bool, ends: bool) -> list[int]:
        """The keys this commit uses, by index (commit.lua's roles less one).

        Mirrors commit.lua's list of the keys a write uses, from what the commit holds; the
        script answers NEED_KEYS (and writes nothing) if the stored turn needs one more.
        """
        s = c.snapshot
        creating, children = c.expected_version == -1, bool(c.children)
        listed = s.status.is_terminal or children
        used = (
            True,  # runnable
            creating or listed,  # live
            listed,  # ended
            children or reports or bool(waiting_child_ids(s)) or bool(s.child_results),
            c.lease is not None,  # leases
            s.parent_turn_id is None and s.conversation_id is not None,  # conversation
            True,  # header
            True,  # messages
            creating and s.parent_turn_id is not None,  # the parent's children list
            bool(c.events) and self.tuning.records_events,  # stream
            ends,  # the stream's end marker
            reports,  # the parent's header
        )
        return [i for i, uses in enumerate(used) if uses]

    def attention(self, c: Commit) -> float | None:
        """The earliest time this commit may make the sweeper's attention due in its tag.

        A lower bound of the runnable scores the commit writes (the due index only ever needs
        one that is not later): a queued wake-up's mark, a retry's due time, or now. None when
        nothing the commit writes can need the sweeper (a lease holder's commit in mid-step,
        a blocked or ended turn that wakes no parent).
        """
        s = c.snapshot
        if c.lease is not None and not c.release:
            return None  # still leased: the claim put its expiry in the index
        now = self.clock.now()
        woken = now + self.tuning.requeue_after - 1.0 if c.wake else now
        scores: list[float] = []
        status = s.status
        if status.is_terminal:
            if s.parent_turn_id is not None:
                scores.append(woken)  # it may wake its parent
        elif s.cancel_requested or status in (S.READY, S.RUNNING):
            scores.append(woken)
        elif status is S.RETRY_SCHEDULED:
            scores.append(s.next_runnable_at if s.next_runnable_at is not None else now)
        if c.children:
            scores.append(woken)
        return min(scores) if scores else None

    def entries_set(self, c: Commit, replies: list[object]) -> list[str]:
        """Nothing was created: the ``id -> tag`` entries this call set, to drop (only those)."""
        k = self.keys
        ids = [child.id for child in c.children]
        if c.expected_version == -1:
            ids.insert(0, c.snapshot.id)
        sets = replies[: len(ids)]  # a SET per created turn, first in ``before``
        return [k.turn_index(i) for i, set_ in zip(ids, sets, strict=True) if set_]

    def new_tag(self, s: AgentTurnSnapshot) -> str:
        """A root's tag from the snapshot; a child's is its parent's (or its root's)."""
        if s.parent_turn_id is None:
            return self.keys.root_tag(s.id, s.conversation_id)
        for ref in (s.parent_turn_id, s.root_turn_id):
            try:
                return self.tags.tag_of(ref)
            except TurnNotFoundError:
                continue
        return self.keys.root_tag(s.root_turn_id, None)

    def remember(self, tag: str, c: Commit, known: Known | None, stored: int) -> None:
        """After a commit landed: what this process now knows of the turn and its children."""
        s = c.snapshot
        msgs = tuple(s.messages)
        last = msgs[-1].id if msgs else ""
        cached = None
        if c.expected_version == -1:
            cached = None if s.status.is_terminal else msgs
        else:
            prefix = known.messages if known is not None else None
            if prefix is not None and len(prefix) == stored and not s.status.is_terminal:
                cached = prefix + msgs[stored:]
        self.cache.put(s.id, Known(tag, len(msgs), last, cached))
        for child in c.children:
            cm = tuple(child.messages)
            self.cache.put(child.id, Known(tag, len(cm), cm[-1].id if cm else "", cm))


def check_prefix(s: AgentTurnSnapshot, mismatch: Mismatch) -> None:
    """After a count mismatch: the snapshot must still hold the stored messages."""
    n = mismatch.stored
    if len(s.messages) < n or (n and s.messages[n - 1].id != mismatch.last_id):
        raise HistoryRewrittenError(
            s.id, f"save has {len(s.messages)} messages, the {n} stored ones differ"
        )


def own_replies(replies: list[Any], riding: Sequence[Command]) -> list[Any]:
    """A commit's replies without those of the entries that rode ahead of it.

    Those entries are best effort: one the server refused is logged.
    """
    if not riding:
        return replies
    refused = [r for r in replies[: len(riding)] if isinstance(r, Exception)]
    if refused:
        log.warning("%d stream entries not written: %s", len(refused), refused[0])
    return replies[len(riding) :]
