"""Writes for tests that set a stored turn up directly: each one is a ``Commit``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from runner_core import AgentTurnSnapshot, AgentTurnStore, Commit, SaveResult
from runner_core.store import LeaseRef


def save(
    store: AgentTurnStore,
    snapshot: AgentTurnSnapshot,
    expected_version: int,
    release: LeaseRef | None = None,
    *,
    lease: LeaseRef | None = None,
) -> SaveResult:
    """Commit ``snapshot`` without events: create (``expected_version=-1``) or update.

    ``lease``: written as that lease's holder (who keeps it); ``release``: written as its
    holder, who gives it back in the same write.
    """
    writer = release if release is not None else lease
    commit = Commit(snapshot, expected_version, uuid.uuid4().hex, writer, release is not None)
    return store.commit(commit)


def save_tree(
    store: AgentTurnStore,
    parent: AgentTurnSnapshot,
    expected_parent_version: int,
    children: Sequence[AgentTurnSnapshot],
    release: LeaseRef | None = None,
) -> SaveResult:
    """Commit the parent and create ``children`` in one write (see ``save``)."""
    commit = Commit(
        parent,
        expected_parent_version,
        uuid.uuid4().hex,
        release,
        release is not None,
        tuple(children),
    )
    return store.commit(commit)
