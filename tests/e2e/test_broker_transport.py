"""The Redis broker transport: one client per channel, and otherwise kombu's behaviour."""

from __future__ import annotations

from celery import Celery

from agentworker.broker import TRANSPORT, RedisTransport, transport_for
from agentworker.celery_app import celery_config
from agentworker.dispatch import CeleryDispatcher
from agentworker.settings import Settings
from examples.local import RedisServer


def test_only_redis_urls_get_the_transport() -> None:
    assert transport_for("redis://127.0.0.1:6379/1") == TRANSPORT
    assert transport_for("rediss://example:6380/0") is None  # kombu's TLS handling
    assert transport_for("amqp://guest:guest@127.0.0.1:5672//") is None
    config = celery_config(Settings(broker_url="amqp://127.0.0.1//"))
    assert config["broker_transport"] is None


def test_publishes_reuse_one_client_and_arrive_in_order(redis_server: RedisServer) -> None:
    # Given an app on a private Redis broker with the transport
    app = Celery("transport-test")
    app.conf.update(celery_config(Settings(broker_url=f"redis://127.0.0.1:{redis_server.port}/2")))
    dispatch = CeleryDispatcher(app, "transport-test")

    # When wake-ups are sent through the producer pool
    for i in range(5):
        dispatch(f"turn-{i}")

    # Then they went through our transport, one synchronous client served every publish,
    # and the queue holds them in order (kombu pushes left, pops right)
    with app.producer_pool.acquire(block=True) as producer:
        channel = producer.channel
        assert isinstance(producer.connection.transport, RedisTransport)
        assert channel._create_client() is channel._create_client()
        assert channel._create_client(asynchronous=True) is not channel._create_client()
    broker = redis_server.client()
    broker.execute_command("SELECT", 2)
    bodies = [m.decode() for m in broker.lrange("transport-test", 0, -1)]
    assert len(bodies) == 5
    assert ["turn-4" in bodies[0], "turn-0" in bodies[-1]] == [True, True]
