"""The broker's side: queues declared explicitly, their type, and the pool that suits it.

Steps and sweeps each have a queue of their own, declared with its own direct exchange.
On RabbitMQ they are durable classic queues, or quorum queues (replicated) with
``AGENTWORKER_QUEUE_TYPE=quorum``. RabbitMQ refuses to redeclare a queue with another
type (PRECONDITION_FAILED): ``QueueTypeMismatchError`` says which queue and what to do.
"""

from __future__ import annotations

import re
from typing import Any

import celery
from celery import Celery
from kombu.entity import Exchange, Queue
from kombu.exceptions import OperationalError

from agentworker.settings import is_amqp
from runner_core import ConfigurationError

QUORUM_CELERY = (5, 5)
_INEQUIVALENT = re.compile(
    r"inequivalent arg 'x-queue-type' for queue '([^']*)' in vhost '([^']*)': "
    r"received (.+?) but current is (.+)"
)


class QueueTypeMismatchError(ConfigurationError):
    """Raised when a queue exists on the broker with another type than the one configured.

    RabbitMQ cannot change a queue's type in place; the queue must be drained and deleted
    (or the setting put back). ``queue``, ``configured`` and ``current`` say which and how.
    """

    def __init__(self, queue: str, vhost: str, configured: str, current: str, detail: str) -> None:
        super().__init__(
            f"queue {queue!r} exists on the broker as a {current} queue, but "
            f"AGENTWORKER_QUEUE_TYPE={configured}: RabbitMQ cannot change a queue's type. "
            f"Stop the producers and workers, let the queue drain, delete it "
            f"(rabbitmqctl delete_queue -p {vhost} {queue}) and start again, or set "
            f"AGENTWORKER_QUEUE_TYPE={current}. (broker: {detail})"
        )
        self.queue = queue
        self.vhost = vhost
        self.configured = configured
        self.current = current


def default_pool(broker_url: str) -> str:
    """The worker pool to run on this broker: prefork on AMQP, solo on Redis.

    Over AMQP the solo pool runs each task inside the event loop's read callback, and
    the late ack it queues with ``call_soon`` waits for the loop's next poll timeout (up
    to 2 s): with prefetch 1 the broker sends nothing meanwhile (deploy/README.md).
    """
    return "prefork" if is_amqp(broker_url) else "solo"


def task_queues(step_queue: str, sweep_queue: str, queue_type: str) -> list[Queue]:
    """The steps and sweeps queues, of ``queue_type`` (``classic`` or ``quorum``)."""
    if queue_type == "quorum" and celery_version() < QUORUM_CELERY:
        raise ConfigurationError(
            "AGENTWORKER_QUEUE_TYPE=quorum needs Celery 5.5 or newer (Celery "
            f"{celery.__version__} asks RabbitMQ for a global prefetch limit, which quorum "
            "queues refuse): upgrade Celery, or use classic queues"
        )
    return [_queue(step_queue, queue_type), _queue(sweep_queue, queue_type)]


def _queue(name: str, queue_type: str) -> Queue:
    """A durable queue with its own direct exchange, routed by name (as Celery makes one)."""
    arguments = {"x-queue-type": "quorum"} if queue_type == "quorum" else None
    exchange = Exchange(name, type="direct")  # type: ignore[no-untyped-call]
    return Queue(name, exchange, routing_key=name, durable=True, queue_arguments=arguments)  # type: ignore[no-untyped-call]


def celery_version() -> tuple[int, int]:
    """Celery's major and minor version."""
    major, minor = celery.__version__.split(".")[:2]
    return int(major), int(re.sub(r"\D.*", "", minor) or 0)


def mismatch(exc: BaseException, queue_type: str) -> QueueTypeMismatchError | None:
    """The typed error for a PRECONDITION_FAILED about a queue's type, else None."""
    text = str(exc)
    found = _INEQUIVALENT.search(text)
    if getattr(exc, "code", None) != 406 or found is None:
        return None
    queue, vhost, _, current = found.groups()
    return QueueTypeMismatchError(queue, vhost, queue_type, _type_name(current), text)


def _type_name(value: str) -> str:
    """The queue type in RabbitMQ's rendering of the argument.

    ``'classic'``, ``the value 'quorum' of type 'longstr'``, or ``none`` (declared
    without the argument: classic).
    """
    quoted = re.search(r"'([^']*)'", value)
    return quoted.group(1) if quoted else "classic"


def declare_queues(app: Celery, queue_type: str, timeout: float = 5.0) -> None:
    """Declare the app's queues on an AMQP broker now; raise ``QueueTypeMismatchError``.

    A worker calls it at start, so a type mismatch stops it with one line instead of a
    consumer that reconnects forever. An unreachable broker is left to Celery's retries.
    """
    if not is_amqp(app.conf.broker_url or ""):
        return
    connection: Any = app.connection_for_write(connect_timeout=timeout)
    try:
        try:
            connection.ensure_connection(max_retries=0, timeout=timeout)
        except (OperationalError, *connection.connection_errors):
            return
        for queue in app.amqp.queues.values():
            try:
                queue(connection.default_channel).declare()
            except connection.channel_errors as exc:
                error = mismatch(exc, queue_type)
                if error is None:
                    raise
                raise error from exc
    finally:
        connection.release()
