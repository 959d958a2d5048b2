"""``GET /turns``: filters, newest first, and an opaque cursor for the next page.

The store's ``list_turns`` gives what it can filter cheaply (status, tree, agent,
conversation, times, parent), newest first from a position (the cursor); the tenant lives
in a turn's metadata, so a page's candidates are loaded one by one until the page is full.
A page looks at ``SCAN_CAP`` turns at most, and comes back short (with a cursor to go on)
when its filters matched too few of them: every turn of the store can be reached.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentworker.http.errors import ApiError
from runner_core import AgentTurnSnapshot, AgentTurnStatus, TurnNotFoundError
from runner_core.errors import shorten
from runner_core.store import TurnListing

#: Turns one page looks at, at most (a page whose filters match fewer comes back short).
SCAN_CAP = 10_000
#: The longest parameter name an error names as its ``field`` (longer: ``"query"``).
MAX_PARAMETER_CHARS = 64


class ListQuery(BaseModel):
    """The query string of ``GET /turns``."""

    model_config = ConfigDict(extra="forbid")

    status: AgentTurnStatus | None = None
    agent: str | None = None
    tenant: str | None = Field(default=None, description="Operator credentials only.")
    conversation: str | None = None
    tree: str | None = Field(default=None, description="Only the turns of this root's tree.")
    root_only: bool = False
    created_after: float | None = Field(default=None, allow_inf_nan=False)
    created_before: float | None = Field(default=None, allow_inf_nan=False)
    updated_after: float | None = Field(default=None, allow_inf_nan=False)
    updated_before: float | None = Field(default=None, allow_inf_nan=False)
    limit: int = Field(default=50, ge=1, le=200)
    cursor: str | None = None

    @classmethod
    def of(cls, params: Mapping[str, str]) -> ListQuery:
        """From query parameters; ``ApiError(422)`` naming a bad one."""
        try:
            return cls.model_validate(dict(params))
        except ValidationError as exc:
            first = exc.errors()[0]
            name = ".".join(str(p) for p in first["loc"]) or "query"
            if len(name) > MAX_PARAMETER_CHARS:  # an unknown parameter: never echoed whole
                raise ApiError(422, f"{shorten(name)}: {first['msg']}", "query") from None
            raise ApiError(422, f"{name}: {first['msg']}", name) from None

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
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        value = None
    match value:
        case [int() | float() as created_at, str() as turn_id] if _a_time(created_at):
            return float(created_at), turn_id
    raise ApiError(422, "cursor: not a cursor of this API", "cursor")


def _a_time(value: float) -> bool:
    return not isinstance(value, bool) and math.isfinite(value)


def list_page(
    store: Any,
    query: ListQuery,
    tenant: str | None,
    load: Callable[[str], AgentTurnSnapshot],
) -> Page:
    """A page of turns, newest first; ``tenant`` None sees every tenant.

    Walks the store's listing (``iter_turns``) from the cursor on. A page looks at
    ``SCAN_CAP`` turns at most: if its filters matched too few of them, it comes back short,
    with a cursor from where it stopped.
    """
    walk = getattr(store, "iter_turns", None)
    if walk is None:
        raise ApiError(422, f"{type(store).__name__} cannot list turns")
    position = decode_cursor(query.cursor) if query.cursor is not None else None
    if query.created_before is not None:
        start = (query.created_before, "")  # older than created_before, whatever the id
        position = start if position is None else min(position, start)
    page: list[AgentTurnSnapshot] = []
    listed: Iterator[TurnListing] = walk(
        status=query.status, root_turn_id=query.tree, before=position
    )
    for looked, entry in enumerate(listed):
        if len(page) == query.limit:
            return Page(page, encode_cursor(page[-1].created_at, page[-1].id))
        if query.created_after is not None and entry.created_at < query.created_after:
            break  # newest first: nothing older can match
        if looked == SCAN_CAP:
            return Page(page, encode_cursor(*position)) if position else Page(page, None)
        position = (entry.created_at, entry.turn_id)
        snapshot = _matching(entry, query, tenant, load)
        if snapshot is not None:
            page.append(snapshot)
    return Page(page, None)


def _matching(
    entry: TurnListing,
    query: ListQuery,
    tenant: str | None,
    load: Callable[[str], AgentTurnSnapshot],
) -> AgentTurnSnapshot | None:
    """The listed turn's snapshot if it passes the query and belongs to ``tenant``."""
    if not query.keeps(entry):
        return None
    try:
        snapshot = load(entry.turn_id)
    except TurnNotFoundError:
        return None  # expired meanwhile
    if tenant is None or snapshot.metadata.get("tenant_id") == tenant:
        return snapshot
    return None
