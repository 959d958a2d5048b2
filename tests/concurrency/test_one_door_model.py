"""Hundreds of seeded schedules of the one-door model on both stores (thousands: make chaos).

The fan-out schedules kill workers while several calls of one response are in flight.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from runner_core import AgentTurnStore
from tests.support.one_door import check, run_schedule

SCHEDULES = int(os.environ.get("ONE_DOOR_SCHEDULES", "120"))
FANOUT_SCHEDULES = int(os.environ.get("ONE_DOOR_FANOUT_SCHEDULES", "40"))


@pytest.mark.parametrize("block", range(4))
def test_the_one_door_invariants_hold_under_every_interleaving(
    make_store: Callable[[], AgentTurnStore], store_kind: str, block: int
) -> None:
    per_block = max(1, SCHEDULES // 4)
    for seed in range(block * per_block, (block + 1) * per_block):
        report, world, root, store = run_schedule(
            make_store, seed, crash_rate=0.01, blip_rate=0.02, late_rate=0.02
        )
        problems = check(report, world, root, store)
        assert not problems, f"{store_kind} seed {seed}: {problems}\n{report.describe()}"


def test_a_worker_killed_with_calls_in_flight_re_runs_only_those(
    make_store: Callable[[], AgentTurnStore], store_kind: str
) -> None:
    # Each schedule runs one response of FANOUT concurrent calls; workers die at store
    # calls (the commits of the first results among them) while others still run
    crashes_in_flight = 0
    for seed in range(FANOUT_SCHEDULES):
        report, world, root, store = run_schedule(
            make_store, seed, crash_rate=0.08, blip_rate=0.02, kind="fanout"
        )
        problems = check(report, world, root, store)
        assert not problems, f"{store_kind} seed {seed}: {problems}\n{report.describe()}"
        assert store.load(root).status.is_terminal
        crashes_in_flight += world.crashes_in_flight
    assert crashes_in_flight > 0, "no schedule killed a worker with calls in flight"
