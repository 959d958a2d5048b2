"""The write path of the Redis store: creating turns and compare-and-set updates.

A save is one EVALSHA in the normal case: the header, the request id, and only the
messages after the stored count this process knows (``cache.Known``). If that count is
off (another process appended), the script answers MISMATCH with the stored count and
the save is sent again once, after checking the snapshot still holds the stored history.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from runner_core.errors import (
    AgentConversationBusyException,
    HistoryRewrittenError,
    TurnNotFoundError,
)
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.store import LeaseRef, SaveResult
from stores.redis.cache import Known
from stores.redis.codec import Arg, turn_block
from stores.redis.scripts import Mismatch, code_of, saved

if TYPE_CHECKING:
    from stores.redis.store import RedisAgentTurnStore


def create(store: RedisAgentTurnStore, s: AgentTurnSnapshot) -> SaveResult:
    """Create a turn: index entry and partitions, then create.lua, in one round trip."""
    tag = _new_tag(store, s)
    k = store.keys
    keys = k.tag_keys(tag) + k.write_keys(tag, s.id, s.parent_turn_id)
    stamp = repr(time.time())
    before = [
        ("SET", k.turn_index(s.id), tag, "NX"),
        ("ZADD", k.partitions, stamp, tag),
        ("ZADD", k.retained, stamp, tag),
    ]
    call = (store.scripts["create"], keys, [store.request_id(), *turn_block(s, -1, 0)])
    replies = store.scripts.pipelined([call], before)
    try:
        result = saved(replies[-1], s.conversation_id)
    except AgentConversationBusyException:
        if replies[0]:  # the index entry is ours: no turn was created
            store.redis.delete(k.turn_index(s.id))
        raise
    assert isinstance(result, SaveResult)
    messages = tuple(s.messages)
    last = messages[-1].id if messages else ""
    cached = None if s.status.is_terminal else messages
    store.cache.put(s.id, Known(tag, len(messages), last, cached))
    return result


def _new_tag(store: RedisAgentTurnStore, s: AgentTurnSnapshot) -> str:
    """A root's tag from the snapshot; a child's is its parent's (or its root's)."""
    if s.parent_turn_id is None:
        return store.keys.root_tag(s.id, s.conversation_id)
    for ref in (s.parent_turn_id, s.root_turn_id):
        try:
            return store.tag_of(ref)
        except TurnNotFoundError:
            continue
    return store.keys.root_tag(s.root_turn_id, None)


def update(
    store: RedisAgentTurnStore,
    s: AgentTurnSnapshot,
    expected: int,
    children: Sequence[AgentTurnSnapshot],
    release: LeaseRef | None = None,
) -> SaveResult:
    """Compare-and-set update (save.lua), or with new children (save_tree.lua)."""
    tag = store.tag_of(s.id)
    known = store.cache.get(s.id)
    count = len(s.messages)
    stored = known.stored if known is not None and 0 <= known.stored <= count else count
    for _ in range(2):
        result = saved(_save_call(store, tag, s, expected, stored, children, release))
        if isinstance(result, SaveResult):
            _remember_save(store, tag, s, known, stored, children)
            return result
        _check_prefix(s, result)
        stored = result.stored
    raise HistoryRewrittenError(s.id, "the stored message count kept changing")


def _save_call(
    store: RedisAgentTurnStore,
    tag: str,
    s: AgentTurnSnapshot,
    expected: int,
    stored: int,
    children: Sequence[AgentTurnSnapshot],
    release: LeaseRef | None,
) -> object:
    k = store.keys
    keys = k.tag_keys(tag) + k.write_keys(tag, s.id, None)
    block = turn_block(s, expected, stored)
    tail: list[Arg] = list(release) if release is not None else []
    if not children:
        return store.scripts.run("save", keys[:8], [store.request_id(), *block, *tail])
    args: list[Arg] = [store.request_id(), str(len(children)), *block]
    for child in children:
        keys += k.write_keys(tag, child.id, child.parent_turn_id)
        args += turn_block(child, -1, 0)
    args += tail
    # children need their id -> tag index entry, like any created turn, so that a
    # process that did not create them can find them
    index = [("SET", k.turn_index(c.id), tag, "NX") for c in children]
    replies = store.scripts.pipelined([(store.scripts["save_tree"], keys, args)], index)
    if code_of(replies[-1]) not in ("OK", "MISMATCH"):  # nothing created: drop our entries
        ours = [k.turn_index(c.id) for c, set_ in zip(children, replies, strict=False) if set_]
        if ours:
            store.redis.delete(*ours)
    return replies[-1]


def _remember_save(
    store: RedisAgentTurnStore,
    tag: str,
    s: AgentTurnSnapshot,
    known: Known | None,
    stored: int,
    children: Sequence[AgentTurnSnapshot],
) -> None:
    msgs = s.messages
    cached = None
    prefix = known.messages if known is not None else None
    if prefix is not None and len(prefix) == stored and not s.status.is_terminal:
        cached = prefix + tuple(msgs[stored:])
    store.cache.put(s.id, Known(tag, len(msgs), msgs[-1].id if msgs else "", cached))
    for child in children:
        cm = tuple(child.messages)
        store.cache.put(child.id, Known(tag, len(cm), cm[-1].id if cm else "", cm))


def _check_prefix(s: AgentTurnSnapshot, mismatch: Mismatch) -> None:
    """After a count mismatch: the snapshot must still hold the stored messages."""
    n = mismatch.stored
    if len(s.messages) < n or (n and s.messages[n - 1].id != mismatch.last_id):
        raise HistoryRewrittenError(
            s.id, f"save has {len(s.messages)} messages, the {n} stored ones differ"
        )
