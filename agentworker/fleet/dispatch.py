"""The dispatcher: a Celery message per runnable turn, carrying its id and nothing else.

A worker sends one wake-up per step, so this is on the hot path. ``app.send_task`` spends
a quarter of its time on work a wake-up does not need (option merging, routing, a result
object, binding and copying the queue to declare it again); the dispatcher builds the
message with Celery's own ``app.amqp.create_task_message`` and publishes it with
``app.amqp.send_task_message`` through a producer of the app's producer pool: the same
message, the same publish retry policy, and ``before_task_publish``/``after_task_publish``
still fire. On the Redis transport the producer's channel publishes through its own
client (``own_client``) instead of a new ``redis.Redis`` per message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.utils import uuid

from agentworker.fleet.queues import mismatch

STEP_TASK = "agentworker.step_turn"
#: The task that delivers one outbound webhook (agentworker/fleet/tasks.py).
WEBHOOK_TASK = "agentworker.deliver_webhook"


class CeleryDispatcher:
    """Sends ``agentworker.step_turn(turn_id)``; a lost or doubled message is harmless."""

    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue

    def __call__(self, turn_id: str) -> None:
        """Wake a worker for ``turn_id``."""
        self._send(turn_id, f"(turn_id={turn_id!r})")

    def send_for(self, turn_id: str, agent_id: str) -> None:
        """The same wake-up, shown with its agent (Flower's task arguments)."""
        self._send(turn_id, f"(turn_id={turn_id!r}, agent={agent_id[:100]!r})")

    def _send(self, turn_id: str, argsrepr: str) -> None:
        amqp = self.app.amqp
        parent_id, root_id = _parent_ids(self.app)
        message = amqp.create_task_message(
            uuid(),
            STEP_TASK,
            (turn_id,),
            {},
            root_id=root_id,
            parent_id=parent_id,
            argsrepr=argsrepr,
            kwargsrepr="{}",
        )
        queue = amqp.queues[self.queue]
        with self.app.producer_pool.acquire(block=True) as producer:
            redis_transport = producer.connection.transport.driver_type == "redis"
            try:
                amqp.send_task_message(
                    producer,
                    STEP_TASK,
                    message,
                    queue=queue,
                    # The Redis transport routes by queue name with nothing declared; other
                    # brokers get the queue declared (kombu declares it once per connection).
                    declare=[] if redis_transport else None,
                )
                if redis_transport:  # after a publish: the channel is open by then
                    own_client(producer.channel)
            except producer.connection.channel_errors as exc:
                configured = (queue.queue_arguments or {}).get("x-queue-type", "classic")
                error = mismatch(exc, configured)
                if error is None:
                    raise
                raise error from exc


def own_client(channel: Any) -> None:
    """Have a kombu Redis channel publish through its own client, built once.

    kombu's Redis channel builds a ``redis.Redis`` on its connection pool for every
    message it puts (``conn_or_acquire`` without a client): about 150 µs of a 1.8 ms
    one-step task, measured in process on a local broker.
    One such client, built the same way on the same pool, is kept and used for every
    later message. A revived channel is a new object and keeps its own after its first
    publish.
    """
    if getattr(channel, "_agentworker_own_client", False):
        return
    with channel.conn_or_acquire() as built:
        own = built

    @contextmanager
    def conn_or_acquire(client: Any = None) -> Iterator[Any]:
        yield client or own

    channel.conn_or_acquire = conn_or_acquire
    channel._agentworker_own_client = True


def _parent_ids(app: Celery) -> tuple[str | None, str | None]:
    """The step that sends this wake-up, as ``send_task`` records it (Flower shows it)."""
    parent: Any = app.current_worker_task
    if parent is None:
        return None, None
    request = parent.request
    return request.id, request.root_id or request.id


class WebhookHints:
    """Sends ``agentworker.deliver_webhook(message_id)``: the outbox holds the delivery."""

    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue

    def __call__(self, message_id: str) -> None:
        """Wake a worker for one recorded delivery."""
        self.app.send_task(WEBHOOK_TASK, (message_id,), queue=self.queue)
