"""Hundreds of seeded schedules of the one-door model on both stores (thousands: make chaos)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from runner_core import AgentTurnStore
from tests.support.one_door import check, run_schedule

SCHEDULES = int(os.environ.get("ONE_DOOR_SCHEDULES", "120"))


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
