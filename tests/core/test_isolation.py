"""Snapshots are isolated copies: changing one changes no turn, store or other snapshot."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    AgentRunner,
    AgentTurnStatus,
    AiMessage,
    ImagePart,
    TextPart,
    ToolCall,
    UserMessage,
    tool,
)
from runner_core.messages import MESSAGE_LIST
from tests.support.scripts import Script, agent, ask, call


@tool(requires_approval=True)
def refund(amount: int) -> str:
    """Refund."""
    return "ok"


def _waiting(runner: AgentRunner) -> Any:
    script = Script(ask(call("refund", amount=5)))
    turn = runner.run(agent(script, refund), "go")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    return turn


def _attempt(change: Callable[[], object]) -> None:
    """Try a change; refusing it is as good as not sharing it."""
    try:
        change()
    except (AttributeError, TypeError):
        pass


def _dump(messages: Any) -> bytes:
    return MESSAGE_LIST.dump_json(list(messages))


def test_a_snapshot_message_change_reaches_nothing_else(runner: AgentRunner) -> None:
    turn = _waiting(runner)
    before = _dump(turn.messages)
    snapshot, other = turn.to_snapshot(), turn.to_snapshot()
    [decision] = [m for m in snapshot.messages if isinstance(m, AiMessage)]
    extra = ToolCall(id="x", name="refund", arguments={"amount": 1})

    _attempt(lambda: decision.tool_calls.append(extra))  # type: ignore[attr-defined]
    _attempt(lambda: decision.tool_calls.clear())  # type: ignore[attr-defined]

    assert _dump(turn.messages) == before
    assert _dump(other.messages) == before
    assert _dump(turn.state.messages) == before
    assert _dump(runner.store.load(turn.id).messages) == before


def test_message_lists_read_as_immutable_sequences() -> None:
    message = AiMessage(tool_calls=[ToolCall(id="a", name="t")])
    user = UserMessage([TextPart(text="hi"), ImagePart(url="https://x/y.png")])

    assert isinstance(message.tool_calls, tuple)
    assert isinstance(user.content, tuple)
    with pytest.raises(AttributeError):
        message.tool_calls.append(ToolCall(id="b", name="t"))  # type: ignore[attr-defined]
    assert AiMessage().tool_calls == ()


def test_the_stored_form_is_unchanged() -> None:
    message = AiMessage("x", tool_calls=[ToolCall(id="a", name="t", arguments={"k": [1]})])
    user = UserMessage([TextPart(text="hi")])

    assert message.model_dump(mode="json")["tool_calls"] == [
        {
            "id": "a",
            "name": "t",
            "arguments": {"k": [1]},
            "original_id": None,
            "provider_data": None,
        }
    ]
    assert user.model_dump(mode="json")["content"] == [{"type": "text", "text": "hi"}]
    assert MESSAGE_LIST.validate_json(_dump([message, user])) == [message, user]
