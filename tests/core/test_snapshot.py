"""Snapshots: exact JSON round trips (property-based), schema versions, isolation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner_core import (
    SCHEMA_VERSION,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnPhase,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AiMessage,
    ErrorInfo,
    ImagePart,
    InMemoryAgentTurnStore,
    SnapshotCorruptedError,
    Suspension,
    SuspensionType,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    load_snapshot,
    tool,
)
from tests.support.scripts import Script, agent, ask, call

ids = st.text("abcdef0123456789-", min_size=1, max_size=12)
texts = st.text(max_size=30)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=4)

tool_calls = st.builds(ToolCall, id=ids, name=ids, arguments=json_objects)
parts = st.one_of(
    st.builds(TextPart, text=texts),
    st.builds(
        ImagePart,
        url=st.sampled_from(["https://x.test/a.png", "data:image/png;base64,AAAA"]),
        detail=st.none() | st.sampled_from(["low", "high"]),
        media_type=st.none() | st.just("image/png"),
    ),
)
user_messages = st.builds(
    UserMessage, content=texts | st.lists(parts, min_size=1, max_size=3), id=ids
)
ai_messages = st.builds(
    AiMessage,
    text=st.none() | texts,
    tool_calls=st.lists(tool_calls, max_size=2),
    reasoning=st.none() | texts,
    id=ids,
)
tool_messages = st.builds(
    ToolMessage, call_id=ids, name=ids, content=texts, is_error=st.booleans(), id=ids
)
system_messages = st.builds(SystemMessage, text=texts, id=ids)
messages = st.lists(
    st.one_of(user_messages, ai_messages, tool_messages, system_messages), max_size=6
)
suspensions = st.builds(
    Suspension,
    type=st.sampled_from(SuspensionType),
    correlation_id=st.none() | ids,
    message=texts,
    resume_phase=st.sampled_from(AgentTurnPhase),
    metadata=json_objects,
)
times = st.floats(0, 2e9, allow_nan=False)
counts = st.integers(0, 10_000)


@st.composite
def snapshots(draw: st.DrawFn) -> AgentTurnSnapshot:
    turn_id = draw(ids)
    return AgentTurnSnapshot(
        id=turn_id,
        version=draw(st.integers(-1, 1000)),
        agent_id=draw(ids),
        agent_version=draw(ids),
        status=draw(st.sampled_from(AgentTurnStatus)),
        phase=draw(st.sampled_from(AgentTurnPhase)),
        parent_turn_id=draw(st.none() | ids),
        root_turn_id=draw(st.just(turn_id) | ids),
        conversation_id=draw(st.none() | ids),
        messages=draw(messages),
        history_count=draw(st.integers(0, 5)),
        pending_tool_calls=draw(st.lists(tool_calls, max_size=3)),
        suspension=draw(st.none() | suspensions),
        next_runnable_at=draw(st.none() | times),
        iteration_count=draw(counts),
        step_count=draw(counts),
        tool_call_count=draw(counts),
        retry_count=draw(counts),
        usage=Usage(input_tokens=draw(counts), output_tokens=draw(counts)),
        final_output=draw(st.none() | texts),
        error=draw(
            st.none() | st.builds(ErrorInfo, type=ids, message=texts, retryable=st.booleans())
        ),
        terminal_reason=draw(st.none() | texts),
        metadata=draw(json_objects),
        streaming=draw(st.booleans()),
        policy=draw(st.none() | st.just(AgentExecutionPolicy(max_steps=7))),
        created_at=draw(times),
        updated_at=draw(times),
        cancel_requested=draw(st.booleans()),
        cancel_reason=draw(st.none() | texts),
        approved_call_ids=draw(st.lists(ids, max_size=2)),
        rejected_calls=draw(st.dictionaries(ids, texts, max_size=2)),
        submitted_inputs=draw(st.dictionaries(ids, json_values, max_size=2)),
    )


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_snapshot_json_round_trip_is_exact(snapshot: AgentTurnSnapshot) -> None:
    assert load_snapshot(snapshot.model_dump_json()) == snapshot
    assert load_snapshot(snapshot.model_dump_json().encode()) == snapshot
    assert load_snapshot(json.loads(snapshot.model_dump_json())) == snapshot


@settings(max_examples=100, deadline=None)
@given(snapshots())
def test_a_state_copy_is_what_model_copy_makes(snapshot: AgentTurnSnapshot) -> None:
    copy = snapshot.copy_state(version=snapshot.version + 1)

    expected = snapshot.model_copy(deep=True, update={"version": snapshot.version + 1})
    assert copy == expected
    assert copy.model_fields_set >= snapshot.model_fields_set | {"version", "messages"}
    assert copy.model_dump_json() == expected.model_dump_json()
    copy.step_count += 1  # its own fields: the original is not changed through it
    assert snapshot.step_count == expected.step_count


@pytest.mark.parametrize("status", list(AgentTurnStatus))
def test_every_status_round_trips(status: AgentTurnStatus) -> None:
    snapshot = AgentTurnSnapshot(
        id="t",
        agent_id="a",
        agent_version="1",
        root_turn_id="t",
        status=status,
        created_at=1.5,
        updated_at=2.5,
    )

    loaded = load_snapshot(snapshot.model_dump_json())

    assert loaded == snapshot
    assert loaded.status is status


def test_every_status_is_blocked_terminal_or_runnable() -> None:
    blocked = {s for s in AgentTurnStatus if s.is_blocked}
    terminal = {s for s in AgentTurnStatus if s.is_terminal}

    assert len(AgentTurnStatus) == 12
    assert blocked == {
        AgentTurnStatus.WAITING_FOR_USER,
        AgentTurnStatus.WAITING_FOR_APPROVAL,
        AgentTurnStatus.WAITING_FOR_CHILD,
        AgentTurnStatus.RETRY_SCHEDULED,
    }
    assert len(terminal) == 6 and not blocked & terminal
    assert set(AgentTurnStatus) - blocked - terminal == {
        AgentTurnStatus.READY,
        AgentTurnStatus.RUNNING,
    }


def minimal(**extra: Any) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "id": "t",
        "agent_id": "a",
        "agent_version": "1",
        "root_turn_id": "t",
        "created_at": 1.0,
        "updated_at": 1.0,
        **extra,
    }


@pytest.mark.parametrize("version", [0, 3, 99, None, "1", "2", True, 2.0])
def test_unknown_schema_version_is_rejected(version: object) -> None:
    data = minimal(schema_version=version)

    with pytest.raises(SnapshotCorruptedError, match="unknown schema_version"):
        load_snapshot(json.dumps(data), turn_id="t")


def test_a_version_1_record_loads_as_the_current_schema() -> None:
    # Given a record as version 1 wrote it: messages and calls without provider data
    call = {"id": "c1", "name": "look", "arguments": {"q": "x"}, "original_id": None}
    data = minimal(
        schema_version=1,
        messages=[
            {"id": "m1", "role": "user", "content": "hi"},
            {"id": "m2", "role": "assistant", "text": None, "tool_calls": [call],
             "reasoning": "think"},
        ],
        pending_tool_calls=[call],
    )  # fmt: skip

    loaded = load_snapshot(json.dumps(data), turn_id="t")

    assert SCHEMA_VERSION == 2
    assert loaded.schema_version == SCHEMA_VERSION
    ai = loaded.messages[1]
    assert isinstance(ai, AiMessage) and ai.reasoning == "think"
    assert ai.provider_data is None and ai.tool_calls[0].provider_data is None
    assert loaded.pending_tool_calls[0].arguments == {"q": "x"}
    assert json.loads(loaded.model_dump_json())["schema_version"] == 2
    assert data["schema_version"] == 1  # the caller's record is not changed


def test_provider_data_survives_a_round_trip() -> None:
    call = ToolCall(id="c1", name="look", provider_data={"p": {"sig": "s1"}})
    ai = AiMessage(tool_calls=[call], provider_data={"p": {"items": [{"a": 1}]}})
    data = minimal(messages=[json.loads(ai.model_dump_json())])

    loaded = load_snapshot(json.dumps(data)).messages[0]

    assert loaded == ai
    assert isinstance(loaded, AiMessage)
    assert loaded.tool_calls[0].provider_data == {"p": {"sig": "s1"}}


def test_missing_schema_version_is_rejected() -> None:
    data = minimal()
    del data["schema_version"]

    with pytest.raises(SnapshotCorruptedError, match="unknown schema_version None"):
        load_snapshot(json.dumps(data))


@pytest.mark.parametrize("garbage", ["{not json", "", "[1, 2]", "42", b"\xff\xfe"])
def test_garbage_is_rejected(garbage: str | bytes) -> None:
    with pytest.raises(SnapshotCorruptedError) as caught:
        load_snapshot(garbage, turn_id="t9")

    assert caught.value.turn_id == "t9"
    assert "t9" in str(caught.value)


def test_invalid_fields_are_rejected_with_their_location() -> None:
    with pytest.raises(SnapshotCorruptedError, match="status"):
        load_snapshot(json.dumps(minimal(status="SLEEPING")))
    with pytest.raises(SnapshotCorruptedError, match="surprise"):
        load_snapshot(json.dumps(minimal(surprise=True)))


def test_message_ids_are_stable_across_a_round_trip(runner: AgentRunner) -> None:
    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    image = UserMessage([TextPart(text="look"), ImagePart(url="https://x.test/a.png")])
    turn = runner.run(agent(Script(ask(call("noop")), "done"), noop), image)

    loaded = load_snapshot(turn.to_snapshot().model_dump_json())

    assert [m.id for m in loaded.messages] == [m.id for m in turn.messages]
    assert len({m.id for m in loaded.messages}) == 4
    assert loaded.messages == turn.messages
    assert [m.id for m in runner.restore(turn.id).messages] == [m.id for m in turn.messages]


def test_to_snapshot_is_isolated_from_the_turn(runner: AgentRunner) -> None:
    # Given a turn waiting for approval, with nested metadata
    @tool(requires_approval=True)
    def refund(amount: float) -> str:
        """Refund."""
        return "ok"

    options = AgentTurnOptions(metadata={"user": {"tier": "gold"}})
    turn = runner.run(agent(Script(ask(call("refund", amount=1.0))), refund), "go", options=options)
    original = turn.to_snapshot()

    # When every container of a snapshot taken from it is changed
    copy = turn.to_snapshot()
    copy.messages.append(AiMessage("injected"))
    copy.pending_tool_calls.clear()
    copy.metadata["user"]["tier"] = "none"
    copy.approved_call_ids.append("c1")
    copy.rejected_calls["c1"] = "no"
    copy.submitted_inputs["c1"] = {"x": 1}
    copy.resume_log.append({"kind": "FAKE"})
    assert copy.suspension is not None
    copy.suspension.metadata["arguments"]["amount"] = 1e9
    copy.status = AgentTurnStatus.COMPLETED

    # Then the turn (and the store) are unchanged
    assert turn.to_snapshot() == original
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert turn.metadata["user"] == {"tier": "gold"}
    assert turn.suspension is not None
    assert turn.suspension.metadata["arguments"] == {"amount": 1.0}
    assert runner.restore(turn.id).to_snapshot() == original


def test_store_loads_are_isolated_from_the_stored_turn(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    @tool(requires_approval=True)
    def refund(amount: float) -> str:
        """Refund."""
        return "ok"

    turn = runner.run(agent(Script(ask(call("refund", amount=1.0))), refund), "go")

    loaded = store.load(turn.id)
    assert loaded.suspension is not None
    loaded.suspension.metadata["tool"] = "something_else"

    again = store.load(turn.id).suspension
    assert again is not None and again.metadata["tool"] == "refund"


def test_messages_are_frozen() -> None:
    message = AiMessage("x", tool_calls=[ToolCall(id="1", name="t")])

    with pytest.raises(Exception, match="frozen"):
        message.text = "y"  # type: ignore[misc]
