"""Agents on the test MCP server for real workers (AGENTWORKER_AGENT_LOADER).

``MCP_E2E_URL`` is the server's Streamable HTTP endpoint; ``MCP_E2E_DIR`` holds the
files the stdio servers the workers start log to (see tests/support/mcp_fixtures.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runner_core import (
    Agent,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelRequest,
    ToolCall,
    ToolMessage,
)
from runner_core.mcp import MCPToolset
from tests.support.mcp_fixtures import ServerFiles, http_toolset, stdio_toolset


def files(directory: Path) -> ServerFiles:
    """The server files of the e2e run (shared by the test and its workers)."""
    return ServerFiles(
        directory / "mcp-calls.log",
        directory / "mcp-ledger.jsonl",
        directory / "mcp-release",
        directory / "mcp-schema",
    )


def _script(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """Make ``calls`` one per response, then answer with the results."""

    def fn(request: ModelRequest) -> AiMessage:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        n = len(results)
        if n < len(calls):
            name, args = calls[n]
            return AiMessage(tool_calls=[ToolCall(id=f"c{n}", name=name, arguments=args)])
        return AiMessage("done: " + " | ".join(m.content for m in results))

    return FunctionModel(fn)


def agents() -> list[Agent]:
    """The e2e MCP agents: both transports, an approval, a call that holds its answer."""
    stdio = stdio_toolset(files(Path(os.environ["MCP_E2E_DIR"])))
    http: MCPToolset = http_toolset(os.environ["MCP_E2E_URL"])
    gated = http_toolset(os.environ["MCP_E2E_URL"], requires_approval={"charge"})
    two_calls = (("add", {"a": 1, "b": 2}), ("charge", {"amount": 7}))
    gated_stdio = stdio_toolset(files(Path(os.environ["MCP_E2E_DIR"])), requires_approval=True)
    late = http_toolset(os.environ["MCP_E2E_LATE_URL"], name="late-billing", connect_timeout=3)
    return [
        Agent("mcp-stdio-gated", _script(("add", {"a": 2, "b": 2})), tools=[gated_stdio]),
        Agent("mcp-http-two", _script(*two_calls), tools=[gated]),
        Agent("mcp-late", _script(("add", {"a": 5, "b": 5})), tools=[late]),
        Agent("mcp-stdio", _script(*two_calls), tools=[stdio]),
        Agent("mcp-http", _script(*two_calls), tools=[http]),
        Agent("mcp-approval", _script(("charge", {"amount": 9})), tools=[gated]),
        Agent("mcp-hold", _script(("hold", {"tag": "h"})), tools=[http]),
    ]


def loader() -> InMemoryAgentLoader:
    """The loader workers import."""
    return InMemoryAgentLoader(agents())
