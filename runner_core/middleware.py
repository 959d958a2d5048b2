"""Middleware around steps, model calls and tool calls, in onion order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from runner_core.messages import ToolCall, ToolMessage
from runner_core.models.base import ModelRequest, ModelResponse

if TYPE_CHECKING:
    from runner_core.turn import AgentStepResult, AgentTurn

T = TypeVar("T")


class Middleware:
    """Base class of no-op hooks; override one and call ``call_next`` (or short-circuit)."""

    def wrap_step(
        self, turn: AgentTurn, call_next: Callable[[], AgentStepResult]
    ) -> AgentStepResult:
        """Around one step (after the cancel, lease, limit and budget checks)."""
        return call_next()

    def wrap_model(
        self,
        turn: AgentTurn,
        request: ModelRequest,
        call_next: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        """Around one model call; may change the request or answer without the model."""
        return call_next(request)

    def wrap_tool(
        self, turn: AgentTurn, call: ToolCall, call_next: Callable[[ToolCall], ToolMessage]
    ) -> ToolMessage:
        """Around one tool execution; may change the call or answer without the tool."""
        return call_next(call)


def chain_step(
    middleware: Sequence[Middleware], turn: AgentTurn, inner: Callable[[], AgentStepResult]
) -> AgentStepResult:
    """Run ``inner`` inside every ``wrap_step``, the first middleware outermost."""
    call = inner
    for mw in reversed(middleware):
        call = _bind_step(mw, turn, call)
    return call()


def _bind_step(
    mw: Middleware, turn: AgentTurn, nxt: Callable[[], AgentStepResult]
) -> Callable[[], AgentStepResult]:
    return lambda: mw.wrap_step(turn, nxt)


def chain_model(
    middleware: Sequence[Middleware],
    turn: AgentTurn,
    inner: Callable[[ModelRequest], ModelResponse],
) -> Callable[[ModelRequest], ModelResponse]:
    """``inner`` wrapped by every ``wrap_model``, the first middleware outermost."""
    call = inner
    for mw in reversed(middleware):
        call = _bind_model(mw, turn, call)
    return call


def _bind_model(
    mw: Middleware, turn: AgentTurn, nxt: Callable[[ModelRequest], ModelResponse]
) -> Callable[[ModelRequest], ModelResponse]:
    return lambda request: mw.wrap_model(turn, request, nxt)


def chain_tool(
    middleware: Sequence[Middleware],
    turn: AgentTurn,
    inner: Callable[[ToolCall], ToolMessage],
) -> Callable[[ToolCall], ToolMessage]:
    """``inner`` wrapped by every ``wrap_tool``, the first middleware outermost."""
    call = inner
    for mw in reversed(middleware):
        call = _bind_tool(mw, turn, call)
    return call


def _bind_tool(
    mw: Middleware, turn: AgentTurn, nxt: Callable[[ToolCall], ToolMessage]
) -> Callable[[ToolCall], ToolMessage]:
    return lambda call: mw.wrap_tool(turn, call, nxt)
