"""Helpers for concurrent tool calls: a timing ledger, a commit log, resolved approvals."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runner_core import (
    AgentTurnPhase,
    AgentTurnStatus,
    AgentTurnStore,
    Commit,
    SaveResult,
    ToolMessage,
)
from runner_core.status import move


@dataclass
class Ledger:
    """When each tool call started and ended (monotonic seconds), from any thread."""

    started: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, call_id: str) -> None:
        with self.lock:
            self.started[call_id] = time.monotonic()
            self.runs.append(call_id)

    def end(self, call_id: str) -> None:
        with self.lock:
            self.ended[call_id] = time.monotonic()

    def overlap(self, a: str, b: str) -> bool:
        """Whether calls ``a`` and ``b`` ran at the same time."""
        return self.started[a] < self.ended[b] and self.started[b] < self.ended[a]


class CommitLog:
    """A store that keeps, for each accepted commit, the tool results it saved."""

    def __init__(self, inner: AgentTurnStore) -> None:
        self.inner = inner
        #: Per commit: (the ids of its ToolMessages, the pending call ids it left).
        self.saved: list[tuple[list[str], list[str]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, commit: Commit) -> SaveResult:
        result = self.inner.commit(commit)
        s = commit.snapshot
        answered = [m.call_id for m in s.messages if isinstance(m, ToolMessage)]
        self.saved.append((answered, [c.id for c in s.pending_tool_calls]))
        return result

    def answered_per_commit(self) -> list[list[str]]:
        """The ToolMessages each commit added (commits that added none left out)."""
        out: list[list[str]] = []
        seen: list[str] = []
        for answered, _ in self.saved:
            new = [c for c in answered if c not in seen]
            if new:
                out.append(new)
            seen = answered
        return out


def resolve_approvals(
    store: AgentTurnStore,
    turn_id: str,
    approved: Iterable[str] = (),
    rejected: Mapping[str, str] | None = None,
) -> None:
    """Record approvals and rejections on a turn waiting for approval, all at once.

    Stands in for the batch resume commands: the turn becomes RUNNING in TOOLS with the
    answers in ``approved_call_ids`` / ``rejected_calls``, as those commands leave it.
    """
    st = store.load(turn_id)
    assert st.status is AgentTurnStatus.WAITING_FOR_APPROVAL, st.status
    st.approved_call_ids.extend(approved)
    st.rejected_calls.update(rejected or {})
    move(st, AgentTurnStatus.RUNNING)
    st.phase = AgentTurnPhase.TOOLS
    st.suspension = None
    store.commit(Commit(st, st.version, uuid.uuid4().hex))
