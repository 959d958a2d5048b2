"""The store contract suite runs every test on each store (tests/support/store_fixtures.py)."""

from tests.support.seed import loader, runners  # noqa: F401 - fixtures
from tests.support.store_fixtures import (  # noqa: F401 - fixtures
    make_store,
    namespace,
    own_redis,
    redis_cluster,
    redis_server,
    redis_store,
    store,
    store_kind,
)
