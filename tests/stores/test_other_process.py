"""What one store instance writes, another (another process) can read: no hidden state."""

from __future__ import annotations

from collections.abc import Callable

from runner_core import AgentTurnStore
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap, waiting_for


def test_children_created_together_are_found_by_another_store(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    writer, reader = make_store(), make_store()
    parent = snap()
    save(writer, parent, -1)
    parent = writer.load(parent.id)
    kids = [child_of(parent), child_of(parent)]
    waiting_for(parent, *kids)
    save_tree(writer, parent, parent.version, kids)

    assert reader.children_of(parent.id) == [k.id for k in kids]
    for kid in kids:
        loaded = reader.load(kid.id)
        assert loaded.parent_turn_id == parent.id
        assert reader.peek(kid.id).version == 0
    assert reader.find_terminal_children_with_waiting_parent(10) == []
