"""``MCPToolset``: the tools of one MCP server (stdio or Streamable HTTP) for an agent."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp import Client, MCPError, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client

from runner_core._engine import aio
from runner_core.context import AgentToolContext
from runner_core.errors import InvalidArgumentError, ToolSchemaChangedError
from runner_core.mcp.errors import MCPServerUnavailableError
from runner_core.mcp.results import result_text
from runner_core.mcp.session import Opener, OpenSession, ServerSession
from runner_core.mcp.tool import IDEMPOTENCY_KEY, MCPTool
from runner_core.tools import ApprovalPolicy, TimeoutBehavior, ToolError

#: ``requires_approval``: every tool, none, the named ones (server names) or a policy.
Approval = bool | Collection[str] | ApprovalPolicy

CLIENT_INFO = types.Implementation(name="agentworker", version="1")


@dataclass(frozen=True, slots=True)
class _Listed:
    """The server's tools in one process, from one listing."""

    pid: int
    listing: int
    listed_at: float
    tools: tuple[MCPTool, ...]


class MCPToolset:
    """The tools one MCP server lists, for ``Agent(tools=[...])`` next to plain tools.

    Nothing is contacted when it or the agent is built: the server's ``tools/list`` is read
    on first use in each process (the first model request or tool call of a turn) and again
    every ``list_ttl`` seconds and whenever the session is re-opened. A server that cannot
    be reached then is a retryable error naming it (``MCPServerUnavailableError``).

    ``prefix`` goes before each tool's name as the model sees it; ``allowed`` keeps only the
    named tools (server names). ``requires_approval``: True, a set of server tool names, or
    an approval policy. ``timeout``/``timeout_behavior`` bound each call as for our tools;
    ``connect_timeout`` bounds opening a session and listing its tools.
    """

    def __init__(
        self,
        name: str,
        opener: Opener,
        *,
        prefix: str = "",
        allowed: Collection[str] | None = None,
        requires_approval: Approval = False,
        timeout: float | None = None,
        timeout_behavior: TimeoutBehavior | None = None,
        connect_timeout: float = 10.0,
        list_ttl: float | None = 60.0,
    ) -> None:
        if not name:
            raise InvalidArgumentError("an MCP toolset needs a name", field="name")
        if not connect_timeout > 0:
            raise InvalidArgumentError(
                f"MCP toolset {name!r}: connect_timeout must be positive, not {connect_timeout!r}",
                field="connect_timeout",
            )
        #: The server's name in errors, retry reasons and spans.
        self.name = name
        self.prefix = prefix
        self.allowed = None if allowed is None else frozenset(allowed)
        self.requires_approval = requires_approval
        self.timeout = timeout
        self.timeout_behavior: TimeoutBehavior | None = timeout_behavior
        self.connect_timeout = float(connect_timeout)
        #: Seconds a listing is used before ``tools/list`` is read again (None: until the
        #: session is re-opened).
        self.list_ttl = list_ttl
        self.session = ServerSession(name, opener, connect_timeout=self.connect_timeout)
        self._listed: _Listed | None = None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> MCPToolset:
        """A server this process starts as ``command *args`` and talks to over stdio.

        ``env`` is added to a minimal environment (the SDK's default: PATH, HOME, ...).
        """
        params = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
        )

        def opener() -> Client:
            return Client(stdio_client(params), cache=None, client_info=CLIENT_INFO)

        return cls(name or _stdio_name(command, args), opener, **options)

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        **options: Any,
    ) -> MCPToolset:
        """A server at ``url`` over Streamable HTTP, ``headers`` sent with every request."""
        sent = dict(headers or {})

        @asynccontextmanager
        async def opener() -> AsyncIterator[Client]:
            timeout = httpx2.Timeout(30.0, read=300.0)
            async with httpx2.AsyncClient(headers=sent, timeout=timeout) as http:
                transport = streamable_http_client(url, http_client=http)
                async with Client(transport, cache=None, client_info=CLIENT_INFO) as client:
                    yield client

        return cls(name or _http_name(url), opener, **options)

    # -- the agent's side ------------------------------------------------------------------
    def agent_tools(self) -> tuple[MCPTool, ...]:
        """The server's tools for this process's agents (listed when due; blocking)."""
        listed, live = self._listed, self.session.current()
        if live is not None and (listed is None or live.listing != listed.listing):
            return self._tools_of(live).tools  # re-opened (and listed) meanwhile: no I/O
        if listed is not None and listed.pid == os.getpid() and self._fresh(listed.listed_at):
            return listed.tools
        try:
            live = aio.run(self.session.tools(self.list_ttl), timeout=3 * self.connect_timeout)
        except aio.DeadlineExceeded as exc:
            raise MCPServerUnavailableError(self.name, "listing tools", exc) from None
        return self._tools_of(live).tools

    def _fresh(self, listed_at: float) -> bool:
        return self.list_ttl is None or time.monotonic() - listed_at <= self.list_ttl

    def _tools_of(self, live: OpenSession) -> _Listed:
        listed = self._listed
        pid = os.getpid()
        if listed is not None and listed.pid == pid and listed.listing == live.listing:
            return listed
        tools = tuple(
            self._tool(t) for t in live.tools if self.allowed is None or t.name in self.allowed
        )
        listed = self._listed = _Listed(pid, live.listing, live.listed_at, tools)
        return listed

    def _tool(self, listed: types.Tool) -> MCPTool:
        approval = self.requires_approval
        if isinstance(approval, str):  # one name, not a collection of its letters
            approval = listed.name == approval
        elif not (isinstance(approval, bool) or callable(approval)):
            approval = listed.name in approval
        return MCPTool(
            self,
            listed,
            name=self.prefix + listed.name,
            requires_approval=approval,
            timeout=self.timeout,
            timeout_behavior=self.timeout_behavior,
        )

    # -- a call ----------------------------------------------------------------------------
    async def call(self, tool: MCPTool, arguments: dict[str, Any], ctx: AgentToolContext) -> str:
        """Send ``tools/call`` with the call's idempotency key; the result's text.

        An ``isError`` result or a refusal by the server is a ``ToolError`` (the model is
        told); a changed schema is a ``ToolSchemaChangedError`` (the turn fails).
        """
        _mark_span(self.name)

        def check(live: OpenSession) -> None:
            current = live.fingerprints.get(tool.remote_name)
            if current != tool.fingerprint:
                raise ToolSchemaChangedError(
                    ctx.turn_id, tool.name, self.name, tool.fingerprint, current or "absent"
                )

        meta = {IDEMPOTENCY_KEY: ctx.idempotency_key}
        try:
            result = await self.session.call(tool.remote_name, arguments, meta, check)
        except MCPError as exc:
            raise ToolError(f"MCP server {self.name!r} refused the call: {exc}") from exc
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"tool {tool.name!r} failed")
        return text

    async def aclose(self) -> None:
        """Close this process's session to the server (on the process loop)."""
        await self.session.aclose()

    def close(self) -> None:
        """Close this process's session to the server (blocking)."""
        aio.run(self.aclose(), timeout=3 * self.connect_timeout)

    def __repr__(self) -> str:
        return f"MCPToolset({self.name!r})"


def _stdio_name(command: str, args: Sequence[str]) -> str:
    scripts = [a for a in args if not a.startswith("-")]
    return os.path.basename(scripts[-1] if scripts else command)


def _http_name(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.netloc}{parts.path}" or url


def _mark_span(server: str) -> None:
    """Name the server on the current ``execute_tool`` span (when traces are on)."""
    try:
        from opentelemetry import trace
    except ImportError:  # pragma: no cover - the package is optional
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute("agentworker.mcp.server", server)
        span.set_attribute("mcp.method.name", "tools/call")
