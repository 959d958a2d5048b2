"""The composition root: pure functions that build the store, the runner and the Celery app.

Nothing here keeps state. ``create_app`` gives each app one ``FleetProcess`` (the state of
the worker or beat process the app runs in) and hands it to the tasks, the signals and the
reconnection step; ``make_runner`` builds a new runner at each call.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from agentworker.fleet.dispatch import WEBHOOK_TASK as WEBHOOK_TASK
from agentworker.fleet.dispatch import CeleryDispatcher, WebhookHints
from agentworker.fleet.process import FleetApp, FleetProcess
from agentworker.fleet.queues import task_queues
from agentworker.fleet.reconnect import ForgetQueuedOnReconnect
from agentworker.fleet.stepping import sweep_once as sweep_once
from agentworker.fleet.tasks import register_tasks
from agentworker.notify import webhooks
from agentworker.notify.streams import RedisEventBridge, bridge_client
from agentworker.ops import metrics
from agentworker.settings import Settings, UnsetAgentLoader, is_amqp
from runner_core import AgentExecutionPolicy, AgentLoader, AgentRunner
from runner_core.worker import on_lease_cut
from stores import RedisAgentTurnStore


def make_runner(
    settings: Settings | None = None, app: Celery | None = None, *, require_agents: bool = True
) -> AgentRunner:
    """An AgentRunner on the Redis store that enqueues a step whenever a turn is runnable.

    For producers (``runner.start``) and webhook handlers (``runner.submit_resume``); the
    wake-ups go through ``app``, by default a new app of ``settings``. Without
    ``AGENTWORKER_AGENT_LOADER`` it raises ``ConfigurationError``, unless
    ``require_agents`` is false (reading turns): then loading an agent raises it.
    """
    settings = settings or Settings()
    app = app if app is not None else create_app(settings)
    if require_agents or settings.agent_loader:
        loader: AgentLoader = settings.load_agent_loader()
    else:
        loader = UnsetAgentLoader()
    store = make_store(settings)
    runner = AgentRunner(
        turn_store=store,
        agent_loader=loader,
        chat_memory_provider=store.chat_memory,
        policy=AgentExecutionPolicy(lease_seconds=settings.lease_seconds, limits=settings.limits),
        dispatcher=CeleryDispatcher(app, settings.step_queue),
        middleware=metrics.middleware(),
        step_time_limit=settings.step_time_limit,
    )
    runner.unloadable_grace_seconds = settings.unloadable_grace_seconds
    on_lease_cut(metrics.lease_cut)  # once per process, however many runners it builds
    if settings.events_enabled:
        bridge = event_bridge(settings)
        bridge.streams.ride_with(store)  # provisional events ride in the step's commit
        runner.add_event_listener(bridge)
    add_webhooks(runner, settings, app)
    return runner


def add_webhooks(runner: AgentRunner, settings: Settings, app: Celery) -> None:
    """Outbound webhooks (agentworker/notify/webhooks.py), when any are configured."""
    if not webhooks.configured(settings):
        return
    hints = WebhookHints(app, settings.step_queue)
    runner.add_event_listener(webhooks.listener_of(settings, runner.store.load, hints))


def make_store(settings: Settings) -> RedisAgentTurnStore:
    """The Redis store of ``settings``."""
    return RedisAgentTurnStore(
        settings.redis_url,
        namespace=settings.namespace,
        events=settings.events_enabled,
        requeue_after=settings.requeue_after_seconds,
        retention_seconds=settings.retention_seconds or None,
        partition_buckets=settings.partition_buckets,
    )


def event_bridge(settings: Settings) -> RedisEventBridge:
    """The listener that streams every event to Redis (best effort, fails fast)."""
    return RedisEventBridge(bridge_client(settings.redis_url), settings.namespace)


def create_app(settings: Settings | None = None) -> Celery:
    """A configured Celery app with the agentworker tasks registered and its process state."""
    settings = settings or Settings()
    app = FleetApp("agentworker")
    app.conf.update(celery_config(settings))
    process = FleetProcess(
        app, settings, lambda: make_runner(settings, app), lambda: make_store(settings)
    )
    app.process = process
    register_tasks(app, process)
    process.connect()  # the worker's start checks; traces, the metrics port, JSON logs
    # After a broker reconnection, wake-ups in flight may be gone (fleet/reconnect.py).
    app.steps["consumer"].add(ForgetQueuedOnReconnect)
    return app


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
        # The runner's own deadline and lease backstop come first; Celery's limits (enforced
        # by prefork only) are the last resort, and never outlive the broker's hold on a
        # message (settings check it): the visibility timeout, RabbitMQ's consumer_timeout.
        "task_time_limit": settings.task_time_limit,
        "task_soft_time_limit": settings.task_soft_time_limit,
        "broker_transport_options": _transport_options(settings),
        # Steps and sweeps on their own queues: a backlog of steps never delays the sweeper.
        # Both are declared, so a worker without -Q consumes both; -Q picks one. On
        # RabbitMQ: durable, classic or quorum (agentworker/fleet/queues.py).
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
        "beat_schedule": _beat_schedule(settings),
        # Sends a sweep only once the previous one has started (agentworker/fleet/beat.py).
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


def _beat_schedule(settings: Settings) -> dict[str, Any]:
    """What beat sends: a sweep every ``sweep_interval``, housekeeping less often."""
    return {
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
    }


def _transport_options(settings: Settings) -> dict[str, Any]:
    """Broker options: Redis, the visibility timeout; AMQP, publisher confirms.

    With confirms, a publish returns once RabbitMQ has the message (or raises), so a
    wake-up is never lost silently in a buffer.
    """
    if is_amqp(settings.broker):
        return {"confirm_publish": True}
    return {"visibility_timeout": settings.visibility_timeout}
