"""A commit sends only the keys it uses, and every key when the stored turn needs them.

commit.lua checks, before it writes, that it has every key the write uses. When the
stored turn needs one the commit thought unused (a parent that waited on children, whose
snapshot no longer says so), the script writes nothing and answers NEED_KEYS, and the
commit is sent again with every key.
"""

from __future__ import annotations

import uuid

from runner_core import AgentEventType, AgentTurnStatus, Commit
from runner_core.events import make_event
from runner_core.snapshot import Suspension, SuspensionType
from stores.redis import RedisAgentTurnStore
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap

S = AgentTurnStatus


def test_a_plain_update_sends_four_keys(redis_store: RedisAgentTurnStore) -> None:
    s = snap()
    save(redis_store, s, -1)
    s = redis_store.load(s.id)
    tag, k = redis_store.tags.tag_of(s.id), redis_store.keys
    events = (make_event(s, AgentEventType.STEP_COMPLETED, {}),)

    keys, args, *_ = redis_store.writer.plan(tag, Commit(s, s.version, "r", events=events), 1)

    assert keys == [
        k.runnable(tag),
        k.header(tag, s.id),
        k.messages(tag, s.id),
        k.events(tag, s.id),
    ]
    assert args[13] == "1,7,8,10"


def test_a_parent_done_waiting_is_written_with_every_key(
    redis_store: RedisAgentTurnStore,
) -> None:
    # Given a parent waiting on a child, which has reported
    parent = snap(status=S.RUNNING)
    save(redis_store, parent, -1)
    parent = redis_store.load(parent.id)
    child = child_of(parent)
    parent.status = S.WAITING_FOR_CHILD
    parent.suspension = Suspension(type=SuspensionType.CHILD, correlation_id=child.id)
    save_tree(redis_store, parent, parent.version, [child])
    tag = redis_store.tags.tag_of(parent.id)
    waits = redis_store.keys.waits(tag)
    assert redis_store.redis.hexists(waits, parent.id)

    # When it goes on without the wait, its snapshot naming no child nor result
    parent = redis_store.load(parent.id)
    parent.status, parent.suspension, parent.child_results = S.RUNNING, None, {}
    result = redis_store.commit(Commit(parent, parent.version, uuid.uuid4().hex))

    # Then the write settled what the stored turn waited on, through the real keys
    assert result.version == parent.version + 1
    assert not redis_store.redis.hexists(waits, parent.id)
    assert redis_store.load(parent.id).status is S.RUNNING
