"""The concurrency suite runs on every store, like the contract suite."""

from tests.contract.conftest import (  # noqa: F401 - fixtures
    make_store,
    namespace,
    redis_cluster,
    redis_server,
    store_kind,
)
