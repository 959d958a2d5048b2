"""The Celery app: ``celery -A agentworker worker`` / ``celery -A agentworker beat``.

Configuration chosen for correctness; each choice has its reason next to it.
"""

from __future__ import annotations

import sys
from typing import Any

from celery import Celery, signals
from pydantic import ValidationError

from agentworker.fleet.queues import declare_queues, task_queues
from agentworker.fleet.reconnect import ForgetQueuedOnReconnect
from agentworker.settings import Settings, is_amqp
from runner_core import AgentWorkerError, ConfigurationError


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings for ``settings``."""
    return {
        "broker_url": settings.broker,
        # JSON only: a message is a wake-up with a turn id; pickle is refused on receipt.
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        # The store holds every result; a result backend would be a second truth.
        "task_ignore_result": True,
        "result_backend": None,
        # Ack after the step: a worker killed mid-step leaves the message to redeliver
        # (the lease and the version make a redelivered step harmless).
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # One message at a time per process: a prefetched wake-up would sit behind a long
        # step while another worker idles.
        "worker_prefetch_multiplier": 1,
        # A step never outlives the broker's hold on its message (settings check it): the
        # Redis broker's visibility timeout, RabbitMQ's consumer_timeout.
        "task_time_limit": settings.task_time_limit,
        "task_soft_time_limit": settings.task_time_limit * 0.9,
        "broker_transport_options": _transport_options(settings),
        # Steps and sweeps on their own queues: a backlog of steps never delays the sweeper.
        # Both are declared, so a worker without -Q consumes both; -Q picks one. On
        # RabbitMQ: durable, classic or quorum (agentworker/queues.py).
        "task_queues": task_queues(settings.step_queue, settings.sweep_queue, settings.queue_type),
        # Celery 5.5+: per-consumer prefetch where a queue is a quorum queue (they refuse
        # a global one).
        "worker_detect_quorum_queues": True,
        "task_default_queue": settings.step_queue,
        "task_routes": {
            "agentworker.step_turn": {"queue": settings.step_queue},
            "agentworker.sweep": {"queue": settings.sweep_queue},
            "agentworker.housekeeping": {"queue": settings.sweep_queue},
        },
        "beat_schedule": {
            "agentworker-sweep": {
                "task": "agentworker.sweep",
                "schedule": settings.sweep_interval,
                # No expiry: the scheduler keeps at most one sweep waiting, and a late sweep
                # is still the one to run (an expired one would be dropped unrun).
                "options": {"queue": settings.sweep_queue},
            },
            "agentworker-housekeeping": {
                "task": "agentworker.housekeeping",
                "schedule": settings.housekeeping_interval,
                # A run not started within one interval is dropped (the next one does the
                # same work), so an unconsumed schedule never piles up in the broker.
                "options": {
                    "queue": settings.sweep_queue,
                    "expires": settings.housekeeping_interval,
                },
            },
        },
        # Sends a sweep only once the previous one has started (agentworker/beat.py).
        "beat_scheduler": "agentworker.fleet.beat:SweepScheduler",
        # A broken broker must not hang producers: the turn is saved; the sweeper sends it.
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
        "broker_connection_retry_on_startup": True,
        # Events for Flower (received, started, succeeded...). No "sent" events: each is a
        # second publish per dispatch, and Flower shows a step from its receipt anyway.
        "worker_send_task_events": True,
        "task_send_sent_event": False,
    }


def _transport_options(settings: Settings) -> dict[str, Any]:
    """Broker options: Redis, the visibility timeout; AMQP, publisher confirms.

    With confirms, a publish returns once RabbitMQ has the message (or raises), so a
    wake-up is never lost silently in a buffer.
    """
    if is_amqp(settings.broker):
        return {"confirm_publish": True}
    return {"visibility_timeout": settings.visibility_timeout}


def create_app(settings: Settings | None = None) -> Celery:
    """A configured Celery app with the agentworker tasks registered."""
    settings = settings or Settings()
    celery = Celery("agentworker")
    celery.conf.update(celery_config(settings))
    from agentworker.fleet import tasks
    from agentworker.ops import signals as observability

    tasks.register(celery, settings)
    observability.install(celery)  # traces, the metrics port, JSON logs
    # After a broker reconnection, wake-ups in flight may be gone (agentworker/reconnect.py).
    celery.steps["consumer"].add(ForgetQueuedOnReconnect)
    return celery


def check_worker_settings(sender: Any = None, **_: Any) -> None:
    """Refuse to start a worker that cannot load its agents or declare its queues.

    One line, exit status 2 (a queue of another type: ``QueueTypeMismatchError``).
    Connected to ``worker_init``: beat, Flower and producers start without agents.
    """
    try:
        settings = Settings()
        settings.load_agent_loader()
        if sender is not None and getattr(sender, "app", None) is not None:
            declare_queues(sender.app, settings.queue_type)
    except AgentWorkerError as exc:
        sys.stderr.write(f"agentworker: the worker cannot start: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(2) from None


signals.worker_init.connect(check_worker_settings, weak=False)


def app_from_environment() -> Celery:
    """The app from ``AGENTWORKER_*``; invalid settings exit with one line per problem."""
    try:
        return create_app()
    except ValidationError as exc:
        raise SystemExit(f"agentworker: invalid settings: {problems(exc)}") from None
    except ConfigurationError as exc:
        raise SystemExit(f"agentworker: invalid settings: {exc}") from None


def problems(exc: ValidationError) -> str:
    """One line naming each invalid ``AGENTWORKER_*`` setting."""
    return "; ".join(_problem(e["loc"], e["msg"]) for e in exc.errors())


def _problem(loc: tuple[int | str, ...], message: str) -> str:
    name = "AGENTWORKER_" + "_".join(str(p) for p in loc).upper()
    return f"{name}: {message}" if loc else message


app = app_from_environment()
