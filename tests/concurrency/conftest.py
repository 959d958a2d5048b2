"""The concurrency suite runs on every store, like the contract suite."""

from tests.support.store_fixtures import (  # noqa: F401 - fixtures
    make_store,
    namespace,
    redis_cluster,
    redis_server,
    store_kind,
)
