"""How many turns each index holds, summed over the partitions: the metrics' gauge.

One pipelined read of five index sizes per tag that may hold live turns (``ZCARD``/``HLEN``,
each O(1)), in batches: the cost grows with the live turn trees, not with their turns or
steps. For a scrape every few seconds, not for the step path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stores.redis.scanner import _chunks

if TYPE_CHECKING:
    from stores.redis.store import RedisAgentTurnStore

#: What ``turn_counts`` reports (the ``state`` label of ``agentworker_turns``).
STATES = ("live", "runnable", "leased", "waiting_for_children", "quarantined")


def turn_counts(store: RedisAgentTurnStore) -> dict[str, int]:
    """Turns per index: live (not ended), runnable, leased, parents waiting, quarantined."""
    keys = store.keys
    totals = dict.fromkeys(STATES, 0)
    for batch in _chunks(store.scanner.partition_tags()):
        pipe = store.redis.pipeline(transaction=False)
        for tag in batch:
            pipe.zcard(keys.live(tag))
            pipe.zcard(keys.runnable(tag))
            pipe.hlen(keys.leases(tag))
            pipe.hlen(keys.waits(tag))
            pipe.zcard(keys.quarantine(tag))
        sizes = pipe.execute()
        for i, value in enumerate(sizes):
            totals[STATES[i % len(STATES)]] += int(value)
    return totals
