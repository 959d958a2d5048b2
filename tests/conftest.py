"""For every suite: nothing reaches the host's Redis on 6379 by accident.

Settings default to ``redis://127.0.0.1:6379``. A test that forgets to point a component
(say the module-level Celery app) at its own server would write to the host's Redis;
with this default it gets "connection refused" at once instead. Tests and the processes
they start still set their own URLs explicitly.

Collection also marks what ``make test-fast`` runs (``fast``) and how ``make test`` shares
the tests between pytest-xdist workers (``xdist_group``, read with ``--dist loadgroup``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import RedisServer

os.environ.setdefault("AGENTWORKER_REDIS_URL", "redis://127.0.0.1:1/0")
if "PYTEST_XDIST_WORKER" in os.environ:
    # An xdist worker starts with COLUMNS=80 and LINES=24, which a plain run has not; the
    # CLI's console, made at import, would keep 80 columns where its tests ask for 200.
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

ROOT = Path(__file__).resolve().parents[1]
#: Folders that run in-process with nothing started: ``make test-fast`` takes them whole.
FAST_FOLDERS = ("tests/core/", "tests/repo/")
#: The store contract suite, of which ``make test-fast`` takes the in-memory store's runs.
CONTRACT_FOLDER = "tests/stores/"
#: The parameters that pick a store (tests/support/store_fixtures.py, test_chat_memory).
STORE_PARAMS = ("store_kind", "memory")
#: Suites that start fleets of processes: one at a time, so two fleets never share 2 cores.
PROCESS_FOLDERS = ("tests/e2e/", "tests/http/browser/")
#: Long modules whose tests share only session fixtures: each test is its own group, so
#: the module does not keep one worker busy for minutes while the other idles.
SPREAD_MODULES = ("tests/concurrency/test_one_door_model.py",)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server (no AOF) shared by one test module."""
    s = RedisServer(tmp_path_factory.mktemp("redis"), appendonly=False).start()
    yield s
    s.stop()


def on_the_memory_store(item: pytest.Item) -> bool:
    """True for a contract test parametrized onto the in-memory store."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return any(params.get(name) == "memory" for name in STORE_PARAMS)


def xdist_group(where: str, item: pytest.Item) -> str:
    """The worker group of a test: its module, or one group for every fleet of processes."""
    if where.startswith(PROCESS_FOLDERS) or item.get_closest_marker("e2e") is not None:
        return "processes"
    if where in SPREAD_MODULES:
        return item.nodeid
    # A module stays on one worker: its module-scoped servers start once.
    return where


# tryfirst: xdist reads the groups in its own hook, which must see ours.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of ``make test-fast`` and group the tests for pytest-xdist."""
    for item in items:
        where = item.path.relative_to(ROOT).as_posix()
        if where.startswith(FAST_FOLDERS) or (
            where.startswith(CONTRACT_FOLDER) and on_the_memory_store(item)
        ):
            item.add_marker(pytest.mark.fast)
        item.add_marker(pytest.mark.xdist_group(xdist_group(where, item)))
