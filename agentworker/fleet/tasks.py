"""The Celery tasks: ``agentworker.step_turn``, ``.sweep`` and ``.housekeeping``."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from agentworker.fleet.beat import sweep_started
from agentworker.fleet.stepping import step_once, sweep_once
from agentworker.ops import metrics
from agentworker.ops import signals as observability
from agentworker.settings import Settings
from agentworker.wiring import process_runner, worker_id
from runner_core import AgentRunner

log = logging.getLogger("agentworker.tasks")


def resend_webhooks(app: Celery, settings: Settings, runner: AgentRunner) -> None:
    """Record what a dead canceller missed; hint again the webhooks that are due."""
    from agentworker.notify import webhooks
    from agentworker.wiring import WEBHOOK_TASK

    if not webhooks.configured(settings):
        return
    outbox = webhooks.outbox_of(settings, _webhook_redis(settings))
    webhooks.recheck(runner, outbox)
    sent = webhooks.send_due(
        outbox, lambda m: app.send_task(WEBHOOK_TASK, (m,), queue=settings.step_queue)
    )
    if sent:
        log.info("sweep re-sent %d webhook deliveries", sent)


_clients: dict[str, Any] = {}


def _webhook_redis(settings: Settings) -> Any:
    from stores.redis import make_client

    if settings.redis_url not in _clients:
        _clients[settings.redis_url] = make_client(settings.redis_url)
    return _clients[settings.redis_url]


def register(app: Celery, settings: Settings) -> None:
    """Register the tasks on ``app``; steps chain for ``settings.step_chain_seconds``."""
    chain_seconds = settings.step_chain_seconds

    @app.task(name="agentworker.step_turn", ignore_result=True, shared=False)
    def step_turn(turn_id: str) -> str:
        """Steps of one turn (the message is only a wake-up); see ``step_once``."""
        if not isinstance(turn_id, str) or not turn_id:
            log.error("step_turn called with %r: acked and dropped", turn_id)
            return "bad-argument"
        return step_once(process_runner(app), turn_id, worker_id(), chain_seconds)

    @app.task(name="agentworker.ping", ignore_result=True, shared=False)
    def ping() -> str:
        """Do nothing: a health check, and the raw-Celery baseline of ``make bench``."""
        return "pong"

    @app.task(name="agentworker.sweep", ignore_result=True, shared=False)
    def sweep() -> dict[str, Any]:
        """Wake what should be running; run by beat every ``sweep_interval``."""
        settings = Settings()
        sweep_started(settings)  # first: beat may queue the next sweep while this one runs
        runner = process_runner(app)
        report = sweep_once(runner, settings.lost_wakeup_seconds)
        resend_webhooks(app, settings, runner)
        observability.read_queue_depth(app, settings.step_queue)
        if report.due or report.lost or report.repaired:
            log.info("sweep woke %s", report)
        return {"due": report.due, "lost": report.lost, "repaired": report.repaired}

    @app.task(name="agentworker.deliver_webhook", ignore_result=True, shared=False)
    def deliver_webhook(message_id: str) -> str:
        """One attempt at one outbound webhook (agentworker/webhooks.py)."""
        from agentworker.notify.webhooks import outbox_of

        settings = Settings()
        outcome = outbox_of(settings, _webhook_redis(settings)).deliver(message_id)
        metrics.webhook_delivered(outcome)
        return outcome

    @app.task(name="agentworker.housekeeping", ignore_result=True, shared=False)
    def housekeeping() -> dict[str, int]:
        """Retention and partition pruning (agentworker/housekeeping.py); run by beat."""
        from agentworker.fleet.housekeeping import housekeep

        store: Any = process_runner(app).store
        report = housekeep(store, Settings().retention_seconds)
        return {"migrated": report.migrated, "expired": report.expired, "pruned": report.pruned}
