"""commit.lua joins a commit's events from what they share: entries read as written.

A commit sends the fields naming its turn and the common prefixes of its events' ids,
times and data once; the script joins each stream entry back. An entry must be the
document ``stored_event_json`` makes (every field, every value), whatever the events share
or do not share, and an event about another turn goes whole.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from runner_core import AgentEventType, Commit
from runner_core.events import AgentEvent, make_event, stored_event_json
from runner_core.snapshot import AgentTurnSnapshot
from stores.redis import RedisAgentTurnStore
from stores.redis.entries import PER_EVENT, SHARED, event_args
from tests.support.commits import save
from tests.support.stores import child_of, snap

T = AgentEventType


def _entries(store: RedisAgentTurnStore, s: AgentTurnSnapshot) -> list[tuple[int, object]]:
    key = store.keys.events(store.tags.tag_of(s.root_turn_id), s.root_turn_id)
    out = []
    for _, fields in cast(list[tuple[bytes, dict[bytes, bytes]]], store.redis.xrange(key)):
        seq, doc = fields[b"seq"], fields[b"event"]
        out.append((int(seq), json.loads(doc)))
    return out


def _commit(store: RedisAgentTurnStore, s: AgentTurnSnapshot, events: list[AgentEvent]) -> int:
    result = store.commit(Commit(s, s.version, uuid.uuid4().hex, events=tuple(events)))
    return result.first_sequence


def test_entries_joined_from_shared_parts_are_the_documents(
    redis_store: RedisAgentTurnStore,
) -> None:
    s = snap()
    save(redis_store, s, -1)
    s = redis_store.load(s.id)
    events = [
        make_event(s, T.MODEL_COMPLETED, {"tool_calls": ["add"], "text": 'a "quoted" é'}),
        make_event(s, T.STEP_COMPLETED, {}),
        make_event(s, T.SNAPSHOT_SAVED, {"version": s.version + 1, "nested": {"k": None}}),
    ]

    first = _commit(redis_store, s, events)

    entries = _entries(redis_store, s)
    assert [seq for seq, _ in entries] == [first, first + 1, first + 2]
    assert [doc for _, doc in entries] == [json.loads(stored_event_json(e)) for e in events]


def test_a_childs_entries_keep_its_root_and_parent(redis_store: RedisAgentTurnStore) -> None:
    root = snap()
    save(redis_store, root, -1)
    child = child_of(root)
    save(redis_store, child, -1)
    child = redis_store.load(child.id)
    events = [make_event(child, T.STEP_COMPLETED, {}), make_event(child, T.STEP_STARTED, {})]

    _commit(redis_store, child, events)

    docs = [doc for _, doc in _entries(redis_store, root)]
    assert docs == [json.loads(stored_event_json(e)) for e in events]


def test_an_event_about_another_turn_is_sent_whole(redis_store: RedisAgentTurnStore) -> None:
    s, other = snap(), snap()
    save(redis_store, s, -1)
    s = redis_store.load(s.id)
    ours, theirs = make_event(s, T.STEP_COMPLETED, {}), make_event(other, T.STEP_COMPLETED, {})

    args = event_args(s, [ours, theirs])
    _commit(redis_store, s, [ours, theirs])

    assert args[SHARED + PER_EVENT :] == ["", "", "", stored_event_json(theirs)]
    docs = [doc for _, doc in _entries(redis_store, s)]
    assert docs == [json.loads(stored_event_json(ours)), json.loads(stored_event_json(theirs))]


def test_what_the_events_share_is_sent_once() -> None:
    s = snap()
    events = [make_event(s, T.STEP_COMPLETED, {"n": i}) for i in range(3)]

    args = event_args(s, events)

    sent = sum(len(a) for a in args)
    assert sent < sum(len(stored_event_json(e)) for e in events) / 2
    assert sum(s.id.encode() in bytes(a) for a in args if isinstance(a, bytes)) == 1


_SHARING = st.builds(
    lambda base, tails: [base + tail for tail in tails],
    st.binary(max_size=8),
    st.lists(st.binary(max_size=4), max_size=5),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_SHARING, st.lists(st.binary(max_size=12), max_size=5)))
def test_the_shared_prefix_is_the_longest_one(parts: list[bytes]) -> None:
    # the prefix the events share is the longest every part starts with (none for fewer
    # than two), whatever the parts hold: equal, empty, one a prefix of another
    from stores.redis.entries import _common

    want = os.path.commonprefix(parts) if len(parts) > 1 else b""
    assert _common(parts) == want
