"""Real ``celery -A agentworker worker`` / ``beat`` processes for end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

CELERY = str(Path(sys.executable).with_name("celery"))
ROOT = Path(__file__).resolve().parents[2]


class Fleet:
    """Workers and an optional beat, sharing one environment; stops everything it started."""

    def __init__(self, env: Mapping[str, str], logs: Path) -> None:
        self.env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
        self.logs = logs
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.beat: subprocess.Popen[bytes] | None = None
        logs.mkdir(parents=True, exist_ok=True)

    def start_worker(self, name: str, concurrency: int = 1) -> subprocess.Popen[bytes]:
        """One worker process (solo pool: the process that runs the step is the one to kill)."""
        args = [
            CELERY,
            "-A",
            "agentworker",
            "worker",
            "--loglevel=INFO",
            "--pool=solo",
            f"--concurrency={concurrency}",
            "-n",
            f"{name}@%h",
            "-Q",
            "agentworker.steps,agentworker.sweep",
            "--without-gossip",
            "--without-mingle",
        ]
        proc = self._spawn(args, name)
        self.workers[name] = proc
        return proc

    def start_beat(self) -> subprocess.Popen[bytes]:
        """The beat process that schedules sweeps."""
        schedule = self.logs / "celerybeat-schedule"
        args = [CELERY, "-A", "agentworker", "beat", "--loglevel=INFO", f"--schedule={schedule}"]
        self.beat = self._spawn(args, "beat")
        return self.beat

    def kill_worker(self, name: str) -> None:
        """SIGKILL, no goodbye."""
        proc = self.workers.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop_beat(self) -> None:
        """Stop beat."""
        if self.beat is not None:
            _stop(self.beat)
            self.beat = None

    def stop(self) -> None:
        """Stop everything still running."""
        for proc in self.workers.values():
            _stop(proc)
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

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        return subprocess.Popen(args, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
