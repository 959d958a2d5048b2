"""Helpers shared by the unit suite: scripted models, event logs, recording middleware."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from runner_core import (
    Agent,
    AiMessage,
    InMemoryAgentTurnStore,
    Middleware,
    ToolMessage,
)
from runner_core.testing import EventLog, ScriptedModel, asks, tool_call

__all__ = [
    "EventLog",
    "Recorder",
    "Script",
    "agent",
    "ai_messages",
    "ask",
    "call",
    "content",
    "stored_ids",
    "tool_messages",
]


class Script(ScriptedModel):
    """A ``ScriptedModel`` the suites pass around as ``script.model`` next to its records."""

    @property
    def model(self) -> ScriptedModel:
        return self


#: The suites' short names for ``runner_core.testing``'s helpers.
call, ask = tool_call, asks


def tool_messages(messages: Iterable[Any]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def ai_messages(messages: Iterable[Any]) -> list[AiMessage]:
    return [m for m in messages if isinstance(m, AiMessage)]


def content(message: ToolMessage) -> dict[str, Any]:
    """The JSON content of a structured (error) ToolMessage."""
    value = json.loads(message.content)
    assert isinstance(value, dict)
    return value


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
