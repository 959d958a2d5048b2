"""A commit's events as commit.lua assembles them into stream entries.

What every event of a commit repeats is sent once: the fields naming the turn (its id, root,
parent, agent and version) and the prefixes the events' ids, times and data have in common
(a process numbers its event ids from one prefix; the events of a step share a time and
open their data alike). The script joins the pieces back into the document
``stored_event_json`` writes (same fields, same order), so readers see no difference. An
event about another turn, or one with fields a committed event of the turn does not have,
is sent whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from pydantic_core import to_json

from runner_core.events import AgentEvent, json_default, stored_event_json
from runner_core.snapshot import AgentTurnSnapshot
from stores.redis.codec import Arg

#: ARGV entries before the events: the three common prefixes and the shared fields.
SHARED = 4
#: ARGV entries per event.
PER_EVENT = 4


def shared_fields(s: AgentTurnSnapshot) -> bytes:
    """The fields naming the turn, as they stand in its stored events (no braces)."""
    return _naming(s.id, s.root_turn_id, s.parent_turn_id, s.agent_id, s.agent_version)


@lru_cache(maxsize=1024)  # a turn's commits all send the same
def _naming(turn_id: str, root: str, parent: str | None, agent: str, version: str) -> bytes:
    doc: dict[str, str] = {"turn_id": turn_id}
    if root != turn_id:
        doc["root_turn_id"] = root
    if parent is not None:
        doc["parent_turn_id"] = parent
    doc["agent_id"] = agent
    doc["agent_version"] = version
    return to_json(doc)[1:-1]


def _fits(s: AgentTurnSnapshot, e: AgentEvent) -> bool:
    return (
        e.turn_id == s.id
        and e.root_turn_id == s.root_turn_id
        and e.parent_turn_id == s.parent_turn_id
        and e.agent_id == s.agent_id
        and e.agent_version == s.agent_version
        and not e.provisional
        and e.attempt is None
        and isinstance(e.data, dict)
    )


def _common(parts: list[bytes]) -> bytes:
    """The longest prefix of every part (none for fewer than two), by halving its length."""
    if len(parts) < 2:
        return b""
    low, high = min(parts), max(parts)  # what the least and the greatest share, all share
    if low == high:
        return low
    fits, over = 0, min(len(low), len(high)) + 1
    while over - fits > 1:
        mid = (fits + over) // 2
        if high.startswith(low[:mid]):
            fits = mid
        else:
            over = mid
    return low[:fits]


def event_args(s: AgentTurnSnapshot, events: Sequence[AgentEvent]) -> list[Arg]:
    """ARGV of the events of a commit of ``s`` (see commit.lua's header)."""
    fits = [_fits(s, e) for e in events]
    fitting = [e for e, fit in zip(events, fits, strict=True) if fit]
    ids = [e.event_id.encode() for e in fitting]
    times = [to_json(e.occurred_at) for e in fitting]
    data = [to_json(e.data, fallback=json_default) for e in fitting]
    prefixes = [_common(ids), _common(times), _common(data)]
    args: list[Arg] = [*prefixes, shared_fields(s)]
    cut = [len(p) for p in prefixes]
    at = 0
    for e, fit in zip(events, fits, strict=True):
        if not fit:
            args += ["", "", "", stored_event_json(e)]
            continue
        args += [
            ids[at][cut[0] :],
            e.type.value,
            times[at][cut[1] :],
            data[at][cut[2] :],
        ]
        at += 1
    return args
