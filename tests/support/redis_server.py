"""A private redis-server on a free loopback port, for tests and benchmarks.

It can be stopped and restarted on the same port and data directory (AOF on), so crash
tests can take Redis away in the middle of a run.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

INSTALL_HINT = (
    "redis-server is not installed: apt-get install redis-server (Debian/Ubuntu) "
    "or brew install redis (macOS)"
)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process owned by the test session."""

    def __init__(self, directory: Path, appendonly: bool = True) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError(INSTALL_HINT)
        self.directory = directory
        self.appendonly = appendonly
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start (or restart) the server and wait until it answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            str(self.directory),
            "--daemonize",
            "no",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "always",
            "--maxmemory-policy",
            "noeviction",
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.2).ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        """Stop and start again on the same port and data directory."""
        self.stop()
        self.start()

    def client(self) -> redis.Redis:
        """A new client to this server."""
        return redis.Redis(port=self.port)
