"""For every suite: nothing reaches the host's Redis on 6379 by accident.

Settings default to ``redis://127.0.0.1:6379``. A test that forgets to point a component
(say the module-level Celery app) at its own server would write to the host's Redis;
with this default it gets "connection refused" at once instead. Tests and the processes
they start still set their own URLs explicitly.

Collection also marks what ``make test-fast`` runs (``fast``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import RedisServer

os.environ.setdefault("AGENTWORKER_REDIS_URL", "redis://127.0.0.1:1/0")

ROOT = Path(__file__).resolve().parents[1]
#: Folders that run in-process with nothing started: ``make test-fast`` takes them whole.
FAST_FOLDERS = ("tests/core/", "tests/repo/")
#: The store contract suite, of which ``make test-fast`` takes the in-memory store's runs.
CONTRACT_FOLDER = "tests/stores/"
#: The parameters that pick a store (tests/support/store_fixtures.py, test_chat_memory).
STORE_PARAMS = ("store_kind", "memory")


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of ``make test-fast``."""
    for item in items:
        where = item.path.relative_to(ROOT).as_posix()
        if where.startswith(FAST_FOLDERS) or (
            where.startswith(CONTRACT_FOLDER) and on_the_memory_store(item)
        ):
            item.add_marker(pytest.mark.fast)
