"""The figures of the last release (``baseline.json``) and the targets, beside this run's.

Each bench prints what it measured next to the baseline's figure for the same name, so a
regression shows in the next run. Ratios measured within one run (a step against a floor
measured beside it on the same machine) are what targets and the CI smoke compare; the
absolute figures are printed for people.

Updating: with each release, run ``make bench`` on the reference machine and copy the
printed figures into ``baseline.json`` (``python -m benchmarks.baseline --write`` writes
those the step benches measure), noting the machine and the date in its ``measured`` entry.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("baseline.json")


@dataclass(frozen=True)
class Target:
    """A ratio's bound: at most ``most`` (or at least ``least``) of its floor."""

    most: float | None = None
    least: float | None = None

    def met(self, value: float, slack: float = 1.0) -> bool:
        """Whether ``value`` meets the target, ``slack`` times looser."""
        if self.most is not None and value > self.most * slack:
            return False
        return not (self.least is not None and value < self.least / slack)

    def __str__(self) -> str:
        return f"<= {self.most:g}" if self.most is not None else f">= {self.least:g}"


#: The targets of the ratios the benches measure (each against a floor in the same run).
TARGETS = {
    "memory_step_per_bare_loop": Target(most=12.0),
    "redis_step_per_round_trip": Target(most=3.0),
    "redis_round_trips_per_step": Target(most=1.2),
    "redis_bytes_per_step": Target(most=2000.0),
    "redis_history_400_per_10": Target(most=1.2),
    "fleet_one_step_per_noop": Target(least=0.7),
    "fleet_chained_per_noop": Target(least=1.3),
}


def load() -> dict[str, Any]:
    """The recorded figures ({} if the file is missing or unreadable)."""
    try:
        figures: dict[str, Any] = json.loads(PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return figures


def line(name: str, value: float, unit: str = "") -> str:
    """One printed figure: this run, the baseline's, and the target if it has one."""
    recorded = load().get("figures", {}).get(name)
    text = f"  {name}: {value:,.2f}{unit}"
    if isinstance(recorded, int | float):
        text += f"  (baseline {recorded:,.2f}{unit}, {value / recorded:.2f}x of it)"
    target = TARGETS.get(name)
    if target is not None:
        text += f"  target {target} -> {'met' if target.met(value) else 'NOT met'}"
    return text


def write(figures: dict[str, float]) -> None:
    """Record ``figures`` in ``baseline.json`` (others kept)."""
    data = load()
    data.setdefault("figures", {}).update({k: round(v, 3) for k, v in figures.items()})
    PATH.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def main() -> None:
    """``--write``: measure the two step benches briefly and record their figures."""
    if "--write" not in sys.argv:
        sys.exit("usage: python -m benchmarks.baseline --write")
    from benchmarks import redis_bench, step_bench

    figures = step_bench.ratios(turns=100)
    figures.update(redis_bench.ratios(turns=10, rounds=4))
    write(figures)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
