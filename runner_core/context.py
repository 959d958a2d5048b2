"""``AgentToolContext``: what a running tool may know and do."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from runner_core.errors import AgentWorkerError

_CURRENT: ContextVar[AgentToolContext | None] = ContextVar("agent_tool_context", default=None)

_MISSING = object()


class UserInputRequested(AgentWorkerError):
    """Raised inside a tool by ``request_user_input``; the runner suspends the turn."""

    def __init__(self, prompt: str, schema: dict[str, Any] | None) -> None:
        super().__init__(prompt)
        self.prompt = prompt
        self.schema = schema


@dataclass
class AgentToolContext:
    """The context of one tool call; ``AgentToolContext.current()`` inside a tool."""

    turn_id: str
    call_id: str
    tool_name: str
    metadata: Mapping[str, Any]
    submitted_input: Any = None
    #: The agent's per-process dependencies (``Agent(deps=...)``); None when it has none.
    deps: Any = None
    _cancel_check: Callable[[], bool] = field(default=lambda: False, repr=False)
    _progress: Callable[[str, float | None], None] = field(
        default=lambda message, fraction: None, repr=False
    )
    _has_input: bool = field(default=False, repr=False)

    @property
    def idempotency_key(self) -> str:
        """Stable for this call across retries, restores and workers: ``turn_id:call_id``."""
        return f"{self.turn_id}:{self.call_id}"

    @staticmethod
    def current() -> AgentToolContext:
        """The context of the tool call running now; ``RuntimeError`` outside one."""
        ctx = _CURRENT.get()
        if ctx is None:
            raise RuntimeError("AgentToolContext.current() called outside a tool call")
        return ctx

    def is_cancellation_requested(self) -> bool:
        """True once someone asked to cancel the turn (reads the store)."""
        return self._cancel_check()

    def report_progress(self, message: str, fraction: float | None = None) -> None:
        """Emit a TOOL_PROGRESS event."""
        self._progress(message, fraction)

    def request_user_input(self, prompt: str, schema: dict[str, Any] | None = None) -> Any:
        """Return the submitted data, or suspend the turn (WAITING_FOR_USER) to ask for it.

        The tool runs again from the start once the user answers, so work done before
        this call must be idempotent (use ``idempotency_key``).
        """
        if self._has_input:
            return self.submitted_input
        raise UserInputRequested(prompt, schema)

    def activate(self) -> object:
        """Make this the current context; returns a token for ``deactivate``."""
        return _CURRENT.set(self)

    @staticmethod
    def deactivate(token: object) -> None:
        """Restore the previous context."""
        _CURRENT.reset(token)  # type: ignore[arg-type]
