"""The store rows of the census: a store method called with a bad argument changes nothing.

Each case of ``tests.support.census.STORE`` runs on the memory store, Redis and the
cluster: a typed error of ours naming the argument, a short message, and the store as it
was (the turn, its lease and marks, what a sweep would wake, the quarantine, the events).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runner_core import AgentTurnStore, AgentWorkerError, InvalidArgumentTypeError
from stores import RedisAgentTurnStore
from tests.support.census import STORE, StoreCase, StoreScene


@pytest.fixture
def scene(store: AgentTurnStore) -> StoreScene:
    return StoreScene.on(store)


@pytest.mark.parametrize("case", STORE, ids=[case.id for case in STORE])
def test_a_bad_argument_is_refused_typed_and_changes_nothing(
    scene: StoreScene, case: StoreCase
) -> None:
    before = scene.state()

    with pytest.raises(case.error) as caught:
        case.act(scene)

    error = caught.value
    assert isinstance(error, AgentWorkerError)
    assert getattr(error, "field", None) == case.field
    assert case.field.split(".")[0] in str(error)
    assert len(str(error)) < 300, str(error)[:400]
    assert scene.state() == before


def test_good_arguments_still_pass(scene: StoreScene) -> None:
    store, now = scene.store, scene.store.now()
    assert store.claim_runnable("w1", now, 1000, 0) == []
    assert store.read_events(scene.turn_id, 0) == []
    assert store.quarantined(0) == []
    store.mark_queued((scene.turn_id,))
    store.unmark_queued(scene.turn_id)
    claimed = store.claim(scene.turn_id, "w1", now, 1000)
    assert claimed is not None and claimed.lease is not None
    assert store.renew_lease(scene.turn_id, "w1", claimed.lease.lease_id, now, now + 5)


def test_every_store_row_is_in_the_docs() -> None:
    table = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    for case in STORE:
        entry, bad = case.row.split(": ", 1)
        wanted = f"| `{entry}` | {bad} | `{case.error.__name__}` `{case.field}` |"
        assert wanted in table, case.id


ASYNC_CASES = [
    ("acommit", ("x",), "commit"),
    ("aload", (None,), "turn_id"),
    ("arequest_cancellation", ("t", 5), "reason"),
    ("achildren_of", (7,), "parent_turn_id"),
]


@pytest.mark.parametrize(("method", "args", "field"), ASYNC_CASES, ids=[c[0] for c in ASYNC_CASES])
def test_the_async_twins_make_the_same_checks(
    redis_store: RedisAgentTurnStore, method: str, args: tuple[object, ...], field: str
) -> None:
    scene = StoreScene.on(redis_store)
    before = scene.state()

    with pytest.raises(AgentWorkerError) as caught:
        asyncio.run(getattr(redis_store, method)(*args))

    assert isinstance(caught.value, InvalidArgumentTypeError)
    assert caught.value.field == field
    assert scene.state() == before
