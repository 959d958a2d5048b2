"""For every suite: nothing reaches the host's Redis on 6379 by accident.

Settings default to ``redis://127.0.0.1:6379``. A test that forgets to point a component
(say the module-level Celery app) at its own server would write to the host's Redis;
with this default it gets "connection refused" at once instead. Tests and the processes
they start still set their own URLs explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.servers import RedisServer

os.environ.setdefault("AGENTWORKER_REDIS_URL", "redis://127.0.0.1:1/0")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server (no AOF) shared by one test module."""
    s = RedisServer(tmp_path_factory.mktemp("redis"), appendonly=False).start()
    yield s
    s.stop()
