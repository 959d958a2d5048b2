"""MCP tool servers as agent tools: ``MCPToolset.stdio(...)`` and ``MCPToolset.http(...)``.

Needs the ``mcp`` extra (``pip install 'agentworker[mcp]'``); nothing else in runner_core
imports this package. See docs/mcp.md for what is durable.
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401 - fail here, with the fix, rather than at first use
except ImportError as exc:  # pragma: no cover - the base install
    raise ImportError(
        "runner_core.mcp needs the mcp package: pip install 'agentworker[mcp]'"
    ) from exc

from runner_core.errors import ToolSchemaChangedError
from runner_core.mcp.errors import MCPServerUnavailableError
from runner_core.mcp.tool import IDEMPOTENCY_KEY, MCPTool, fingerprint
from runner_core.mcp.toolset import MCPToolset

__all__ = [
    "IDEMPOTENCY_KEY",
    "MCPServerUnavailableError",
    "MCPTool",
    "MCPToolset",
    "ToolSchemaChangedError",
    "fingerprint",
]
