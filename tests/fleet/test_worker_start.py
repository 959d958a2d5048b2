"""A worker that cannot serve refuses to start, in one line: no loader, invalid settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.servers import CELERY, free_port

ROOT = Path(__file__).resolve().parents[2]


def environment(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTWORKER_")}
    # A broker nobody listens on: the checks run before any connection.
    return {**env, "AGENTWORKER_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", **values}


def test_a_worker_without_an_agent_loader_exits_with_one_line() -> None:
    done = subprocess.run(
        [CELERY, "-A", "agentworker", "worker", "--pool=solo", "--loglevel=ERROR"],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("agentworker:")]
    assert ours == [
        "agentworker: the worker cannot start: AGENTWORKER_AGENT_LOADER is not set: set it to "
        "'package.module:attribute' naming your AgentLoader (or a function returning one), "
        "e.g. my_agents:loader"
    ]
    assert "Traceback" not in done.stderr


def test_a_loader_that_does_not_import_is_named() -> None:
    done = subprocess.run(
        [CELERY, "-A", "agentworker", "worker", "--pool=solo", "--loglevel=ERROR"],
        cwd=ROOT,
        env=environment(AGENTWORKER_AGENT_LOADER="no_such_module:loader"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "AGENTWORKER_AGENT_LOADER='no_such_module:loader'" in done.stderr
    assert "Traceback" not in done.stderr


def test_invalid_settings_exit_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import agentworker.fleet.app"],
        cwd=ROOT,
        env=environment(AGENTWORKER_LEASE_SECONDS="-1", AGENTWORKER_STEP_TIME_LIMIT="9000"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("agentworker: invalid settings: AGENTWORKER_LEASE_SECONDS")
