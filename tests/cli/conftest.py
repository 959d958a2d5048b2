"""The CLI's fixtures: a private redis-server and the settings the commands read."""

from tests.support.fleet_fixtures import (  # noqa: F401 - fixtures
    fleet_env,
    producer_env,
    redis_server,
)
