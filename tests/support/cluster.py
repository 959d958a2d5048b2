"""A private Redis Cluster for tests and demos: three masters on free loopback ports.

``redis-server --cluster-enabled yes`` on each port, ``redis-cli --cluster create`` to
assign the 16,384 slots, then a wait for ``cluster_state:ok`` on every node. No
persistence (the cluster lives as long as the test session), no replicas.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

from tests.support.servers import INSTALL_HINT


def cluster_port() -> int:
    """A free loopback port whose cluster bus port (+10,000) is free too, both <= 65,535."""
    for _ in range(200):
        port = random.randint(20_000, 45_000)
        if _free(port) and _free(port + 10_000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class LocalCluster:
    """``masters`` redis-server processes joined into one cluster; stops what it started."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
            raise RuntimeError(INSTALL_HINT)
        self.directory = directory
        self.ports = [cluster_port() for _ in range(masters)]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:<port>,...``: every node as a seed."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def node(self, port: int) -> redis.Redis:
        """A plain client of one node (INFO, DBSIZE, CLUSTER ...)."""
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def start(self) -> LocalCluster:
        """Start the nodes, create the cluster and wait until every node says it is ok."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for port in self.ports:
            self.processes.append(self._spawn(port))
        for port in self.ports:
            self._wait(lambda p=port: bool(self.node(p).ping()), f"node {port} to answer")
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        create = ["redis-cli", "--cluster", "create", *nodes]
        create += ["--cluster-replicas", "0", "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout!r}")
        for port in self.ports:
            self._wait(lambda p=port: self._ok(p), f"cluster_state:ok on {port}")
        return self

    def stop(self) -> None:
        """SIGTERM every node (SIGKILL after 5 s)."""
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.processes = []

    def flush(self) -> None:
        """Empty every node."""
        for port in self.ports:
            self.node(port).flushall()

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
        args += ["--cluster-enabled", "yes"]
        args += ["--cluster-config-file", str(self.directory / f"nodes-{port}.conf")]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        args += ["--maxmemory-policy", "noeviction", "--daemonize", "no"]
        log = (self.directory / f"redis-{port}.log").open("ab")
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

    def _ok(self, port: int) -> bool:
        info = self.node(port).execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text

    def _wait(self, ready: object, what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if callable(ready) and ready():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"gave up waiting for {what} (logs in {self.directory})")
            time.sleep(0.05)
