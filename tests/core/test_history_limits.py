"""A new turn's ``history=`` is bounded in messages and bytes, like its input."""

from __future__ import annotations

import time

import pytest

from runner_core import (
    AgentExecutionPolicy,
    AgentLimits,
    AgentRunner,
    AgentTurnStatus,
    AiMessage,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    PayloadTooLargeError,
    TurnNotFoundError,
    UserMessage,
)
from tests.support.scripts import Script, agent


def runner(**limits: int) -> AgentRunner:
    policy = AgentExecutionPolicy(limits=AgentLimits(**limits))
    return AgentRunner(
        turn_store=InMemoryAgentTurnStore(), agent_loader=InMemoryAgentLoader(), policy=policy
    )


def test_the_defaults() -> None:
    limits = AgentLimits()
    assert (limits.max_history_messages, limits.max_history_bytes) == (1_000, 8 << 20)


def test_a_history_at_its_count_is_taken_and_one_message_more_is_not() -> None:
    r = runner(max_history_messages=3)
    history = [UserMessage("a"), AiMessage("b"), UserMessage("c")]

    turn = r.run(agent(Script(then="ok")), "go", history=history)
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.messages[:3] == history

    with pytest.raises(PayloadTooLargeError) as caught:
        r.start(agent(Script(then="ok")), "go", history=[*history, AiMessage("d")], turn_id="t")
    error = caught.value
    assert (error.field, error.size, error.limit, error.unit) == ("history", 4, 3, "messages")
    assert str(error) == "history is 4 messages or more; the limit is 3"


def test_a_history_at_its_bytes_is_taken_and_one_byte_more_is_not() -> None:
    one = UserMessage("x")
    size = len(one.model_dump_json().encode())
    r = runner(max_history_bytes=2 * size)

    assert r.run(agent(Script(then="ok")), "go", history=[one, one]).status is (
        AgentTurnStatus.COMPLETED
    )
    with pytest.raises(PayloadTooLargeError) as caught:
        r.start(agent(Script(then="ok")), "go", history=[one, UserMessage("xx")], turn_id="t")

    error = caught.value
    assert (error.field, error.limit, error.unit) == ("history", 2 * size, "bytes")
    assert error.size == 2 * size + 1
    with pytest.raises(TurnNotFoundError):
        r.store.load("t")


@pytest.mark.parametrize("huge", [UserMessage("x" * (64 << 20)), AiMessage("y" * (64 << 20))])
def test_a_huge_history_is_refused_without_encoding_it(huge: UserMessage | AiMessage) -> None:
    r = runner()

    started = time.perf_counter()
    with pytest.raises(PayloadTooLargeError) as caught:
        r.start(agent(Script(then="ok")), "go", history=[huge])
    elapsed = time.perf_counter() - started

    assert caught.value.field == "history" and caught.value.size > 8 << 20
    assert elapsed < 0.5, elapsed
