"""A loaded snapshot is an isolated copy on every store, the Redis message cache included."""

from __future__ import annotations

from collections.abc import Callable

from runner_core import (
    AgentRunner,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    InMemoryAgentLoader,
    ToolCall,
    UserMessage,
    tool,
)
from runner_core.messages import MESSAGE_LIST, Message
from tests.support.scripts import Script, agent, ask, call


@tool(requires_approval=True)
def refund(amount: int) -> str:
    """Refund."""
    return "ok"


def _dump(messages: list[Message]) -> bytes:
    return MESSAGE_LIST.dump_json(messages)


def _attempt(change: Callable[[], object]) -> None:
    try:
        change()
    except (AttributeError, TypeError):
        pass


def test_changing_loaded_messages_changes_no_later_load(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    store = make_store()
    runner = AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader())
    parts = [{"type": "text", "text": "look"}, {"type": "image", "url": "https://x/y.png"}]
    turn = runner.run(agent(Script(ask(call("refund", amount=5))), refund), UserMessage(parts))
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    before = _dump(store.load(turn.id).messages)

    loaded = store.load(turn.id)  # the Redis store serves these from its message cache
    [user] = [m for m in loaded.messages if isinstance(m, UserMessage)]
    [decision] = [m for m in loaded.messages if isinstance(m, AiMessage)]
    _attempt(lambda: decision.tool_calls.append(ToolCall(id="x", name="refund")))  # type: ignore[attr-defined]
    _attempt(lambda: user.content.pop())  # type: ignore[union-attr]
    loaded.messages.append(UserMessage("not stored"))
    loaded.messages.pop(0)
    loaded.pending_tool_calls.clear()

    assert _dump(store.load(turn.id).messages) == before
    assert _dump(make_store().load(turn.id).messages) == before
    assert _dump(runner.restore(turn.id).messages) == before
    assert [c.id for c in store.load(turn.id).pending_tool_calls] == ["c1"]
