"""The tunable settings a Redis store and its collaborators share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Tuning:
    """Settings read on every call, so a change on the store reaches each collaborator."""

    #: How long a queued wake-up is trusted before the sweeper sends another (seconds):
    #: longer than any backlog should last, short enough to recover a lost message.
    requeue_after: float = 300.0
    #: A tree's event stream keeps about this many entries ...
    stream_maxlen: int = 10_000
    #: ... and lives this many seconds after its root's terminal event.
    stream_ttl: int = 3600
    #: Commits write their events to the tree's stream (False: they are numbered, not
    #: streamed, as with ``AGENTWORKER_EVENTS=false``).
    records_events: bool = True
