"""For tests of your agents: a scripted model, tool calls as a model sends them, an event log.

``ScriptedModel`` answers each model call with the next reply of its script and records the
request, so a test states what the model says and checks what the agent sent it::

    model = ScriptedModel(asks(tool_call("lookup", order_id="1001")), "It ships today.")
    turn = AgentRunner().run(Agent("support", model, tools=[lookup]), "Where is 1001?")
    assert turn.status is AgentTurnStatus.COMPLETED and model.calls == 2
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runner_core.events import AgentEvent, AgentEventType
from runner_core.messages import AiMessage, ToolCall
from runner_core.models.base import ModelRequest, ModelResponse, Usage
from runner_core.models.function import FunctionModel

#: One scripted answer: a message, a response (with usage), text, an exception to raise, or a
#: function of the request returning one of the first three (an ``async def`` one is awaited).
Reply = AiMessage | ModelResponse | str | BaseException | Callable[[ModelRequest], Any]


class ScriptedModel(FunctionModel):
    """A model that plays ``replies`` in order and records every request in ``requests``.

    Once the script runs out, ``then`` answers every further call; without ``then`` an extra
    call raises ``AssertionError``, so a test notices a model call it did not expect.
    """

    def __init__(self, *replies: Reply, then: Reply | None = None) -> None:
        super().__init__(self._answer)
        self.replies: list[Reply] = list(replies)
        self.then = then
        self.requests: list[ModelRequest] = []

    @property
    def calls(self) -> int:
        """How many times the model was asked."""
        return len(self.requests)

    def _answer(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        if self.replies:
            reply = self.replies.pop(0)
        elif self.then is not None:
            reply = self.then
        else:
            raise AssertionError(f"unexpected model call #{len(self.requests)}")
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply):
            return reply(request)
        return reply


def tool_call(name: str, call_id: str = "c1", **arguments: Any) -> ToolCall:
    """A tool call as a model would request it."""
    return ToolCall(id=call_id, name=name, arguments=arguments)


def asks(
    *calls: ToolCall, text: str | None = None, usage: Usage | None = None
) -> AiMessage | ModelResponse:
    """A model reply that requests ``calls`` (with ``usage``: a response that reports it)."""
    message = AiMessage(text, tool_calls=list(calls))
    return ModelResponse(message, usage) if usage is not None else message


@dataclass
class EventLog:
    """An event listener that keeps every event it is given."""

    events: list[AgentEvent] = field(default_factory=list)

    def __call__(self, event: AgentEvent) -> None:
        """Keep ``event``."""
        self.events.append(event)

    def types(self, turn_id: str | None = None) -> list[AgentEventType]:
        """The event types in order (of one turn, when ``turn_id`` is given)."""
        return [e.type for e in self.events if turn_id is None or e.turn_id == turn_id]

    def of(self, type: AgentEventType) -> list[AgentEvent]:
        """The events of one type, in order."""
        return [e for e in self.events if e.type is type]
