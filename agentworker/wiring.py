"""Wiring: the Redis store, the agent loader and the dispatcher behind one runner."""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import TYPE_CHECKING

from celery import Celery

from agentworker.fleet.dispatch import CeleryDispatcher
from agentworker.notify.streams import RedisEventBridge, bridge_client
from agentworker.ops import metrics
from agentworker.settings import Settings, UnsetAgentLoader
from runner_core import AgentExecutionPolicy, AgentLoader, AgentRunner

if TYPE_CHECKING:
    from stores import RedisAgentTurnStore

log = logging.getLogger("agentworker")
#: The task that delivers one outbound webhook (agentworker/tasks.py).
WEBHOOK_TASK = "agentworker.deliver_webhook"

_lock = threading.Lock()
_process_runner: tuple[int, AgentRunner] | None = None


def make_runner(
    settings: Settings | None = None, app: Celery | None = None, *, require_agents: bool = True
) -> AgentRunner:
    """An AgentRunner on the Redis store that enqueues a step whenever a turn is runnable.

    For producers (``runner.start``) and webhook handlers (``runner.submit_resume``).
    Without ``AGENTWORKER_AGENT_LOADER`` it raises ``ConfigurationError``, unless
    ``require_agents`` is false (reading turns): then loading an agent raises it.
    """
    settings = settings or Settings()
    if app is None:
        from agentworker.fleet.app import app as default_app

        app = default_app
    if require_agents or settings.agent_loader:
        loader: AgentLoader = settings.load_agent_loader()
    else:
        loader = UnsetAgentLoader()
    store = make_store(settings)
    runner = AgentRunner(
        turn_store=store,
        agent_loader=loader,
        chat_memory_provider=store.chat_memory,
        policy=AgentExecutionPolicy(lease_seconds=settings.lease_seconds),
        dispatcher=CeleryDispatcher(app, settings.step_queue),
        middleware=metrics.middleware(),
    )
    runner.unloadable_grace_seconds = settings.unloadable_grace_seconds
    if settings.events_enabled:
        runner.add_event_listener(event_bridge(settings))
    add_webhooks(runner, settings, app)
    return runner


def add_webhooks(runner: AgentRunner, settings: Settings, app: Celery) -> None:
    """Outbound webhooks (agentworker/webhooks.py), when any are configured."""
    from agentworker.notify import webhooks

    if not webhooks.configured(settings):
        return

    def send_hint(message_id: str) -> None:
        app.send_task(WEBHOOK_TASK, (message_id,), queue=settings.step_queue)

    runner.add_event_listener(webhooks.listener_of(settings, runner.store.load, send_hint))


def make_store(settings: Settings) -> RedisAgentTurnStore:
    """The Redis store of ``settings``."""
    from stores import RedisAgentTurnStore

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


def process_runner(app: Celery) -> AgentRunner:
    """The runner of this process, built lazily after a prefork worker forks."""
    global _process_runner
    with _lock:
        if _process_runner is None or _process_runner[0] != os.getpid():
            _process_runner = (os.getpid(), make_runner(Settings(), app))
        return _process_runner[1]


def worker_id() -> str:
    """``host:pid``; every claim also gets a fresh random lease id, so reuse is safe."""
    return f"{socket.gethostname()}:{os.getpid()}"
