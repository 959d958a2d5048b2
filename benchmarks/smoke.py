"""CI smoke of the two step benches (about 20 s): fails only on a ratio twice its target.

Each ratio is measured within this run, a step against its floor on the same machine (the
in-memory step against a bare loop with a JSON log, the Redis step against one trivial
EVALSHA round trip on the same server), so a slow or busy CI machine moves both sides
alike; no absolute time is ever compared. Exit status 1 names the ratios over the bound.
"""

from __future__ import annotations

import sys

from benchmarks import baseline, redis_bench, step_bench

#: How much looser than its target a ratio may be before the smoke fails.
SLACK = 2.0
CHECKED = ("memory_step_per_bare_loop", "redis_step_per_round_trip")


def main() -> None:
    """Measure, print, and exit 1 if a checked ratio is over ``SLACK`` times its target."""
    figures = step_bench.ratios(turns=300)
    figures.update(redis_bench.ratios(turns=10, rounds=8))
    failed = []
    for name in CHECKED:
        value, target = figures[name], baseline.TARGETS[name]
        ok = target.met(value, SLACK)
        print(
            f"{name}: {value:.2f}x (target {target}, smoke bound {SLACK:g}x of it) "
            f"{'ok' if ok else 'FAILED'}"
        )
        if not ok:
            failed.append(name)
    if failed:
        sys.exit(f"bench smoke: over {SLACK:g}x the target: {', '.join(failed)}")


if __name__ == "__main__":
    main()
