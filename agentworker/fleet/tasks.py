"""The Celery tasks: ``agentworker.step_turn``, ``.sweep``, ``.housekeeping``, ``.deliver_webhook``.

``register_tasks(app, process)`` binds them to the app and to the state of its process;
the composition root (``wiring.create_app``) calls it.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from agentworker.fleet.beat import sweep_started
from agentworker.fleet.dispatch import WebhookHints
from agentworker.fleet.housekeeping import housekeep
from agentworker.fleet.process import FleetProcess, worker_id
from agentworker.fleet.stepping import step_once, sweep_once
from agentworker.notify import webhooks
from agentworker.ops import metrics
from runner_core import AgentRunner

log = logging.getLogger("agentworker.tasks")


def resend_webhooks(process: FleetProcess, runner: AgentRunner) -> None:
    """Record what a dead canceller missed; hint again the webhooks that are due."""
    settings = process.settings
    if not webhooks.configured(settings):
        return
    outbox = webhooks.outbox_of(settings, process.webhook_redis())
    webhooks.recheck(runner, outbox)
    sent = webhooks.send_due(outbox, WebhookHints(process.app, settings.step_queue))
    if sent:
        log.info("sweep re-sent %d webhook deliveries", sent)


def register_tasks(app: Celery, process: FleetProcess) -> None:
    """Register the tasks on ``app``; they run with ``process``'s runner and clients."""
    _register_steps(app, process)
    _register_upkeep(app, process)


def _register_steps(app: Celery, process: FleetProcess) -> None:
    chain_seconds = process.settings.step_chain_seconds

    @app.task(name="agentworker.step_turn", ignore_result=True, shared=False)
    def step_turn(turn_id: str) -> str:
        """Steps of one turn (the message is only a wake-up); see ``step_once``."""
        if not isinstance(turn_id, str) or not turn_id:
            log.error("step_turn called with %r: acked and dropped", turn_id)
            return "bad-argument"
        try:
            return step_once(process.runner(), turn_id, worker_id(), chain_seconds)
        except SoftTimeLimitExceeded:
            # Past the step's lease backstop (settings order the limits): the lease is cut or
            # given back, nothing of the step was saved, and the sweeper wakes the turn.
            log.warning("turn %s: Celery's soft time limit stopped its step task", turn_id)
            metrics.step_done("interrupted", None, 0.0)
            return "interrupted"

    @app.task(name="agentworker.ping", ignore_result=True, shared=False)
    def ping() -> str:
        """Do nothing: a health check, and the raw-Celery baseline of ``make bench``."""
        return "pong"

    @app.task(name="agentworker.deliver_webhook", ignore_result=True, shared=False)
    def deliver_webhook(message_id: str) -> str:
        """One attempt at one outbound webhook (agentworker/notify/webhooks.py)."""
        outbox = webhooks.outbox_of(process.settings, process.webhook_redis())
        outcome = outbox.deliver(message_id)
        metrics.webhook_delivered(outcome)
        return outcome


def _register_upkeep(app: Celery, process: FleetProcess) -> None:
    settings = process.settings

    @app.task(name="agentworker.sweep", ignore_result=True, shared=False)
    def sweep() -> dict[str, Any]:
        """Wake what should be running; run by beat every ``sweep_interval``."""
        sweep_started(process.sweep_gate)  # first: beat may queue the next sweep meanwhile
        runner = process.runner()
        report = sweep_once(runner, settings.lost_wakeup_seconds, clock=process.repairs())
        resend_webhooks(process, runner)
        process.queue_depth.read()
        if report.due or report.lost or report.repaired:
            log.info("sweep woke %s", report)
        return {"due": report.due, "lost": report.lost, "repaired": report.repaired}

    @app.task(name="agentworker.housekeeping", ignore_result=True, shared=False)
    def housekeeping() -> dict[str, int]:
        """Retention and partition pruning (agentworker/fleet/housekeeping.py); run by beat."""
        store: Any = process.runner().store
        report = housekeep(store, settings.retention_seconds)
        return {"migrated": report.migrated, "expired": report.expired, "pruned": report.pruned}
