"""Chaos tests reuse the end-to-end fixtures (private redis-server, real workers, RabbitMQ)."""

from tests.support.fleet_fixtures import (  # noqa: F401 - fixtures
    fleet,
    fleet_env,
    producer_env,
    redis_server,
)
from tests.support.rabbit_fixtures import (  # noqa: F401 - fixtures
    amqp_base,
    broker_url,
    rabbit_env,
    rabbit_fleet,
)
