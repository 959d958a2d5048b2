"""The test MCP server (tests/support/mcp_servers) over stdio and Streamable HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runner_core.mcp import MCPToolset
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "support" / "mcp_servers" / "tools_server.py"


@dataclass(frozen=True)
class ServerFiles:
    """The files the test server logs to and reads (see tools_server.py)."""

    log: Path
    ledger: Path
    release: Path
    schema: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "MCP_TEST_LOG": str(self.log),
            "MCP_TEST_LEDGER": str(self.ledger),
            "MCP_TEST_RELEASE": str(self.release),
            "MCP_TEST_SCHEMA": str(self.schema),
        }

    def entries(self, event: str | None = None, tool: str | None = None) -> list[dict[str, Any]]:
        """The server's log lines, of one event and tool when given."""
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [
            e
            for e in lines
            if (event is None or e["event"] == event) and (tool is None or e["tool"] == tool)
        ]

    def wait_for(self, event: str, tool: str, count: int = 1, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.entries(event, tool)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {event} of {tool} in {self.entries()}")
            time.sleep(0.02)


class HttpServer:
    """The test server on a loopback port, over Streamable HTTP; it may be restarted."""

    def __init__(self, files: ServerFiles, port: int | None = None) -> None:
        self.files = files
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> HttpServer:
        env = {**os.environ, **self.files.env}
        out = open(self.files.log.with_suffix(".http.out"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(self.port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.close()
        deadline = time.monotonic() + 30
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the MCP test server did not start on {self.port}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def release(self) -> None:
        """Let every held call answer (tools_server.py ``hold``)."""
        self.files.release.touch()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def stdio_toolset(files: ServerFiles, **options: Any) -> MCPToolset:
    """A toolset that starts the test server over stdio (with the files' environment)."""
    env = {**files.env, "PYTHONPATH": str(ROOT)}
    options.setdefault("name", "test-tools")
    return MCPToolset.stdio(sys.executable, [str(SERVER)], env=env, **options)


def http_toolset(server: HttpServer | str, **options: Any) -> MCPToolset:
    """A toolset on the test server over Streamable HTTP."""
    options.setdefault("name", "test-tools")
    url = server if isinstance(server, str) else server.url
    return MCPToolset.http(url, headers={"X-Test": "1"}, **options)


def kill_stdio_servers(files: ServerFiles) -> None:
    """SIGKILL every stdio server process the log names (a server restarted under us)."""
    for pid in {e["pid"] for e in files.entries()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture()
def mcp_files(tmp_path: Path) -> ServerFiles:
    return ServerFiles(
        tmp_path / "mcp-calls.log",
        tmp_path / "mcp-ledger.jsonl",
        tmp_path / "mcp-release",
        tmp_path / "mcp-schema",
    )


@pytest.fixture()
def mcp_http(mcp_files: ServerFiles) -> Iterator[HttpServer]:
    server = HttpServer(mcp_files).start()
    try:
        yield server
    finally:
        server.stop()
