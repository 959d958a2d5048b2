"""A worker that cannot serve refuses to start, in one line: no loader, invalid settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentworker.fleet.limits import UnsupportedPoolError, check_pool, enforcement, pool_name
from agentworker.settings import Settings
from agentworker.wiring import create_app
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


def test_a_worker_on_a_green_pool_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Celery itself fails without gevent installed; with it, our check refuses the pool.
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        agent_loader="tests.support.fleet_agents:loader",
    )
    app = create_app(settings)
    for pool in ("gevent", "eventlet"):
        with pytest.raises(SystemExit) as caught:
            app.WorkController(pool_cls=pool)
        assert caught.value.code == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"agentworker: the worker cannot start: --pool={pool} is not")
        assert "\n" not in line and "--pool=threads" in line


@pytest.mark.parametrize(
    ("pool", "name"),
    [
        ("prefork", "prefork"),
        ("processes", "prefork"),
        ("solo", "solo"),
        ("threads", "threads"),
        ("celery.concurrency.thread:TaskPool", "threads"),
        ("gevent", "gevent"),
        ("my.pools:Pool", "my.pools:Pool"),
    ],
)
def test_pools_are_named_from_a_name_or_a_path(pool: str, name: str) -> None:
    assert pool_name(pool) == name


def test_pools_are_named_from_their_class() -> None:
    from celery.concurrency import prefork, solo, thread

    assert [pool_name(p.TaskPool) for p in (prefork, solo, thread)] == [
        "prefork",
        "solo",
        "threads",
    ]


def test_each_pool_says_what_enforces_the_step_time_limit() -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/0", step_time_limit=60)
    prefork = enforcement(settings, "prefork")
    assert "stop at 60 s" in prefork and "loses its lease" in prefork
    assert f"SoftTimeLimitExceeded in the step at {settings.task_soft_time_limit:g} s" in prefork
    assert f"kills the child at {settings.task_time_limit:g} s" in prefork
    for pool in ("solo", "threads"):
        said = enforcement(settings, pool)
        assert "Celery's time limits are not enforced" in said and "loses its lease" in said
    with pytest.raises(UnsupportedPoolError):
        check_pool("eventlet")
    check_pool("solo")
