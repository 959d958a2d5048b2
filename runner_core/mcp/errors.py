"""The error of a server that cannot be reached (retryable, naming the server)."""

from __future__ import annotations

from runner_core.tools import ToolCallAbortedError


class MCPServerUnavailableError(ToolCallAbortedError):
    """Raised when an MCP server cannot be reached: opening, listing or calling failed.

    ``retryable``: the turn is scheduled for a retry (RETRY_SCHEDULED), never told to the
    model. ``server`` is the toolset's name, ``doing`` what failed.
    """

    def __init__(self, server: str, doing: str, cause: BaseException) -> None:
        detail = str(cause) or type(cause).__name__
        super().__init__(f"MCP server {server!r} is unavailable ({doing}): {detail}")
        self.server = server
        self.doing = doing
        self.retryable = True
