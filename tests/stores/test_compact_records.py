"""What the Redis store writes holds what it adds: stream entries, bodies and messages.

Stream entries leave out what every entry repeats (the root's own id, a null parent, the
sequence ``seq`` carries, default flags) and readers see every field again; a body leaves
out top-level fields at their default; a message leaves out its unset optional fields.
"""

from __future__ import annotations

import json

from runner_core import (
    AgentEventType,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    ToolCall,
    UserMessage,
)
from runner_core.events import event_to_dict, make_event, stored_event_json
from runner_core.messages import MESSAGE
from runner_core.snapshot import AgentTurnSnapshot
from stores.redis.codec import HEADER_HELD, STORE_OWNED, body_json, snapshot_of, turn_block
from stores.redis.streams import full_event
from tests.support.commits import save
from tests.support.stores import snap

S = AgentTurnStatus


def test_a_stored_event_leaves_out_the_copies_and_reads_back_whole() -> None:
    s = snap()
    s.event_sequence = 6
    event = make_event(s, AgentEventType.MODEL_COMPLETED, {"tool_calls": ["add"]})

    doc = json.loads(stored_event_json(event))

    for left_out in ("root_turn_id", "parent_turn_id", "sequence", "provisional", "attempt"):
        assert left_out not in doc
    assert full_event(doc, "7") == {**event_to_dict(event), "sequence": 7}


def test_a_childs_stored_event_keeps_its_root_and_parent() -> None:
    parent = snap()
    child = snap(parent_turn_id=parent.id, root_turn_id=parent.id)
    event = make_event(child, AgentEventType.STEP_STARTED, {}, attempt="a1", provisional=True)

    doc = full_event(json.loads(stored_event_json(event)))

    assert doc == event_to_dict(event)


def test_an_entry_written_in_full_reads_as_before() -> None:
    event = make_event(snap(), AgentEventType.SNAPSHOT_SAVED, {"version": 3})
    old = json.loads(json.dumps(event_to_dict(event)))
    assert full_event(dict(old), "4") == {**old, "sequence": 4}


def test_a_body_leaves_out_defaults_and_loads_back_equal() -> None:
    s = snap()
    s.final_output = ""  # not its default (None): kept
    s.metadata = {"k": None}
    body = body_json(s)

    stored = json.loads(body)
    assert "suspension" not in stored and "approved_call_ids" not in stored
    assert stored["final_output"] == "" and stored["metadata"] == {"k": None}
    assert body.startswith('{"schema_version":')
    loaded = snapshot_of(s.id, {**_header(s), "body": body}, [])
    assert loaded.model_dump(exclude=STORE_OWNED) == s.model_dump(exclude=STORE_OWNED)


def _header(s: AgentTurnSnapshot) -> dict[str, str]:
    return {
        "v": "0",
        "st": s.status.value,
        "root": s.root_turn_id,
        "par": s.parent_turn_id or "",
        "agent": s.agent_id,
        "ca": repr(s.created_at),
        "ua": repr(s.updated_at),
    }


def test_a_body_leaves_out_what_the_header_holds() -> None:
    parent = snap()
    child = snap(parent_turn_id=parent.id, root_turn_id=parent.id, status=S.RUNNING)

    stored = json.loads(body_json(child))

    for held in ("id", *HEADER_HELD):
        assert held not in stored
    loaded = snapshot_of(child.id, {**_header(child), "body": body_json(child)}, [])
    assert loaded.model_dump(exclude=STORE_OWNED) == child.model_dump(exclude=STORE_OWNED)


def test_a_body_that_holds_every_field_reads_as_before() -> None:
    s = snap(status=S.RUNNING)
    old = s.model_dump_json(exclude=STORE_OWNED)
    header = {**_header(s), "st": "READY", "ua": "1.0"}  # the body's own values win

    loaded = snapshot_of(s.id, {**header, "body": old}, [])

    assert loaded.model_dump(exclude=STORE_OWNED) == s.model_dump(exclude=STORE_OWNED)


def test_a_message_leaves_out_its_nones_but_keeps_null_arguments() -> None:
    s = snap()
    s.messages = [
        UserMessage("hi"),
        AiMessage(tool_calls=[ToolCall(id="c1", name="f", arguments={"a": None})]),
    ]
    docs = turn_block(s, 0, 0)[-2:]

    assert all(b"null" not in d[: d.find(b"arguments")] for d in map(bytes, docs))
    assert [MESSAGE.validate_json(d) for d in docs] == s.messages
    assert all(bytes(d).startswith(b'{"id":"') for d in docs)


def test_what_an_update_changes_of_the_header_held_fields_reads_back(
    store: AgentTurnStore,
) -> None:
    s = snap()
    save(store, s, -1)
    s = store.load(s.id)
    s.agent_id, s.status, s.updated_at = "another", S.RUNNING, s.updated_at + 1.5

    save(store, s, s.version)

    loaded = store.load(s.id)
    assert (loaded.agent_id, loaded.status, loaded.updated_at) == (
        "another",
        S.RUNNING,
        s.updated_at,
    )
