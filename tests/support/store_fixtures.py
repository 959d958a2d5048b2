"""Fixtures of the store contract suite: every test runs on each store.

The Redis store runs against a ``redis-server`` this suite starts itself, on a free
loopback port, with AOF on (never the Redis of the host), and against a local 3-master
Redis Cluster (``tests/support/cluster.py``, started once per session on free ports).
Tests that need Redis skip with a clear message when the binary is missing.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner_core import AgentTurnStore, InMemoryAgentTurnStore
from stores import RedisAgentTurnStore
from tests.support.cluster import LocalCluster
from tests.support.servers import RedisServer, free_port

BINARY = shutil.which("redis-server")
__all__ = ["RedisServer", "free_port"]


def _require_binary() -> None:
    if BINARY is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server); skipping")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    _require_binary()
    server = RedisServer(tmp_path_factory.mktemp("redis"), fsync="everysec")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three masters, slots assigned, ``cluster_state:ok`` everywhere."""
    _require_binary()
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed (it ships with redis-server); skipping")
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private server for tests that kill or restart it (fsync always: nothing lost)."""
    _require_binary()
    server = RedisServer(tmp_path, fsync="always")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["redis", "cluster"])
def redis_store(request: pytest.FixtureRequest, namespace: str) -> Iterator[RedisAgentTurnStore]:
    """The Redis store on the standalone server (flushed) and on the cluster."""
    if request.param == "cluster":
        url = request.getfixturevalue("redis_cluster").url
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        server.client().flushdb()
        url = server.url
    store = RedisAgentTurnStore(url, namespace=namespace)
    yield store
    store.close()


@pytest.fixture(params=["memory", "redis", "cluster"])
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def make_store(store_kind: str, request: pytest.FixtureRequest) -> Callable[[], AgentTurnStore]:
    """Stores sharing one backend, like processes sharing Redis (memory: the same object)."""
    if store_kind == "memory":
        shared = InMemoryAgentTurnStore(keep_events=True)
        return lambda: shared
    if store_kind == "cluster":
        url = request.getfixturevalue("redis_cluster").url  # a fresh namespace per test
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        server.client().flushdb()
        url = server.url
    namespace: str = request.getfixturevalue("namespace")
    made: list[RedisAgentTurnStore] = []

    def make() -> AgentTurnStore:
        made.append(RedisAgentTurnStore(url, namespace=namespace))
        return made[-1]

    def close_all() -> None:
        for s in made:
            s.close()

    request.addfinalizer(close_all)
    return make


@pytest.fixture
def store(make_store: Callable[[], AgentTurnStore]) -> AgentTurnStore:
    return make_store()
