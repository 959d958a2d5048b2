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

import os
from collections.abc import Sequence

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
    doc: dict[str, str] = {"turn_id": s.id}
    if s.root_turn_id != s.id:
        doc["root_turn_id"] = s.root_turn_id
    if s.parent_turn_id is not None:
        doc["parent_turn_id"] = s.parent_turn_id
    doc["agent_id"] = s.agent_id
    doc["agent_version"] = s.agent_version
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
    prefix = os.path.commonprefix(parts) if len(parts) > 1 else b""
    return prefix if isinstance(prefix, bytes) else b""


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
