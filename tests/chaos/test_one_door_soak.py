"""Soak: 1,000 seeded one-door schedules per store (2,000 in all), more crashes and blips."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner_core import AgentTurnStore, InMemoryAgentTurnStore
from stores import RedisAgentTurnStore
from tests.support.one_door import check, run_schedule
from tests.support.servers import RedisServer

pytestmark = pytest.mark.chaos

SCHEDULES = int(os.environ.get("ONE_DOOR_SOAK", "1000"))


@pytest.fixture(params=["memory", "redis"])
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], AgentTurnStore]]:
    if request.param == "memory":
        shared = InMemoryAgentTurnStore(keep_events=True)
        yield lambda: shared
        return
    server = RedisServer(tmp_path, fsync="everysec").start()
    made: list[RedisAgentTurnStore] = []

    def make() -> AgentTurnStore:
        made.append(RedisAgentTurnStore(server.url, namespace="soak"))
        return made[-1]

    yield make
    for store in made:
        store.close()
    server.stop()


@pytest.mark.timeout(1800)
def test_thousands_of_schedules_keep_every_invariant(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    failures: list[str] = []
    for seed in range(10_000, 10_000 + SCHEDULES):
        report, world, root, store = run_schedule(
            make_store, seed, crash_rate=0.03, blip_rate=0.05, late_rate=0.02
        )
        problems = check(report, world, root, store)
        if problems:
            failures.append(f"seed {seed}: {problems}\n{report.describe(10)}")
    assert not failures, "\n\n".join(failures[:5])
