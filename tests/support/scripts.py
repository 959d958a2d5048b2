"""Helpers shared by the unit suite: scripted models, event logs, recording middleware."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runner_core import (
    Agent,
    AgentEvent,
    AgentEventType,
    AiMessage,
    FunctionModel,
    InMemoryAgentTurnStore,
    Middleware,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    Usage,
)

Reply = AiMessage | ModelResponse | str | BaseException | Callable[[ModelRequest], Any]


class Script:
    """A FunctionModel that plays ``replies`` in order and records every request.

    A reply may be an ``AiMessage``, ``ModelResponse``, text, an exception (raised) or a
    callable taking the request. Once the script runs out, ``then`` answers (default: an
    error, so a test notices an unexpected extra model call).
    """

    def __init__(self, *replies: Reply, then: Reply | None = None) -> None:
        self.replies = list(replies)
        self.then = then
        self.requests: list[ModelRequest] = []
        self.model = FunctionModel(self._answer)

    @property
    def calls(self) -> int:
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


def call(name: str, call_id: str = "c1", **arguments: Any) -> ToolCall:
    """A tool call as a model would request it."""
    return ToolCall(id=call_id, name=name, arguments=arguments)


def ask(*calls: ToolCall, text: str | None = None, usage: Usage | None = None) -> Any:
    """A model reply that requests ``calls``."""
    message = AiMessage(text, tool_calls=list(calls))
    return ModelResponse(message, usage) if usage is not None else message


def tool_messages(messages: Iterable[Any]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def ai_messages(messages: Iterable[Any]) -> list[AiMessage]:
    return [m for m in messages if isinstance(m, AiMessage)]


def content(message: ToolMessage) -> dict[str, Any]:
    """The JSON content of a structured (error) ToolMessage."""
    value = json.loads(message.content)
    assert isinstance(value, dict)
    return value


@dataclass
class EventLog:
    """A listener that keeps every event."""

    events: list[AgentEvent] = field(default_factory=list)

    def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)

    def types(self, turn_id: str | None = None) -> list[AgentEventType]:
        return [e.type for e in self.events if turn_id is None or e.turn_id == turn_id]

    def of(self, type: AgentEventType) -> list[AgentEvent]:
        return [e for e in self.events if e.type is type]


class Recorder(Middleware):
    """Records enter/exit of every hook into a shared list."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def wrap_step(self, turn: Any, call_next: Any) -> Any:
        self.log.append(f"{self.name}:step:in")
        try:
            return call_next()
        finally:
            self.log.append(f"{self.name}:step:out")

    def wrap_model(self, turn: Any, request: Any, call_next: Any) -> Any:
        self.log.append(f"{self.name}:model:in")
        try:
            return call_next(request)
        finally:
            self.log.append(f"{self.name}:model:out")

    def wrap_tool(self, turn: Any, call: Any, call_next: Any) -> Any:
        self.log.append(f"{self.name}:tool:in")
        try:
            return call_next(call)
        finally:
            self.log.append(f"{self.name}:tool:out")


def agent(script: Script, *tools: Any, id: str = "support", **kwargs: Any) -> Agent:
    """An agent around a scripted model."""
    return Agent(id, script.model, instructions="You help.", tools=tools, **kwargs)


def stored_ids(store: InMemoryAgentTurnStore) -> list[str]:
    """Every turn id in the store (reads the in-memory store's internals)."""
    return list(store._records)
