"""Bad input is refused with a clear error, and nothing is written to the store."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentNotFoundError,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnSnapshot,
    ConfigurationError,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    RetryPolicy,
    TurnNotFoundError,
    UserMessage,
)
from runner_core.policy import validate_metadata
from tests.support.commits import save
from tests.support.scripts import Script, agent, stored_ids


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ({"when": datetime.date(2024, 1, 1)}, "'when'"),
        ({"order": {"placed": object()}}, "'order.placed'"),
        ({"items": [1, 2, {1, 2}]}, "'items[2]'"),
        ({"score": float("nan")}, "'score'"),
        ({"nested": {3: "x"}}, "nested.3"),
    ],
)
def test_non_json_metadata_names_the_key(metadata: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key.replace("[", r"\[").replace("]", r"\]")):
        validate_metadata(metadata)
    with pytest.raises(ValueError, match="metadata key"):
        AgentTurnOptions(metadata=metadata)


def test_runner_refuses_non_json_metadata_and_writes_nothing(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    # options built without validation still meet the runner's check
    options = AgentTurnOptions.model_construct(metadata={"user": {"since": datetime.date.today()}})
    script = Script()

    with pytest.raises(InvalidArgumentError, match="metadata key 'user.since'"):
        runner.run(agent(script), "hi", options=options)

    assert stored_ids(store) == []
    assert script.calls == 0


def test_unknown_agent_id_is_refused(runner: AgentRunner, store: InMemoryAgentTurnStore) -> None:
    with pytest.raises(AgentNotFoundError, match="agent 'ghost' not found"):
        runner.run("ghost", "hi")
    with pytest.raises(AgentNotFoundError):
        runner.start("ghost", "hi")

    assert stored_ids(store) == []


def test_agent_by_id_uses_the_latest_version(runner: AgentRunner) -> None:
    runner.loader.register(agent(Script(then="v1"), version="1"))  # type: ignore[attr-defined]
    runner.loader.register(agent(Script(then="v2"), version="2"))  # type: ignore[attr-defined]

    turn = runner.run("support", "hi")

    assert (turn.agent_version, turn.final_output) == ("2", "v2")


def test_unknown_agent_version_is_refused() -> None:
    loader = InMemoryAgentLoader([agent(Script(), version="1")])

    with pytest.raises(AgentNotFoundError, match="agent 'support' version '9' not found"):
        loader.load("support", "9")
    assert loader.load("support", "1").version == "1"


def test_restore_with_an_unknown_agent_version_is_refused(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    runner.loader.register(agent(Script(), version="1"))  # type: ignore[attr-defined]
    save(
        store,
        AgentTurnSnapshot(
            id="t",
            agent_id="support",
            agent_version="9",
            root_turn_id="t",
            messages=[UserMessage("hi")],
            created_at=1.0,
            updated_at=1.0,
        ),
        -1,
    )

    with pytest.raises(AgentNotFoundError, match="version '9'"):
        runner.restore("t")
    assert store.peek("t").version == 0


@pytest.mark.parametrize(
    "op",
    [
        lambda r: r.restore("missing"),
        lambda r: r.resume("missing", AgentResumeCommand.approve_tool("c1")),
        lambda r: r.submit_resume("missing", AgentResumeCommand.continue_turn()),
        lambda r: r.cancel("missing"),
        lambda r: r.claim("missing", "w"),
    ],
    ids=["restore", "resume", "submit_resume", "cancel", "claim"],
)
def test_unknown_turn_is_refused(
    runner: AgentRunner, store: InMemoryAgentTurnStore, op: Any
) -> None:
    with pytest.raises(TurnNotFoundError, match="turn 'missing' not found"):
        op(runner)

    assert stored_ids(store) == []


def test_history_and_conversation_exclude_each_other(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    with pytest.raises(InvalidArgumentError, match="history= or conversation_id=, not both"):
        runner.run(agent(Script()), "hi", history=[UserMessage("x")], conversation_id="c")

    assert stored_ids(store) == []


def test_conversation_without_memory_provider_is_refused(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    with pytest.raises(ConfigurationError, match="no chat_memory_provider"):
        runner.run(agent(Script()), "hi", conversation_id="c")

    assert stored_ids(store) == []


def test_wrong_input_and_agent_types_are_refused(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    with pytest.raises(InvalidArgumentTypeError, match="input must be str or UserMessage"):
        runner.run(agent(Script()), 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="agent must be an Agent or an agent id"):
        runner.run(42, "hi")  # type: ignore[arg-type]

    assert stored_ids(store) == []


def test_bad_agent_and_policy_definitions_are_refused() -> None:
    with pytest.raises(ValueError, match="id must not be empty"):
        Agent("", Script().model)
    with pytest.raises(ValueError, match="max_iterations"):
        Agent("a", Script().model, max_iterations=0)
    with pytest.raises(InvalidArgumentError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(InvalidArgumentError, match="lease_seconds"):
        AgentExecutionPolicy(lease_seconds=0)


def test_our_errors_survive_pickling_with_their_class_message_and_ids() -> None:
    import pickle

    from runner_core import StoreUnavailableError, TurnLeasedError, TurnNotFoundError

    for error in (
        StoreUnavailableError("redis://x", ConnectionError("down")),
        TurnNotFoundError("t-1"),
        TurnLeasedError("t-2", "w-1", 3.5),
    ):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)
        assert again.__dict__ == error.__dict__
