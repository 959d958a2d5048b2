"""Typed final output: what ``Agent`` refuses at construction, old and drifted records."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from runner_core import (
    Agent,
    AgentPlanningPolicy,
    AgentRunner,
    InMemoryAgentLoader,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    SnapshotCorruptedError,
    load_snapshot,
    tool,
)
from runner_core.output import FINAL_TOOL
from runner_core.testing import ScriptedModel, asks, tool_call
from tests.support.stores import snap


class Answer(BaseModel):
    text: str


def build(**kwargs: Any) -> Agent:
    return Agent("typed", ScriptedModel(), **kwargs)


@pytest.mark.parametrize(
    "output_type",
    [socket.socket, 3, "Answer", Callable[[int], int]],
    ids=["arbitrary-class", "instance", "forward-ref", "callable"],
)
def test_a_type_pydantic_cannot_handle_is_refused(output_type: Any) -> None:
    with pytest.raises(InvalidArgumentTypeError) as info:
        build(output_type=output_type)
    assert info.value.field == "output_type"
    assert "'typed'" in str(info.value)


def test_a_dict_schema_points_to_response_format() -> None:
    with pytest.raises(InvalidArgumentTypeError) as info:
        build(output_type={"type": "object", "properties": {}})
    assert info.value.field == "output_type"
    assert "response_format" in str(info.value)


def test_a_class_as_response_format_points_to_output_type() -> None:
    with pytest.raises(InvalidArgumentTypeError) as info:
        build(model_settings={"response_format": Answer})
    assert info.value.field == "model_settings"
    assert "output_type" in str(info.value)


def test_a_dict_response_format_is_still_taken() -> None:
    fmt = {"type": "json_object"}
    assert build(model_settings={"response_format": fmt}).model_settings["response_format"] == fmt


@pytest.mark.parametrize("retries", [-1, -5])
def test_negative_output_retries_are_refused(retries: int) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        build(output_type=Answer, output_retries=retries)
    assert info.value.field == "output_retries"


@pytest.mark.parametrize("retries", [1.5, "2", True, None])
def test_output_retries_must_be_an_int(retries: Any) -> None:
    with pytest.raises(InvalidArgumentTypeError) as info:
        build(output_type=Answer, output_retries=retries)
    assert info.value.field == "output_retries"


def test_an_unknown_output_mode_is_refused() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        build(output_type=Answer, output_mode="json")
    assert info.value.field == "output_mode"


def test_native_output_needs_a_model_that_declares_it() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        build(output_type=Answer, output_mode="native")
    assert info.value.field == "output_mode"
    assert "native_output" in str(info.value)


def test_a_tool_may_not_take_the_final_answer_name() -> None:
    @tool(name=FINAL_TOOL)
    def impostor() -> str:
        """Pretends to be the final answer."""
        return "x"

    with pytest.raises(InvalidArgumentError) as info:
        build(output_type=Answer, tools=[impostor])
    assert info.value.field == "tools"


def test_a_plan_without_final_summary_has_no_answer_to_type() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        build(output_type=Answer, planning=AgentPlanningPolicy(final_summary=False))
    assert info.value.field == "output_type"


def test_a_record_without_the_output_fields_loads() -> None:
    data = snap().model_dump(mode="json")
    del data["output"], data["output_retry_count"]

    loaded = load_snapshot(data)

    assert loaded.output is None and loaded.output_retry_count == 0


def test_a_snapshot_copy_does_not_share_the_output() -> None:
    original = snap(output={"items": [1, 2]})

    copy = original.copy_state()
    copy.output["items"].append(3)

    assert original.output == {"items": [1, 2]}


def test_a_stored_output_that_no_longer_fits_its_type_is_named(
    make_runner: Callable[..., AgentRunner], loader: InMemoryAgentLoader
) -> None:
    class Old(BaseModel):
        text: str

    class New(BaseModel):
        words: int

    answer = ScriptedModel(asks(tool_call(FINAL_TOOL, "f1", text="hi")))
    runner = make_runner()
    done = runner.run(loader.register(Agent("drift", answer, output_type=Old)), "hi")
    drifted = InMemoryAgentLoader([Agent("drift", ScriptedModel(), output_type=New)])
    restored = AgentRunner(turn_store=runner.store, agent_loader=drifted).restore(done.id)

    with pytest.raises(SnapshotCorruptedError) as info:
        _ = restored.output
    assert "words" in str(info.value) and "'drift'" in str(info.value)
    assert restored.final_output == '{"text":"hi"}'
