"""Listings page through every stored turn, newest first, on every store."""

from __future__ import annotations

import time
from typing import Any

from runner_core import AgentTurnStatus
from runner_core.store import AgentTurnStore
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap, waiting_for

S = AgentTurnStatus


def _store_trees(store: AgentTurnStore, trees: int) -> list[tuple[float, str]]:
    """Roots created in threes at one time (ties), and late children in some old trees."""
    base = time.time() - 10_000
    made: list[tuple[float, str]] = []
    roots = []
    for i in range(trees):
        root = snap(created_at=base + i // 3, status=S.READY if i % 2 else S.WAITING_FOR_USER)
        save(store, root, -1)
        roots.append(root)
        made.append((root.created_at, root.id))
    for j, root in enumerate(roots[: trees // 10]):
        kid = child_of(root, created_at=base + trees + j // 2)
        waiting_for(root, kid)
        save_tree(store, root, 0, [kid])
        made.append((kid.created_at, kid.id))
    return sorted(made, reverse=True)


def _pages(store: Any, size: int, **filters: Any) -> list[str]:
    seen: list[str] = []
    before = None
    while page := store.list_turns(limit=size, before=before, **filters):
        seen += [t.turn_id for t in page]
        before = (page[-1].created_at, page[-1].turn_id)
    return seen


def test_pages_of_a_listing_are_every_turn_newest_first_once(store: AgentTurnStore) -> None:
    # Given 450 trees (more than a scan batch), ties in creation time, and late children
    expected = _store_trees(store, 450)

    # When the listing is read page by page from the end of the previous one
    # Then every turn comes once, newest first by (created at, id), ties included
    assert _pages(store, 7) == [turn_id for _, turn_id in expected]
    assert [t.turn_id for t in store.list_turns(limit=20)] == [i for _, i in expected[:20]]

    # And from any position on, what is older, also with a status filter
    middle = expected[200]
    rest = [t.turn_id for t in store.iter_turns(before=middle)]  # type: ignore[attr-defined]
    assert rest == [turn_id for _, turn_id in expected[201:]]
    ready = {t.turn_id for t in store.list_turns(S.READY, limit=10_000)}  # type: ignore[attr-defined]
    assert _pages(store, 11, status=S.READY) == [i for _, i in expected if i in ready]
    assert len(ready) == 225 - 22 + 45  # odd roots, less those now waiting, and the children
