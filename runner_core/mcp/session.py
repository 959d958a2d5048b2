"""One MCP server's session in this process, owned by a task on the process event loop.

The SDK's client is an async context manager whose transport lives in the task that
entered it, so one task per session enters it and waits; calls from any task of the loop
share it. It is opened on first use, reused across steps and turns, and re-opened once
when the connection breaks. A forked child never reuses its parent's session (nor its
stdio subprocess): it opens its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError, types
from mcp_types.jsonrpc import CONNECTION_CLOSED

from runner_core.mcp.errors import MCPServerUnavailableError
from runner_core.mcp.tool import fingerprint

log = logging.getLogger("runner_core.mcp")

Opener = Callable[[], AbstractAsyncContextManager[Client]]
"""Enters a connected client (the transport and the handshake); one per session."""

#: Pages of ``tools/list`` read at most (a guard against a server that never ends).
MAX_PAGES = 100

_BROKEN = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    httpx2.TransportError,
    OSError,
)


def broken(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection is gone (not that the server refused a call)."""
    exc = _plain(exc)
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(exc, _BROKEN)


@dataclass(eq=False)
class OpenSession:
    """An open session: the client, the task owning it, and the tools it listed."""

    client: Client
    task: asyncio.Task[None]
    stop: asyncio.Event
    tools: tuple[types.Tool, ...] = ()
    listed_at: float = 0.0
    #: Bumped at each listing, so a caller sees whether its tools are still current.
    listing: int = 0
    #: The listed tools' fingerprints, by the server's tool name.
    fingerprints: dict[str, str] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        """Whether the session may still be used (not given up, its task running)."""
        return not (self.task.done() or self.stop.is_set())


class ServerSession:
    """The session to one server in this process (``server``: its name in errors)."""

    def __init__(self, server: str, opener: Opener, *, connect_timeout: float) -> None:
        self.server = server
        self._opener = opener
        self.connect_timeout = connect_timeout
        self._pid = os.getpid()
        self._open: OpenSession | None = None
        self._lock: asyncio.Lock | None = None
        self._listings = 0
        #: Sessions opened in this process (a re-open counts).
        self.opened = 0

    def _here(self) -> None:
        """In a forked child, forget the parent's session: it is not this process's."""
        if self._pid != os.getpid():
            self._pid, self._open, self._lock, self.opened = os.getpid(), None, None, 0

    def current(self) -> OpenSession | None:
        """The open session of this process, if there is one (no I/O)."""
        self._here()
        live = self._open
        return live if live is not None and live.alive else None

    async def session(self) -> OpenSession:
        """The open session, opening one (and listing its tools) when there is none."""
        self._here()
        live = self._open
        if live is not None and live.alive:
            return live
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            live = self._open
            if live is None or not live.alive:
                self._open = None
                live = self._open = await self._start()
            return live

    async def tools(self, max_age: float | None) -> OpenSession:
        """The open session, its listing read again when older than ``max_age`` seconds."""
        live = await self.session()
        if max_age is None or time.monotonic() - live.listed_at <= max_age:
            return live
        try:
            await self._list(live)
            return live
        except Exception as exc:
            if not broken(exc):
                raise MCPServerUnavailableError(self.server, "listing tools", exc) from exc
            self.drop(live)
        return await self.session()  # re-opened once: it lists on opening

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any],
        check: Callable[[OpenSession], None],
    ) -> types.CallToolResult:
        """``tools/call`` on the session, once more on a fresh one if the connection broke.

        ``check`` sees the session before each send (a re-opened one lists anew) and raises
        to refuse the call.
        """
        live = await self.session()
        check(live)
        try:
            return await live.client.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]
        except Exception as exc:
            if not broken(exc):
                raise
            log.info("MCP server %r: connection lost (%s); re-opening", self.server, exc)
            self.drop(live)
        live = await self.session()
        check(live)
        try:
            return await live.client.call_tool(name, arguments, meta=meta)  # type: ignore[arg-type]
        except Exception as exc:
            if not broken(exc):
                raise
            self.drop(live)
            raise MCPServerUnavailableError(self.server, f"calling {name!r}", exc) from exc

    def drop(self, live: OpenSession) -> None:
        """Give a session up (its task closes it in the background)."""
        if self._open is live:
            self._open = None
        live.stop.set()

    async def aclose(self) -> None:
        """Close this process's session, if any, and wait for it to end."""
        self._here()
        live, self._open = self._open, None
        if live is not None:
            live.stop.set()
            await asyncio.wait({live.task}, timeout=self.connect_timeout)

    # -- opening ---------------------------------------------------------------------------
    async def _start(self) -> OpenSession:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        stop = asyncio.Event()
        task = loop.create_task(self._own(ready, stop), name=f"mcp session {self.server}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
            live = OpenSession(client, task, stop)
            await asyncio.wait_for(self._list(live), self.connect_timeout)
        except asyncio.CancelledError:
            stop.set()
            raise
        except Exception as exc:
            stop.set()
            if isinstance(exc, MCPServerUnavailableError):
                raise
            raise MCPServerUnavailableError(self.server, "opening the session", exc) from exc
        self.opened += 1
        return live

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Enter the client, hand it over, hold it until told to stop (or it breaks)."""
        try:
            async with self._opener() as client:
                if ready.done():  # given up on meanwhile
                    return
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(_plain(exc))
            elif not isinstance(exc, asyncio.CancelledError):
                log.info("MCP server %r: the session ended: %r", self.server, exc)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise

    async def _list(self, live: OpenSession) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await live.client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self._listings += 1
        live.fingerprints = {t.name: fingerprint(t.name, t.input_schema) for t in tools}
        live.tools, live.listed_at, live.listing = tuple(tools), time.monotonic(), self._listings


def _plain(exc: BaseException) -> BaseException:
    """A failure to open as one exception (an anyio task group wraps it in a group)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, asyncio.CancelledError):
        return ConnectionError("the session was cancelled while opening")
    return exc
