"""The store contract (SEMANTICS.md, "Store contract"): saves, versions, history, copies.

Every test runs on the in-memory store and on the Redis store.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from runner_core import (
    AgentConversationBusyException,
    AgentExecutionPolicy,
    AgentTurnPhase,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    ConcurrentModificationError,
    ErrorInfo,
    HistoryRewrittenError,
    ImagePart,
    TextPart,
    ToolCall,
    ToolMessage,
    TurnNotFoundError,
    Usage,
    UserMessage,
)
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap, waiting_for

S = AgentTurnStatus


def test_create_stores_version_0_and_each_save_adds_one(store: AgentTurnStore) -> None:
    s = snap()
    assert save(store, s, -1).version == 0
    loaded = store.load(s.id)
    assert loaded.version == 0
    loaded.status = S.RUNNING
    assert save(store, loaded, 0).version == 1
    loaded.version = 1
    assert save(store, loaded, 1).version == 2
    assert store.load(s.id).version == 2
    assert store.peek(s.id).version == 2


def test_a_stale_version_conflicts_with_expected_and_actual(store: AgentTurnStore) -> None:
    s = snap()
    save(store, s, -1)
    save(store, s, 0)
    with pytest.raises(ConcurrentModificationError) as err:
        save(store, s, 0)
    assert (err.value.turn_id, err.value.expected, err.value.actual) == (s.id, 0, 1)
    assert store.load(s.id).version == 1


def test_creating_an_existing_id_conflicts(store: AgentTurnStore) -> None:
    s = snap()
    save(store, s, -1)
    with pytest.raises(ConcurrentModificationError) as err:
        save(store, snap(s.id), -1)
    assert (err.value.expected, err.value.actual) == (-1, 0)


def test_unknown_ids_raise_turn_not_found(store: AgentTurnStore) -> None:
    ghost = snap("no-such-turn")
    with pytest.raises(TurnNotFoundError):
        save(store, ghost, 0)
    with pytest.raises(TurnNotFoundError):
        store.load("no-such-turn")
    with pytest.raises(TurnNotFoundError):
        store.peek("no-such-turn")
    with pytest.raises(TurnNotFoundError):
        store.request_cancellation("no-such-turn")
    with pytest.raises(TurnNotFoundError):
        store.claim("no-such-turn", "w", store.now(), 1000)
    assert store.children_of("no-such-turn") == []


def test_a_conversation_has_one_active_root_turn(store: AgentTurnStore) -> None:
    first = snap(conversation_id="conv-1")
    save(store, first, -1)
    assert store.find_active_turn("conv-1") == (first.id, S.READY)

    # When a second root turn is created in the busy conversation
    with pytest.raises(AgentConversationBusyException) as err:
        save(store, snap(conversation_id="conv-1"), -1)
    # Then it names the active turn, and nothing was created
    assert (err.value.conversation_id, err.value.active_turn_id, err.value.status) == (
        "conv-1",
        first.id,
        S.READY,
    )
    # a child with the conversation id and other conversations are not affected
    save(store, child_of(first, conversation_id="conv-1"), -1)
    save(store, snap(conversation_id="conv-2"), -1)

    first.status = S.WAITING_FOR_APPROVAL
    save(store, first, 0)
    assert store.find_active_turn("conv-1") == (first.id, S.WAITING_FOR_APPROVAL)
    first.status = S.COMPLETED
    save(store, first, 1)
    assert store.find_active_turn("conv-1") is None
    second = snap(conversation_id="conv-1")
    assert save(store, second, -1).version == 0
    assert store.find_active_turn("conv-1") == (second.id, S.READY)


def test_history_is_append_only(make_store: Callable[[], AgentTurnStore]) -> None:
    store = make_store()
    s = snap()
    save(store, s, -1)
    s.messages.append(AiMessage("one"))
    save(store, s, 0)
    for saver in (store, make_store()):  # a cold process too
        replaced = store.load(s.id)
        replaced.messages[-1] = AiMessage("other")
        with pytest.raises(HistoryRewrittenError):
            save(saver, replaced, 1)
        shorter = store.load(s.id)
        shorter.messages.pop()
        with pytest.raises(HistoryRewrittenError):
            save(saver, shorter, 1)
    assert [m.id for m in store.load(s.id).messages] == [m.id for m in s.messages]
    assert store.load(s.id).version == 1


def test_a_cold_process_appends_to_the_stored_history(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    first, second = make_store(), make_store()
    s = snap()
    save(first, s, -1)
    s.messages.append(AiMessage("a"))
    save(first, s, 0)
    # Given a second process that never saw the turn, with the snapshot of the first
    s.messages.append(AiMessage("b"))
    assert save(second, s, 1).version == 2
    assert [m.id for m in first.load(s.id).messages] == [m.id for m in s.messages]
    assert [m.id for m in second.load(s.id).messages] == [m.id for m in s.messages]


def test_returned_snapshots_are_copies(store: AgentTurnStore) -> None:
    s = snap(metadata={"tags": ["a"]})
    save(store, s, -1)
    s.messages.append(AiMessage("not saved"))
    s.metadata["tags"].append("not saved")
    loaded = store.load(s.id)
    loaded.messages.clear()
    loaded.metadata["tags"].append("x")
    loaded.status = S.FAILED
    again = store.load(s.id)
    assert len(again.messages) == 1
    assert again.metadata == {"tags": ["a"]}
    assert again.status is S.READY
    claimed = store.claim(s.id, "w", store.now(), 10_000)
    assert claimed is not None
    claimed.messages.append(AiMessage("x"))
    assert len(store.load(s.id).messages) == 1


def test_every_field_and_message_round_trips_exactly(store: AgentTurnStore) -> None:
    picture = ImagePart(url="data:image/png;base64,iVBORw0KGgo=", detail="high")
    messages = [
        UserMessage([TextPart(text="what is on it? ünïcødé ✓"), picture]),
        AiMessage(
            "let me look",
            tool_calls=[ToolCall(id="c1", name="look", arguments={"x": [1, 2.5, None]})],
            reasoning="thinking",
        ),
        ToolMessage(call_id="c1", name="look", content='{"error": true}', is_error=True),
        AiMessage("a cat"),
    ]
    s = snap(
        messages=messages,
        history_count=1,
        status=S.RETRY_SCHEDULED,
        phase=AgentTurnPhase.TOOLS,
        pending_tool_calls=[ToolCall(id="c2", name="look", arguments={})],
        next_runnable_at=time.time() + 123.456789,
        usage=Usage(input_tokens=10, output_tokens=5),
        error=ErrorInfo(type="ModelError", message="boom", retryable=True),
        metadata={"user": "u-1", "nested": {"a": [1, 2]}},
        policy=AgentExecutionPolicy(max_steps=7),
        conversation_id="conv-rt",
        created_at=1718000000.123456,
        updated_at=1718000001.654321,
        resume_log=[{"kind": "RETRY", "metadata": {"by": "me"}}],
        cancel_reason=None,
    )
    save(store, s, -1)
    loaded = store.load(s.id)
    assert loaded.messages == messages
    assert loaded.model_dump() == {**s.model_dump(), "version": 0}


def test_peek_reads_control_fields_and_the_store_clock(store: AgentTurnStore) -> None:
    s = snap()
    save(store, s, -1)
    control = store.peek(s.id)
    assert (control.version, control.status, control.cancel_requested) == (0, S.READY, False)
    assert control.lease is None and control.live_lease is None
    assert abs(control.now - store.now()) < 5
    claimed = store.claim(s.id, "w1", store.now(), 30_000)
    assert claimed is not None and claimed.lease is not None
    control = store.peek(s.id)
    assert control.version == 1
    assert control.live_lease == claimed.lease
    store.request_cancellation(s.id)
    assert store.peek(s.id).cancel_requested is True


def test_the_cancel_flag_is_monotonic_and_survives_a_stale_save(store: AgentTurnStore) -> None:
    s = snap()
    save(store, s, -1)
    stale = store.load(s.id)  # read before the flag is set
    assert store.request_cancellation(s.id, "user left")
    assert not store.request_cancellation(s.id, "again")
    version = store.peek(s.id).version
    assert version == 0  # the flag is not a version change
    stale.status = S.RUNNING
    result = save(store, stale, 0)
    assert result.cancel_requested is True
    loaded = store.load(s.id)
    assert (loaded.cancel_requested, loaded.cancel_reason) == (True, "user left")
    loaded.status = S.CANCELLED
    loaded.cancel_requested = False
    save(store, loaded, 1)
    assert store.load(s.id).cancel_requested is True
    assert not store.request_cancellation(s.id)  # terminal


def test_children_are_listed_oldest_first(store: AgentTurnStore) -> None:
    parent = snap()
    save(store, parent, -1)
    kids = [child_of(parent) for _ in range(3)]
    save_tree(store, parent, 0, kids[:2])
    save(store, kids[2], -1)
    grandchild = child_of(kids[0])
    save(store, grandchild, -1)
    assert store.children_of(parent.id) == [k.id for k in kids]
    assert store.children_of(kids[0].id) == [grandchild.id]
    assert store.load(grandchild.id).root_turn_id == parent.id


def test_parent_and_children_are_written_atomically(store: AgentTurnStore) -> None:
    parent = snap()
    save(store, parent, -1)
    taken = child_of(parent)
    save(store, taken, -1)
    fresh = child_of(parent)
    waiting_for(parent, fresh, taken)

    # When one child conflicts, nothing is written: not the parent, not the other child
    with pytest.raises(ConcurrentModificationError):
        save_tree(store, parent, 0, [fresh, taken])
    assert store.load(parent.id).status is S.READY
    with pytest.raises(TurnNotFoundError):
        store.load(fresh.id)

    # When the parent conflicts, no child is created
    with pytest.raises(ConcurrentModificationError):
        save_tree(store, parent, 5, [fresh])
    with pytest.raises(TurnNotFoundError):
        store.load(fresh.id)

    waiting_for(parent, fresh)
    result = save_tree(store, parent, 0, [fresh])
    assert result.version == 1
    assert store.load(parent.id).status is S.WAITING_FOR_CHILD
    assert store.load(fresh.id).version == 0
    assert store.children_of(parent.id) == [taken.id, fresh.id]


def test_repair_scan_finds_ended_children_of_waiting_parents(store: AgentTurnStore) -> None:
    parent = snap()
    save(store, parent, -1)
    a, b = child_of(parent), child_of(parent)
    waiting_for(parent, a, b)
    save_tree(store, parent, 0, [a, b])
    assert store.find_terminal_children_with_waiting_parent(10) == []
    # the child's terminal commit reports to the parent itself: nothing left to repair
    a.status = S.COMPLETED
    assert save(store, a, 0).parent_woken is False  # b has not reported yet
    assert store.find_terminal_children_with_waiting_parent(10) == []
    stored = store.load(parent.id)
    assert set(stored.child_results) == {a.id} and stored.version == 1
    b.status = S.FAILED
    assert save(store, b, 0).parent_woken is True
    assert store.load(parent.id).child_results[b.id].status is S.FAILED
    assert store.claim(parent.id, "w", store.now(), 1_000) is not None


def test_repair_scan_finds_a_report_that_never_happened(store: AgentTurnStore) -> None:
    # Given a child that ended before its parent waited on it (as in older records)
    parent = snap()
    save(store, parent, -1)
    a = child_of(parent)
    save_tree(store, parent, 0, [a])
    a.status = S.COMPLETED
    save(store, a, 0)
    waiting_for(parent, a)
    parent.version = 1
    save(store, parent, 1)
    assert store.find_terminal_children_with_waiting_parent(10) == [(a.id, parent.id)]
    # When it is reported, the parent wakes once and the pair is gone
    assert store.report_child(a.id) is True
    assert store.report_child(a.id) is False
    assert store.find_terminal_children_with_waiting_parent(10) == []
    assert store.load(parent.id).all_children_reported()
