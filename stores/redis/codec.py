"""Snapshots to script arguments and back: JSON only, schema-versioned, exact floats."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from pydantic import ValidationError

from runner_core.errors import SnapshotCorruptedError
from runner_core.messages import MESSAGE, Message
from runner_core.snapshot import AgentTurnSnapshot, ChildResult, LeaseInfo, load_snapshot
from runner_core.status import AgentTurnStatus
from runner_core.store import TurnListing, waiting_child_ids

Fields = Mapping[str, str]
Arg = str | bytes

#: Snapshot fields the header ``body`` leaves out: the store keeps them apart.
STORE_OWNED = {
    "messages",
    "version",
    "lease",
    "cancel_requested",
    "cancel_reason",
    "child_results",
    "event_sequence",
}


#: Snapshot fields the body leaves out because the header holds them (a field of the
#: header, written with every body or by the creation): a load puts them back. Bodies of
#: earlier records still carry them, and a field a body carries is read from it.
HEADER_HELD = {
    "status": "st",
    "root_turn_id": "root",
    "parent_turn_id": "par",
    "agent_id": "agent",
    "created_at": "ca",
    "updated_at": "ua",
}


def _same(value: Any, empty: Any) -> bool:
    return type(value) is type(empty) and value == empty


_EMPTY: tuple[Any, ...] = (None, 0, False, "", [], {})

#: Snapshot fields a body leaves out while they hold their default, when that default is
#: None, zero, false or empty (a load fills it in again). ``schema_version`` is always
#: written: claim.lua looks for it, and a load checks it.
_OMISSIBLE: tuple[tuple[str, Any], ...] = tuple(
    (name, default)
    for name, info in AgentTurnSnapshot.model_fields.items()
    if name not in STORE_OWNED
    and name not in HEADER_HELD
    and name not in ("schema_version", "id")
    and any(
        _same(default := info.get_default(call_default_factory=True), empty) for empty in _EMPTY
    )
)


_FROM_HEADER = frozenset({"id", *HEADER_HELD})
_NEVER_IN_BODY = STORE_OWNED | _FROM_HEADER
#: The omissible fields read in one go, with the type and value of their default.
_READ_OMISSIBLE = attrgetter(*(name for name, _ in _OMISSIBLE))
_DEFAULTS = tuple((name, type(default), default) for name, default in _OMISSIBLE)

#: Header fields an operator listing reads (HMGET order of ``TurnSummary.of``).
SUMMARY_FIELDS = ("st", "agent", "root", "par", "conv", "v", "ca", "ua", "lo", "lu", "cx")


def text(value: Any) -> str:
    """A reply element as ``str`` (clients may or may not decode responses)."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def fields_of(flat: Sequence[Any]) -> dict[str, str]:
    """An HGETALL reply (flat name, value list) as a dict; ``body`` stays as returned."""
    out: dict[str, str] = {}
    for i in range(0, len(flat), 2):
        name = text(flat[i])
        out[name] = flat[i + 1] if name == "body" else text(flat[i + 1])
    return out


def turn_block(s: AgentTurnSnapshot, expected: int, stored: int) -> list[Arg]:
    """The ARGV block of one turn (see ``_lib.lua``), sending messages after ``stored``.

    Creation time and root are written once, by the creation: an update sends them empty.
    """
    msgs = s.messages
    new = msgs[stored:]
    wait = waiting_child_ids(s)
    root = s.parent_turn_id is None
    creating = expected == -1
    return [
        s.id,
        str(expected),
        body_json(s),
        s.status.value,
        "" if s.next_runnable_at is None else repr(float(s.next_runnable_at)),
        "1" if s.cancel_requested else "0",
        "null" if s.cancel_reason is None else json.dumps(s.cancel_reason),
        str(stored),
        msgs[stored - 1].id if stored else "",
        msgs[-1].id if msgs else "",
        json.dumps(wait) if wait else "",
        repr(float(s.updated_at)),
        repr(float(s.created_at)) if creating else "",
        s.parent_turn_id or "",
        s.root_turn_id if creating else "",
        (s.conversation_id or "") if root else "",
        s.agent_id,
        str(len(new)),
        *(_dump(m) for m in new),
    ]


def body_json(s: AgentTurnSnapshot) -> str:
    """The header ``body``: the snapshot without store-owned fields, header-held and empty ones.

    The id and the fields the header holds (``HEADER_HELD``) are left out, and a field
    holding its default (None, zero, false, empty), which a load fills in again: only
    top-level fields are left out, so nested models and a user's dicts keep every value
    they hold.
    """
    exclude = {
        name
        for (name, kind, default), value in zip(_DEFAULTS, _READ_OMISSIBLE(s), strict=True)
        if type(value) is kind and value == default
    }
    return s.model_dump_json(exclude=exclude | _NEVER_IN_BODY)


def _dump(message: Message) -> bytes:
    """A message as JSON without its unset optional fields (``MESSAGE`` reads it back).

    Every optional field of a message defaults to None, so leaving the Nones out changes
    nothing a load sees; dict values (tool arguments) keep their nulls. The id stays first,
    as the Lua checks of the stored list expect.
    """
    return message.__pydantic_serializer__.to_json(message, exclude_none=True)


def snapshot_of(
    turn_id: str, fields: Mapping[str, Any], messages: list[Message]
) -> AgentTurnSnapshot:
    """A snapshot from header fields and decoded messages; ``SnapshotCorruptedError`` if bad."""
    body = fields.get("body")
    if body is None:
        raise SnapshotCorruptedError(turn_id, "header has no body")
    snapshot = load_snapshot(_with_header(turn_id, body, fields), turn_id)
    try:
        snapshot.version = int(fields["v"])
        snapshot.cancel_requested = fields.get("cx") == "1"
        reason = json.loads(fields.get("cr") or "null")
    except (KeyError, ValueError) as exc:
        raise SnapshotCorruptedError(turn_id, f"bad control fields ({exc})") from exc
    snapshot.cancel_reason = reason if isinstance(reason, str) else None
    snapshot.lease = lease_of(turn_id, fields)
    snapshot.messages = messages
    snapshot.event_sequence = int(fields.get("ev") or 0)
    snapshot.child_results = child_results_of(turn_id, fields)
    return snapshot


def _with_header(turn_id: str, body: Any, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The body as a dict, with the fields it leaves out taken from the header."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotCorruptedError(turn_id, f"not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise SnapshotCorruptedError(turn_id, "not a JSON object")
    data.setdefault("id", turn_id)
    for name, field in HEADER_HELD.items():
        if name not in data and fields.get(field):
            data[name] = fields[field]
    return data


def child_results_of(turn_id: str, fields: Mapping[str, Any]) -> dict[str, ChildResult]:
    """The reported children's results kept in a parent's header (``r:<child id>``)."""
    found: dict[str, ChildResult] = {}
    for name, value in fields.items():
        if name.startswith("r:"):
            try:
                found[name[2:]] = ChildResult.model_validate_json(value)
            except ValidationError as exc:
                raise SnapshotCorruptedError(turn_id, f"bad result of child {name[2:]}") from exc
    return found


def lease_of(turn_id: str, fields: Mapping[str, Any]) -> LeaseInfo | None:
    """The stored lease, if any."""
    owner = fields.get("lo")
    if not owner:
        return None
    try:
        return LeaseInfo(owner=owner, lease_id=fields["lid"], until=float(fields["lu"]))
    except (KeyError, ValueError) as exc:
        raise SnapshotCorruptedError(turn_id, f"bad lease ({exc})") from exc


def messages_of(turn_id: str, raw: Sequence[Any], offset: int = 0) -> list[Message]:
    """Decode message documents; ``offset`` is the index of the first one (for errors)."""
    out: list[Message] = []
    for i, doc in enumerate(raw):
        try:
            out.append(MESSAGE.validate_json(doc))
        except ValidationError as exc:
            raise SnapshotCorruptedError(turn_id, f"message {offset + i} is invalid") from exc
    return out


@dataclass(frozen=True, slots=True)
class TurnSummary(TurnListing):
    """One line of an operator listing (a ``TurnListing`` plus the lease), from a header."""

    lease_owner: str | None = None
    lease_until: float | None = None

    @classmethod
    def of(cls, turn_id: str, values: Sequence[Any]) -> TurnSummary | None:
        """From an HMGET of ``SUMMARY_FIELDS``; None if missing or unreadable."""
        st, agent, root, par, conv, v, ca, ua, lo, lu, cx = (text(x) for x in values)
        try:
            return cls(
                turn_id=turn_id,
                status=AgentTurnStatus(st),
                agent_id=agent,
                root_turn_id=root,
                parent_turn_id=par or None,
                conversation_id=conv or None,
                version=int(v),
                created_at=float(ca),
                updated_at=float(ua),
                cancel_requested=cx == "1",
                lease_owner=lo or None,
                lease_until=float(lu) if lu else None,
            )
        except ValueError:
            return None
