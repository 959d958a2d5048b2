"""The sweeper's rows of the census: bad arguments change nothing, a corrupt record only itself.

The entry points of sweeps and housekeeping (``sweep_once``, ``housekeep``, the Redis
store's retention calls) refuse a bad argument with a typed error naming it before they
read anything. A record they meet that cannot be read, or an index entry whose record is
gone, costs its own turn and nothing else: the sweep goes on with the others, ends, and
does not meet the same record again and again.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from agentworker.fleet.housekeeping import housekeep
from agentworker.fleet.stepping import sweep_once
from runner_core import (
    AgentRunner,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AgentTurnStore,
    AgentWorkerError,
    InMemoryAgentTurnStore,
    SnapshotCorruptedError,
)
from stores import RedisAgentTurnStore
from tests.support.census import SWEEPS, SweepCase, SweepScene
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap, waiting_for

S = AgentTurnStatus


@pytest.mark.parametrize("case", SWEEPS, ids=[case.id for case in SWEEPS])
def test_a_bad_argument_is_refused_before_anything_is_read(
    store: AgentTurnStore, case: SweepCase
) -> None:
    if case.redis_only and not isinstance(store, RedisAgentTurnStore):
        pytest.skip("only the Redis store keeps ended turns for housekeeping")
    scene = SweepScene.on(store)
    before = scene.state()

    with pytest.raises(case.error) as caught:
        case.act(scene)

    assert isinstance(caught.value, AgentWorkerError)
    assert getattr(caught.value, "field", None) == case.field
    assert len(str(caught.value)) < 300
    assert scene.state() == before


def an_unreported_child(store: AgentTurnStore) -> tuple[AgentTurnSnapshot, AgentTurnSnapshot]:
    """A parent waiting on a child that ended without reporting (as in older records)."""
    parent = snap()
    save(store, parent, -1)
    child = child_of(parent)
    save_tree(store, parent, 0, [child])
    child.status = S.COMPLETED
    save(store, child, 0)
    waiting_for(parent, child)
    parent.version = 1
    save(store, parent, 1)
    return parent, child


def spoil(store: RedisAgentTurnStore, turn_id: str, how: str) -> None:
    header = store.keys.header(store.tag_of(turn_id), turn_id)
    match how:
        case "body":
            store.redis.hset(header, "body", "{not json")
        case "status":
            store.redis.hset(header, "st", "BOGUS")
        case "gone":
            store.redis.delete(header)


@pytest.mark.parametrize("how", ["body", "status", "gone"])
def test_a_corrupt_child_in_the_repair_scan_costs_only_its_parent(
    redis_store: RedisAgentTurnStore, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given two parents whose children's results never reached them, one child spoiled
    runner = AgentRunner(turn_store=redis_store, dispatcher=lambda turn_id: None)
    _, bad_child = an_unreported_child(redis_store)
    good_parent, _ = an_unreported_child(redis_store)
    spoil(redis_store, bad_child.id, how)

    # When the sweeper runs the repair scan, twice
    with caplog.at_level(logging.ERROR):
        first = sweep_once(runner, 0.0, repair=True)
        second = sweep_once(runner, 0.0, repair=True)

    # Then the good parent got its result, and the spoiled child was set aside once
    assert first.repaired == 1 and second.repaired == 0
    assert redis_store.load(good_parent.id).all_children_reported()
    quarantined = [t for t, _, _ in redis_store.quarantined()]
    assert quarantined == ([] if how == "gone" else [bad_child.id])
    assert sum("quarantined" in r.getMessage() for r in caplog.records) == (how != "gone")


class SpoiledChild:
    """A store whose ``report_child`` finds one child's record spoiled."""

    def __init__(self, inner: InMemoryAgentTurnStore, spoiled: str) -> None:
        self.inner, self.spoiled = inner, spoiled

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def report_child(self, child_turn_id: str) -> bool:
        if child_turn_id == self.spoiled:
            raise SnapshotCorruptedError(child_turn_id, "spoiled")
        return self.inner.report_child(child_turn_id)


def test_the_repair_goes_on_past_a_spoiled_child_on_the_memory_store() -> None:
    inner = InMemoryAgentTurnStore()
    _, bad_child = an_unreported_child(inner)
    good_parent, _ = an_unreported_child(inner)
    runner = AgentRunner(turn_store=SpoiledChild(inner, bad_child.id))  # type: ignore[arg-type]

    assert runner.repair() == 1

    assert inner.load(good_parent.id).all_children_reported()
    assert [t for t, _, _ in inner.quarantined()] == [bad_child.id]


def test_an_index_entry_whose_record_is_gone_is_woken_once_at_most(
    redis_store: RedisAgentTurnStore,
) -> None:
    # Given three READY turns whose wake-ups were lost, one record deleted behind the index
    scene = SweepScene.on(redis_store)
    gone, *others = scene.turn_ids
    spoil(redis_store, gone, "gone")
    time.sleep(0.02)

    # When two sweeps run, the marks of the first cleared as if its messages were lost
    sweep_once(scene.runner, 0.0)
    first = list(scene.sent)
    scene.sent.clear()
    redis_store.forget_queued(redis_store.now() + 1000)
    time.sleep(0.02)  # the runnable again from now: a sweep a moment later finds them
    sweep_once(scene.runner, 0.0)

    # Then the others are woken each time, the vanished one never
    assert sorted(first) == sorted(others)
    assert sorted(scene.sent) == sorted(others)
    tag = redis_store.tag_of(others[0])
    assert redis_store.redis.zscore(redis_store.keys.runnable(tag), gone) is None


@pytest.mark.parametrize("how", ["body", "status", "gone"])
def test_housekeeping_goes_on_past_a_corrupt_ended_turn(
    redis_store: RedisAgentTurnStore, how: str
) -> None:
    ended = []
    for _ in range(3):
        turn = snap()
        save(redis_store, turn, -1)
        turn.status, turn.final_output = S.COMPLETED, "done"
        save(redis_store, turn, 0)
        ended.append(turn.id)
    spoil(redis_store, ended[0], how)
    time.sleep(0.05)

    report = housekeep(redis_store, 0.01)
    again = housekeep(redis_store, 0.01)

    assert report.expired >= 2 and again.expired == 0
    for turn_id in ended[1:]:
        with pytest.raises(AgentWorkerError):
            redis_store.load(turn_id)


def test_every_sweep_row_is_in_the_docs() -> None:
    table = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    for case in SWEEPS:
        entry, bad = case.row.split(": ", 1)
        wanted = f"| `{entry}` | {bad} | `{case.error.__name__}` `{case.field}` |"
        assert wanted in table, case.id
