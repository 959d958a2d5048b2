"""The checks every store makes of its arguments before it reads or writes anything.

One function per store method, named after it: the memory store and the Redis store call
the same one at the entry of the method, so both refuse the same bad call with the same
typed error (``InvalidArgumentTypeError`` for a wrong type, ``InvalidArgumentError`` for
a value out of range), naming the argument, and change nothing. The checks are type and
range tests only: what a turn holds was checked by the runner that made it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from runner_core.errors import InvalidArgumentError, InvalidArgumentTypeError
from runner_core.events import AgentEvent
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.status import AgentTurnStatus
from runner_core.store import Commit

#: The longest id a new turn may be given (the HTTP API allows 64).
MAX_ID_CHARS = 256
#: The most items one call may ask for (``limit``).
MAX_LIMIT = 1_000_000


def commit(value: Any) -> None:
    """A ``Commit`` of snapshots and events, a version, a request id, maybe a lease."""
    if not isinstance(value, Commit):
        raise _wrong_type("commit", "a Commit", value)
    _snapshot(value.snapshot, "snapshot")
    version = value.expected_version
    if not _an_int(version):
        raise _wrong_type("expected_version", "an int", version)
    if version < -1:
        raise InvalidArgumentError(
            f"expected_version is {version}; -1 creates", field="expected_version"
        )
    _text(value.request_id, "request_id")
    _lease(value.lease)
    if not _a_sequence(value.children):
        raise _wrong_type("children", "a sequence of snapshots", value.children)
    for child in value.children:
        _snapshot(child, "children")
    _events(value.events)
    if version == -1:
        _new_id(value.snapshot.id)
    for child in value.children:
        _new_id(child.id)


def turn(turn_id: Any, field: str = "turn_id") -> None:
    """One turn id (``load``, ``peek``, ``unmark_queued``, ...)."""
    _text(turn_id, field)


def claim(turn_id: Any, worker_id: Any, now: Any, lease_ms: Any) -> None:
    """``claim``: ids, the clock, a lease of at least one millisecond."""
    _text(turn_id, "turn_id")
    claim_runnable(worker_id, now, lease_ms, 1)


def claim_runnable(worker_id: Any, now: Any, lease_ms: Any, limit: Any) -> None:
    """``claim_runnable``: the worker, the clock, the lease and how many."""
    _text(worker_id, "worker_id")
    _time(now, "now")
    if not _an_int(lease_ms):
        raise _wrong_type("lease_ms", "an int (milliseconds)", lease_ms)
    if lease_ms <= 0:
        raise InvalidArgumentError(
            f"lease_ms is {lease_ms}; a lease lasts 1 ms or more", field="lease_ms"
        )
    count(limit)


def lease(turn_id: Any, worker_id: Any, lease_id: Any) -> None:
    """``release_lease`` (and ``renew_lease`` with ``times``)."""
    _text(turn_id, "turn_id")
    _text(worker_id, "worker_id")
    _text(lease_id, "lease_id")


def renew(turn_id: Any, worker_id: Any, lease_id: Any, now: Any, until: Any) -> None:
    """``renew_lease``: the lease's ids, the clock and the new expiry."""
    lease(turn_id, worker_id, lease_id)
    times(now=now, until=until)


def read_events(root_turn_id: Any, limit: Any) -> None:
    """``read_events``: the tree and how many."""
    _text(root_turn_id, "root_turn_id")
    count(limit)


def due(now: Any, limit: Any) -> None:
    """``due_turn_ids``: the clock and how many."""
    times(now=now)
    count(limit)


def stale(now: Any, older_than: Any, limit: Any) -> None:
    """``stale_turn_ids``: the clock, the age and how many."""
    times(now=now, older_than=older_than)
    count(limit)


def wakeups(now: Any, lost_after: Any, limit: Any) -> None:
    """``wakeups``: the clock, when a wake-up counts as lost, how many."""
    times(now=now, lost_after=lost_after)
    count(limit)


def expiry(older_than_seconds: Any, limit: Any) -> None:
    """``expire_terminal`` (the Redis store's retention): an age or None, how many."""
    if older_than_seconds is not None:
        times(older_than_seconds=older_than_seconds)
    count(limit)


def times(**values: Any) -> None:
    """Finite numbers of seconds, each named by its keyword."""
    for field, value in values.items():
        _time(value, field)


def count(limit: Any, field: str = "limit") -> None:
    """How many items a call may give back: an int from 0 to ``MAX_LIMIT``."""
    if not _an_int(limit):
        raise _wrong_type(field, "an int", limit)
    if not 0 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError(f"{field} is {limit}; it must be 0 to {MAX_LIMIT}", field=field)


def cancellation(turn_id: Any, reason: Any, events: Any) -> None:
    """``request_cancellation``: the turn, a reason or None, the events."""
    _text(turn_id, "turn_id")
    if reason is not None:
        _text(reason, "reason")
    _events(events)


def queued(turn_ids: Any) -> None:
    """``mark_queued``: a sequence of turn ids (one id alone is not one)."""
    if isinstance(turn_ids, str | bytes) or not isinstance(turn_ids, Sequence):
        raise _wrong_type("turn_ids", "a sequence of turn ids", turn_ids)
    for turn_id in turn_ids:
        if not isinstance(turn_id, str):
            raise _wrong_type("turn_ids", "a sequence of turn ids", turn_id, item=True)


def quarantine(turn_id: Any, reason: Any) -> None:
    """``quarantine``: the turn and why."""
    _text(turn_id, "turn_id")
    _text(reason, "reason")


def listing(status: Any, root_turn_id: Any, before: Any, limit: Any = 0) -> None:
    """``list_turns`` and ``iter_turns``: a status, a tree, a position, how many."""
    if status is not None and not isinstance(status, AgentTurnStatus):
        raise _wrong_type("status", "an AgentTurnStatus", status)
    if root_turn_id is not None:
        _text(root_turn_id, "root_turn_id")
    match before:
        case None:
            pass
        case (int() | float() as at, str()) if _a_number(at) and math.isfinite(at):
            pass
        case _:
            raise _wrong_type("before", "a (created at, turn id) position", before)
    count(limit)


def _snapshot(value: Any, field: str) -> None:
    if not isinstance(value, AgentTurnSnapshot):
        raise _wrong_type(field, "an AgentTurnSnapshot", value, item=field == "children")


def _events(events: Any) -> None:
    if not _a_sequence(events):
        raise _wrong_type("events", "a sequence of AgentEvent", events)
    for event in events:
        if not isinstance(event, AgentEvent):
            raise _wrong_type("events", "a sequence of AgentEvent", event, item=True)


def _a_sequence(value: Any) -> bool:
    # a tuple or a list first: the ABC's check costs more than the rest of a commit's
    return type(value) is tuple or type(value) is list or isinstance(value, Sequence)


def _lease(value: Any) -> None:
    match value:
        case None | (str(), str()):
            return
    raise _wrong_type("lease", "None or a (worker id, lease id) pair", value)


def _new_id(turn_id: str) -> None:
    if not 0 < len(turn_id) <= MAX_ID_CHARS:
        raise InvalidArgumentError(
            f"snapshot.id is {len(turn_id)} characters long; a new turn's is 1 to {MAX_ID_CHARS}",
            field="snapshot.id",
        )


def _text(value: Any, field: str) -> None:
    if not isinstance(value, str):
        raise _wrong_type(field, "a string", value)


def _time(value: Any, field: str) -> None:
    if not _a_number(value):
        raise _wrong_type(field, "a number of seconds", value)
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{field} is {value}; it must be finite", field=field)


def _a_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _an_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _wrong_type(
    field: str, wanted: str, value: Any, *, item: bool = False
) -> InvalidArgumentTypeError:
    got = type(value).__name__
    said = f"holds a {got}" if item else f"not {got}"
    return InvalidArgumentTypeError(f"{field} must be {wanted}, {said}", field=field)


__all__ = [
    "MAX_ID_CHARS",
    "MAX_LIMIT",
    "cancellation",
    "claim",
    "claim_runnable",
    "commit",
    "count",
    "due",
    "expiry",
    "lease",
    "listing",
    "quarantine",
    "queued",
    "read_events",
    "renew",
    "stale",
    "times",
    "turn",
    "wakeups",
]
