"""Local processes for demos and tests: a private redis-server and Celery workers/beat.

The server can be stopped and restarted on the same port and data directory (AOF on), so
crash tests can take Redis away in the middle of a run.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import redis
from kombu.connection import Connection

from agentworker.fleet.queues import default_pool

CELERY = str(Path(sys.executable).with_name("celery"))
ROOT = Path(__file__).resolve().parents[2]

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
    """One redis-server process owned by a test session or a demo; it may be restarted."""

    def __init__(
        self, directory: Path, *extra: str, appendonly: bool = True, fsync: str = "always"
    ) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError(INSTALL_HINT)
        self.directory = directory
        self.extra = extra
        self.appendonly = appendonly
        self.fsync = fsync
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
            self.fsync,
            "--maxmemory-policy",
            "noeviction",
            *self.extra,
        ]
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(port=self.port, socket_timeout=0.2).ping():
                    return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"redis-server did not start, see {log.name}") from None
                time.sleep(0.02)

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (Redis flushes its AOF and exits), or SIGKILL with ``kill``."""
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.process = None

    def restart(self, kill: bool = False) -> None:
        """Stop and start again on the same port and data directory."""
        self.stop(kill)
        self.start()

    def client(self) -> redis.Redis:
        """A new client to this server."""
        return redis.Redis(host="127.0.0.1", port=self.port)


RABBITMQ = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class RabbitMQServer:
    """A private RabbitMQ node on free loopback ports (its own epmd port and data dir)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port, self.dist_port, self.epmd_port = free_port(), free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The AMQP URL (guest may log in over loopback)."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def start(self, timeout: float = 60.0) -> RabbitMQServer:
        """Start the node and wait until it accepts AMQP connections."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "enabled_plugins").write_text("[].")
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": f"agentworker-{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.directory / "none"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.directory / "none-advanced.config"),
            "RABBITMQ_PID_FILE": str(self.directory / "pid"),
        }
        log = (self.directory / "server.log").open("ab")
        self.process = subprocess.Popen([RABBITMQ], env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with Connection(self.url, connect_timeout=1) as conn:  # type: ignore[no-untyped-call]
                    conn.connect()
                    return self
            except Exception:  # noqa: BLE001 - not up yet
                if self.process.poll() is not None:
                    break
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"rabbitmq-server did not start, see {log.name}")

    def stop(self) -> None:
        """Stop the node, then the epmd it started on its own port."""
        if self.process is not None:
            stop_process(self.process)
            self.process = None
        epmd = shutil.which("epmd")
        if epmd:
            subprocess.run(
                [epmd, "-port", str(self.epmd_port), "-kill"],
                capture_output=True,
                check=False,
                timeout=10,
            )


class Fleet:
    """Workers and an optional beat, sharing one environment; stops everything it started."""

    def __init__(self, env: Mapping[str, str], logs: Path) -> None:
        self.env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
        self.logs = logs
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.beat: subprocess.Popen[bytes] | None = None
        logs.mkdir(parents=True, exist_ok=True)

    def start_worker(
        self,
        name: str,
        concurrency: int = 1,
        *,
        pool: str | None = None,
        queues: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """One worker (a process group: with prefork, its children too).

        The pool by default suits the broker (``agentworker.fleet.queues.default_pool``): solo on
        Redis (one process, the one that runs the step), prefork on RabbitMQ, where the
        solo pool stalls. No ``queues`` (no ``-Q``): it consumes every queue declared.
        """
        pool = pool or default_pool(self.broker)
        args = [CELERY, "-A", "agentworker", "worker", "--loglevel=INFO", f"--pool={pool}"]
        args += [f"--concurrency={concurrency}", "-n", f"{name}@%h"]
        if queues is not None:
            args += ["-Q", queues]
        args += ["--without-gossip", "--without-mingle"]
        proc = self._spawn(args, name, group=True)
        self.workers[name] = proc
        return proc

    @property
    def broker(self) -> str:
        """The broker URL the processes use (as ``Settings.broker`` reads it)."""
        env = self.env
        return env.get("AGENTWORKER_BROKER_URL") or env.get(
            "AGENTWORKER_REDIS_URL", "redis://127.0.0.1:6379/0"
        )

    def start_beat(self) -> subprocess.Popen[bytes]:
        """The beat process that schedules sweeps."""
        schedule = self.logs / "celerybeat-schedule"
        args = [CELERY, "-A", "agentworker", "beat", "--loglevel=INFO", f"--schedule={schedule}"]
        self.beat = self._spawn(args, "beat")
        return self.beat

    def kill_worker(self, name: str) -> None:
        """SIGKILL to the worker's process group (prefork children too), no goodbye."""
        proc = self.workers.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def stop_beat(self) -> None:
        """Stop beat."""
        if self.beat is not None:
            stop_process(self.beat)
            self.beat = None

    def stop(self) -> None:
        """Stop everything still running."""
        for proc in self.workers.values():
            stop_process(proc)
        self.workers.clear()
        self.stop_beat()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every worker logged that it is ready."""
        deadline = time.monotonic() + timeout
        pending = set(self.workers)
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                if "ready." in (self.logs / f"{name}.log").read_text(errors="replace"):
                    pending.discard(name)
            time.sleep(0.1)
        if pending:
            raise RuntimeError(f"workers not ready: {sorted(pending)}; see {self.logs}")

    def _spawn(self, args: list[str], name: str, *, group: bool = False) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        return subprocess.Popen(
            args,
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=group,
        )


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
