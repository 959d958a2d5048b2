"""The census of bad input on the in-memory store: typed, clear, harmless.

Every case raises one of our errors (an ``AgentWorkerError`` that is also the built-in a
Python caller expects), names the field it is about, keeps its message short whatever
was passed, and leaves the store as it was (tests/support/census.py).
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from runner_core import (
    AgentRunner,
    AgentTurnOptions,
    AgentWorkerError,
    ConfigurationError,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    TurnNotFoundError,
)
from runner_core.errors import shorten
from tests.support.agents import approval_agent
from tests.support.census import ALL, POLICY, Case, Scene


@pytest.fixture
def scene() -> Scene:
    runner = AgentRunner(
        turn_store=InMemoryAgentTurnStore(), agent_loader=InMemoryAgentLoader(), policy=POLICY
    )
    return Scene.on(runner)


@pytest.mark.parametrize("case", ALL, ids=[case.id for case in ALL])
def test_bad_input_is_refused_typed_and_changes_nothing(scene: Scene, case: Case) -> None:
    with pytest.raises(case.error) as caught:
        case.act(scene)

    error = caught.value
    assert isinstance(error, AgentWorkerError)
    if case.field is not None:
        assert getattr(error, "field", None) == case.field
        assert case.field.split(".")[0] in str(error)
    assert len(str(error)) < 300, str(error)[:400]
    scene.assert_nothing_changed()


def test_the_typed_errors_are_the_builtins_callers_expect() -> None:
    assert issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InvalidArgumentTypeError, TypeError)
    for cls in (InvalidArgumentError, InvalidArgumentTypeError):
        error = cls("bad", field="metadata")
        again = pickle.loads(pickle.dumps(error))
        assert (type(again), str(again), again.field) == (cls, "bad", "metadata")


def test_a_pydantic_error_is_kept_as_the_cause() -> None:
    from pydantic import ValidationError

    from runner_core import AgentExecutionPolicy

    with pytest.raises(InvalidArgumentError) as caught:
        AgentExecutionPolicy(max_tool_concurrency=-1)
    assert isinstance(caught.value.__cause__, ValidationError)
    assert "max_tool_concurrency" in str(caught.value) and "-1" in str(caught.value)


def test_stored_policies_still_parse_as_before() -> None:
    from pydantic import ValidationError

    from runner_core import AgentExecutionPolicy

    assert AgentExecutionPolicy.model_validate({"max_steps": 3}).max_steps == 3
    with pytest.raises(ValidationError):
        AgentExecutionPolicy.model_validate({"max_steps": 0})


def test_a_one_mib_id_is_cut_in_the_message() -> None:
    huge = "t" * (1 << 20)

    error = TurnNotFoundError(huge)

    assert len(str(error)) < 200
    assert "1048576 chars" in str(error)
    assert str(TurnNotFoundError("missing")) == "turn 'missing' not found"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("abc", "'abc'"),
        ("x" * 100, "'" + "x" * 80 + "'… (100 chars)"),
        (3, "3"),
        (list(range(100)), repr(list(range(100)))[:80] + "… (390 chars)"),
    ],
    ids=["short text", "long text", "a number", "a long list"],
)
def test_shorten(value: object, shown: str) -> None:
    assert shorten(value) == shown


def test_a_conversation_id_without_memory_is_cut_too(scene: Scene) -> None:
    with pytest.raises(ConfigurationError) as caught:
        scene.start(conversation_id="c" * 250)
    assert len(str(caught.value)) < 200
    scene.assert_nothing_changed()


def test_every_row_of_the_census_is_in_the_docs() -> None:
    from pathlib import Path

    table = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    for case in ALL:
        entry, bad = case.row.split(": ", 1)
        named = f" `{case.field}`" if case.field else ""
        assert f"| `{entry}` | {bad} | `{case.error.__name__}`{named} |" in table, case.id


def test_metadata_may_nest_a_hundred_levels_and_no_more() -> None:
    # Given metadata whose top-level dict is the first of 100 levels, and one of 101
    def levels(n: int) -> dict[str, Any]:
        value: Any = "leaf"
        for _ in range(n - 1):
            value = [value]
        return {"tree": value}

    runner = AgentRunner()
    kept = runner.start(approval_agent(), "pay 5", options=AgentTurnOptions(metadata=levels(100)))

    assert runner.restore(kept.id).metadata == levels(100)
    with pytest.raises(InvalidArgumentError, match="nested deeper than 100 levels") as caught:
        AgentTurnOptions(metadata=levels(101))
    assert caught.value.field == "metadata"
    assert "tree[0][0]" in str(caught.value)
