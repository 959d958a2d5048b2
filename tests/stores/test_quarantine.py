"""Corrupt records are quarantined once: moved out of every index, listed, never re-sent."""

from __future__ import annotations

import logging
import time

import pytest

from agentworker.fleet.stepping import step_once, sweep_once
from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    SnapshotCorruptedError,
)
from runner_core.store import Commit
from stores import RedisAgentTurnStore
from stores.redis.counts import turn_counts
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap, waiting_for


def runner_on(store: RedisAgentTurnStore, sent: list[str]) -> AgentRunner:
    agent = Agent("plain", FunctionModel(lambda r: AiMessage("hi")))
    return AgentRunner(
        turn_store=store, agent_loader=InMemoryAgentLoader([agent]), dispatcher=sent.append
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("body", "{not json"),
        ("body", '{"schema_version":7}'),
        # passes the claim script's quick look: the worker's parse finds it
        ("body", '{"schema_version":1,"id":"x","nonsense":true}'),
        ("st", "BOGUS"),
        ("sv", "99"),
    ],
)
def test_a_corrupt_turn_is_quarantined_once_and_never_sent_again(
    redis_store: RedisAgentTurnStore, caplog: pytest.LogCaptureFixture, field: str, value: str
) -> None:
    sent: list[str] = []
    runner = runner_on(redis_store, sent)
    bad = runner.start("plain", "hi")
    good = runner.start("plain", "hi")
    redis_store.unmark_queued(bad.id)  # as if its wake-up was lost
    tag = redis_store.tag_of(bad.id)
    redis_store.redis.hset(redis_store.keys.header(tag, bad.id), field, value)
    sent.clear()
    time.sleep(0.02)  # the sweeper's estimate of the server clock is good to a millisecond

    with caplog.at_level(logging.ERROR, logger="stores.redis"):
        sweep_once(runner, lost_after=0.0)
        assert sent == [bad.id]
        assert step_once(runner, bad.id, "w1") == "quarantined"
        for _ in range(3):
            sweep_once(runner, lost_after=0.0)

    assert sent == [bad.id]  # sent once, never again
    assert sum("quarantined" in r.message for r in caplog.records) == 1
    [(turn_id, reason, _)] = redis_store.quarantined()
    assert turn_id == bad.id and reason
    assert step_once(runner, good.id, "w1") == "COMPLETED"  # the others go on
    assert redis_store.claim_runnable("w2", redis_store.now(), 1000, 10) == []


def plain_runner(store: AgentTurnStore, sent: list[str], lease: float = 30.0) -> AgentRunner:
    agent = Agent("plain", FunctionModel(lambda r: AiMessage("hi")))
    return AgentRunner(
        turn_store=store,
        agent_loader=InMemoryAgentLoader([agent]),
        dispatcher=sent.append,
        policy=AgentExecutionPolicy(lease_seconds=lease),
    )


def test_a_quarantined_turn_is_never_claimed_queued_or_woken(store: AgentTurnStore) -> None:
    sent: list[str] = []
    runner = plain_runner(store, sent)
    bad = runner.start("plain", "hi")
    good = runner.start("plain", "hi")
    assert store.quarantine(bad.id, "spoiled") is True  # type: ignore[attr-defined]
    assert store.quarantine(bad.id, "again") is False  # type: ignore[attr-defined]
    version = store.peek(bad.id).version

    with pytest.raises(SnapshotCorruptedError):
        store.claim(bad.id, "w1", store.now(), 1000)
    store.unmark_queued(bad.id)  # a marked dispatch that failed
    store.mark_queued([bad.id])
    store.unmark_queued(bad.id)
    store.forget_queued(store.now() + 1000)
    with pytest.raises(SnapshotCorruptedError):
        store.request_cancellation(bad.id, "stop")
    woken = 0
    for _ in range(5):
        found = store.wakeups(store.now() + 1000, 0.0)
        woken += found.due.count(bad.id) + found.lost.count(bad.id)
        assert store.stale_turn_ids(store.now() + 1000, 0.0).count(bad.id) == 0

    assert woken == 0
    later = store.now() + 1000
    assert [s.id for s in store.claim_runnable("w2", later, 1000, 10)] == [good.id]
    assert store.peek(bad.id).version == version
    [(turn_id, reason, _)] = store.quarantined()  # type: ignore[attr-defined]
    assert (turn_id, reason) == (bad.id, "spoiled")


def test_a_commit_on_a_quarantined_turn_is_refused(store: AgentTurnStore) -> None:
    runner = plain_runner(store, [])
    turn = runner.start("plain", "hi")
    snapshot = store.load(turn.id)
    store.quarantine(turn.id, "spoiled")  # type: ignore[attr-defined]

    with pytest.raises(SnapshotCorruptedError):
        store.commit(Commit(snapshot, snapshot.version, request_id="r1"))
    assert store.peek(turn.id).version == snapshot.version


def test_a_duplicate_wake_up_after_the_lease_ran_out_claims_nothing(
    redis_store: RedisAgentTurnStore,
) -> None:
    # Given a turn whose body passes the claim's quick look but not the worker's parse
    sent: list[str] = []
    runner = plain_runner(redis_store, sent, lease=0.2)
    bad = runner.start("plain", "hi")
    tag = redis_store.tag_of(bad.id)
    k, r = redis_store.keys, redis_store.redis
    r.hset(k.header(tag, bad.id), "body", '{"schema_version":1,"id":"x","nonsense":true}')
    assert step_once(runner, bad.id, "w1") == "quarantined"
    version = r.hget(k.header(tag, bad.id), "v")

    # When a duplicate wake-up arrives after the first claim's lease ran out
    time.sleep(0.3)
    assert step_once(runner, bad.id, "w2") == "quarantined"
    redis_store.unmark_queued(bad.id)  # and a failed marked dispatch

    # Then nothing claimed it, it is in no index, and no sweep wakes it
    assert r.hget(k.header(tag, bad.id), "v") == version
    assert r.zscore(k.runnable(tag), bad.id) is None
    assert r.hget(k.leases(tag), bad.id) is None
    assert r.zscore(k.live(tag), bad.id) is None
    sent.clear()
    for _ in range(5):
        sweep_once(runner, lost_after=0.0)
    assert sent.count(bad.id) == 0


def counts_of(store: AgentTurnStore) -> dict[str, int]:
    if isinstance(store, RedisAgentTurnStore):
        return turn_counts(store)
    assert isinstance(store, InMemoryAgentTurnStore)
    return store.turn_counts()


def test_a_quarantined_parent_leaves_every_index_and_its_children_wake_nothing(
    store: AgentTurnStore,
) -> None:
    parent = snap()
    save(store, parent, -1)
    kid = child_of(parent)
    waiting_for(parent, kid)
    save_tree(store, parent, 0, [kid])
    assert counts_of(store)["waiting_for_children"] == 1

    store.quarantine(parent.id, "spoiled")  # type: ignore[attr-defined]
    counts = counts_of(store)
    assert (counts["waiting_for_children"], counts["quarantined"], counts["live"]) == (0, 1, 1)
    kid.status = AgentTurnStatus.COMPLETED
    kid.final_output = "done"
    woken = save(store, kid, 0).parent_woken

    assert counts_of(store)["live"] == 0
    assert store.wakeups(store.now() + 1000, 0.0).lost == []
    assert not woken or store.claim_runnable("w", store.now() + 1000, 1000, 10) == []
