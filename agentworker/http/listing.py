"""``GET /turns``: filters, newest first, and an opaque cursor for the next page.

The store's ``list_turns`` gives what it can filter cheaply (status, tree, agent,
conversation, times, parent); the tenant lives in a turn's metadata, so a page's candidates
are loaded one by one until the page is full. A listing looks at most ``SCAN_CAP`` turns of
the store: its newest (the Redis store reads the trees with the newest creations first).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentworker.http.errors import ApiError
from runner_core import AgentTurnSnapshot, AgentTurnStatus, TurnNotFoundError
from runner_core.store import TurnListing

SCAN_CAP = 10_000


class ListQuery(BaseModel):
    """The query string of ``GET /turns``."""

    model_config = ConfigDict(extra="forbid")

    status: AgentTurnStatus | None = None
    agent: str | None = None
    tenant: str | None = Field(default=None, description="Operator credentials only.")
    conversation: str | None = None
    tree: str | None = Field(default=None, description="Only the turns of this root's tree.")
    root_only: bool = False
    created_after: float | None = None
    created_before: float | None = None
    updated_after: float | None = None
    updated_before: float | None = None
    limit: int = Field(default=50, ge=1, le=200)
    cursor: str | None = None

    @classmethod
    def of(cls, params: Mapping[str, str]) -> ListQuery:
        """From query parameters; ``ApiError(422)`` naming a bad one."""
        try:
            return cls.model_validate(dict(params))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "query"
            raise ApiError(422, f"{field}: {first['msg']}", field) from None

    def keeps(self, t: TurnListing) -> bool:
        """True when the listed turn passes every cheap filter."""
        return (
            (self.agent is None or t.agent_id == self.agent)
            and (self.conversation is None or t.conversation_id == self.conversation)
            and (not self.root_only or t.parent_turn_id is None)
            and _within(t.created_at, self.created_after, self.created_before)
            and _within(t.updated_at, self.updated_after, self.updated_before)
        )


@dataclass(frozen=True)
class Page:
    """One page: the snapshots and the cursor of the next page (None at the end)."""

    turns: list[AgentTurnSnapshot]
    next_cursor: str | None


def _within(value: float, after: float | None, before: float | None) -> bool:
    return (after is None or value >= after) and (before is None or value < before)


def encode_cursor(created_at: float, turn_id: str) -> str:
    """An opaque cursor: where the previous page ended."""
    raw = json.dumps([created_at, turn_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The position in a cursor; ``ApiError(422)`` if it is not one of ours."""
    try:
        created_at, turn_id = json.loads(
            base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        )
        return float(created_at), str(turn_id)
    except (ValueError, TypeError, binascii.Error):
        raise ApiError(422, "cursor: not a cursor of this API", "cursor") from None


def list_page(
    store: Any,
    query: ListQuery,
    tenant: str | None,
    load: Callable[[str], AgentTurnSnapshot],
) -> Page:
    """A page of turns, newest first; ``tenant`` None sees every tenant."""
    lister = getattr(store, "list_turns", None)
    if lister is None:
        raise ApiError(422, f"{type(store).__name__} cannot list turns")
    listed: Iterable[TurnListing] = lister(
        status=query.status, root_turn_id=query.tree, limit=SCAN_CAP
    )
    ordered = sorted(
        (t for t in listed if query.keeps(t)),
        key=lambda t: (t.created_at, t.turn_id),
        reverse=True,
    )
    if query.cursor is not None:
        position = decode_cursor(query.cursor)
        ordered = [t for t in ordered if (t.created_at, t.turn_id) < position]
    page: list[AgentTurnSnapshot] = []
    for entry in ordered:
        if len(page) == query.limit:
            last = page[-1]
            return Page(page, encode_cursor(last.created_at, last.id))
        try:
            snapshot = load(entry.turn_id)
        except TurnNotFoundError:
            continue  # expired meanwhile
        if tenant is None or snapshot.metadata.get("tenant_id") == tenant:
            page.append(snapshot)
    return Page(page, None)
