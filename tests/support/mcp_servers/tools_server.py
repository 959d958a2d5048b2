"""A real MCP server for the tests, on the official SDK: stdio, or ``--http PORT``.

Set by the environment:
- ``MCP_TEST_LOG``: a file where every ``tools/call`` is logged as one JSON line
  (``event``: call, deduplicated, done), with its idempotency key and this process's pid;
- ``MCP_TEST_LEDGER``: a file of results by idempotency key, so a call sent again with a
  key already answered is deduplicated (across restarts and processes);
- ``MCP_TEST_RELEASE``: a file ``hold`` waits for before it answers (after its work);
- ``MCP_TEST_SCHEMA``: a file; when it reads ``v2`` at start, ``add`` takes a third
  parameter (a changed schema).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.mcpserver import Context, MCPServer

KEY = "agentworker/idempotency-key"
server = MCPServer("test-tools")


def _key(ctx: Context) -> str | None:
    meta = ctx.request_context.meta or {}
    value = meta.get(KEY)
    return str(value) if value is not None else None


def _log(event: str, tool: str, key: str | None, **extra: Any) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if not path:
        return
    line = {"event": event, "tool": tool, "key": key, "pid": os.getpid(), "t": time.time()}
    with open(path, "a") as f:
        f.write(json.dumps({**line, **extra}) + "\n")


def _answered(key: str | None) -> str | None:
    path = os.environ.get("MCP_TEST_LEDGER")
    if not key or not path or not os.path.exists(path):
        return None
    for line in Path(path).read_text().splitlines():
        entry = json.loads(line)
        if entry["key"] == key:
            return str(entry["result"])
    return None


def _answer(key: str | None, result: str) -> None:
    path = os.environ.get("MCP_TEST_LEDGER")
    if key and path:
        with open(path, "a") as f:
            f.write(json.dumps({"key": key, "result": result}) + "\n")


async def _once(tool: str, ctx: Context, work: Any) -> str:
    """Run ``work`` once per idempotency key; a repeated key gets the recorded result."""
    key = _key(ctx)
    _log("call", tool, key)
    if (done := _answered(key)) is not None:
        _log("deduplicated", tool, key)
        return done
    result = str(await work())
    _answer(key, result)
    _log("done", tool, key)
    return result


def _schema() -> str:
    path = os.environ.get("MCP_TEST_SCHEMA")
    return Path(path).read_text().strip() if path and os.path.exists(path) else "v1"


if _schema() == "v2":

    @server.tool()
    async def add(a: int, b: int, c: int, ctx: Context) -> int:
        """Add three numbers."""
        _log("call", "add", _key(ctx))
        return a + b + c

else:

    @server.tool()
    async def add(a: int, b: int, ctx: Context) -> int:  # type: ignore[misc]
        """Add two numbers."""
        _log("call", "add", _key(ctx), x_test=(ctx.headers or {}).get("x-test"))
        return a + b


@server.tool()
async def charge(amount: int, ctx: Context) -> str:
    """Charge an amount: a side effect applied once per idempotency key."""

    async def work() -> str:
        return f"charged {amount}"

    return await _once("charge", ctx, work)


@server.tool()
async def hold(tag: str, ctx: Context) -> str:
    """Do the work, then answer only once the release file exists.

    A worker killed while it waits has had its call executed but never got the answer:
    the call sent again with the same key is deduplicated.
    """
    key = _key(ctx)
    _log("call", "hold", key)
    if (done := _answered(key)) is not None:
        _log("deduplicated", "hold", key)
        return done
    result = f"held {tag}"
    _answer(key, result)
    _log("done", "hold", key)
    release = os.environ.get("MCP_TEST_RELEASE")
    while release and not os.path.exists(release):
        await anyio.sleep(0.05)
    return result


@server.tool()
async def fail(message: str, ctx: Context) -> types.CallToolResult:
    """Answer with an error result."""
    _log("call", "fail", _key(ctx))
    text = types.TextContent(type="text", text=message)
    return types.CallToolResult(content=[text], is_error=True)


@server.tool()
async def picture(ctx: Context) -> types.CallToolResult:
    """Answer with a caption, an image and a resource link."""
    _log("call", "picture", _key(ctx))
    return types.CallToolResult(
        content=[
            types.TextContent(type="text", text="a red dot"),
            types.ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
            types.ResourceLink(type="resource_link", uri="file:///dot.png", name="dot.png"),
        ]
    )


@server.tool()
async def noop(ctx: Context) -> str:
    """Do nothing (the benchmark's call)."""
    return "ok"


if __name__ == "__main__":
    _log("start", "", None)
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
