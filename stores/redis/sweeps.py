"""The sweeper's side of the Redis store: wake-up marks, the due index, quarantine, events.

Functions of a ``RedisAgentTurnStore`` (called under its guard): the store's methods are
their one-line doors.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runner_core.errors import TurnNotFoundError
from runner_core.events import AgentEvent, event_from_dict
from runner_core.status import AgentTurnStatus
from runner_core.store import Wakeups
from stores.redis.codec import Arg, text
from stores.redis.scripts import code_of

if TYPE_CHECKING:
    from stores.redis.store import RedisAgentTurnStore

log = logging.getLogger("stores.redis")


def mark(store: RedisAgentTurnStore, turn_ids: Sequence[str], seconds: str) -> None:
    """Mark each turn's wake-up queued for ``seconds`` (or clear the mark: '')."""
    calls = []
    touches = []
    for turn_id in turn_ids:
        try:
            tag = store.tag_of(turn_id)
        except TurnNotFoundError:
            continue
        keys = [store.keys.runnable(tag), store.keys.header(tag, turn_id)]
        calls.append((store.scripts["queue"], keys, [turn_id, seconds]))
        if not seconds:  # unmarked: runnable from now on
            touches.append(store.touch(tag, store.now()))
    if calls:
        store.scripts.pipelined(calls, (), touches)


def forget(store: RedisAgentTurnStore, before: float) -> int:
    """Clear the queued marks set before ``before``; how many were cleared.

    Visits only the tags whose due-index score says they may hold such a mark (a marked
    turn scores its mark's end, which is at most ``before + requeue_after``).
    """
    cutoff = repr(float(before) + float(store.requeue_after))
    tags = [tag for _, tag, _ in store.scanner.due_tags(float(cutoff), 1_000_000)]
    cleared = 0
    for batch in range(0, len(tags), 200):
        chunk = tags[batch : batch + 200]
        calls = [
            (store.scripts["forget"], [store.keys.runnable(t)], [store.keys.header(t, ""), cutoff])
            for t in chunk
        ]
        touches = [store.touch(t, store.now()) for t in chunk]
        cleared += sum(int(n) for n in store.scripts.pipelined(calls, (), touches)[: len(calls)])
    return cleared


def run_touching(
    store: RedisAgentTurnStore, name: str, keys: list[str], args: Sequence[Arg], tag: str
) -> Any:
    """One script call followed by a due-index touch at now, in one round trip."""
    call = (store.scripts[name], keys, args)
    return store.scripts.pipelined([call], (), [store.touch(tag, store.now())])[0]


def wakeups(store: RedisAgentTurnStore, now: float, lost_after: float, limit: int) -> Wakeups:
    """Due retries and lost wake-ups, visiting only the tags the due index says are due.

    See ``Scanner.collect``. Every ``backfill_seconds`` all tags are put in the index
    again (older data, a safety net).
    """
    scanner = store.scanner
    if time.monotonic() - store.backfilled_at > store.backfill_seconds:
        scanner.backfill()
        store.backfilled_at = time.monotonic()
    found = scanner.collect(now, limit, limit)
    bound = now - lost_after
    stale = [turn_id for score, _, turn_id in found if score <= bound]
    return Wakeups(retries(store, found)[:limit], stale[:limit])


def retries(store: RedisAgentTurnStore, candidates: Sequence[tuple[float, str, str]]) -> list[str]:
    """The candidates that are scheduled retries (not cancel requests)."""
    states = store.scanner.statuses(candidates)
    return [
        turn_id
        for (_, _, turn_id), (st, cx) in zip(candidates, states, strict=True)
        if st == AgentTurnStatus.RETRY_SCHEDULED.value and cx != "1"
    ]


def quarantine(store: RedisAgentTurnStore, tag: str, turn_id: str, reason: str) -> bool:
    """Move a turn out of every index, with the reason; False if it already was."""
    k = store.keys
    keys = [k.header(tag, turn_id), k.runnable(tag), k.live(tag), k.leases(tag), k.quarantine(tag)]
    reply = store.scripts.run("quarantine", keys, [turn_id, reason])
    moved = code_of(reply) == "OK"
    if moved:
        log.error("turn %s quarantined (never claimed or woken again): %s", turn_id, reason)
    return moved


def quarantined(store: RedisAgentTurnStore, limit: int) -> list[tuple[str, str, float]]:
    """(turn id, reason, when) of quarantined turns, newest first."""
    found: list[tuple[str, str, float]] = []
    for tag in store.scanner.retained_tags():
        entries: list[Any] = store.redis.zrange(store.keys.quarantine(tag), 0, -1, withscores=True)
        for raw, when in entries:
            turn_id = text(raw)
            reason = store.redis.hget(store.keys.header(tag, turn_id), "qr")
            found.append((turn_id, text(reason) if reason else "", float(when)))
    return sorted(found, key=lambda f: -f[2])[:limit]


def read_events(
    store: RedisAgentTurnStore, root_turn_id: str, limit: int, *, newest: bool = False
) -> list[AgentEvent]:
    """The committed events of a tree, oldest first (provisional ones left out).

    ``newest``: those among the stream's last ``limit`` entries.
    """
    try:
        tag = store.tag_of(root_turn_id)
    except TurnNotFoundError:
        return []
    key = store.keys.events(tag, root_turn_id)
    if newest:
        entries = list(reversed(store.redis.xrevrange(key, count=limit) or []))
    else:
        entries = store.redis.xrange(key, count=limit) or []
    events: list[AgentEvent] = []
    for _, raw in entries:
        fields = {text(k): text(v) for k, v in (raw or {}).items()}
        if "seq" not in fields:
            continue  # a provisional event
        doc = json.loads(fields["event"])
        events.append(event_from_dict(doc).sequenced(int(fields["seq"])))
    return events
