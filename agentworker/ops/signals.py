"""Traces, metrics and JSON logs in Celery processes, wired through Celery's signals.

``install(app)`` (called by ``create_app``) connects:

* ``worker_init`` (the main worker process, before a prefork pool forks): the OpenTelemetry
  SDK when OTEL_* asks for it (``agentworker.ops.traces``; children inherit it, the batch
  exporter restarts after the fork), and the metrics port when
  ``AGENTWORKER_METRICS_PORT`` is set. The port serves every process of the worker:
  metrics go to ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary directory when unset).
* ``worker_process_shutdown``: buffered spans are flushed, the child's gauges dropped.
* ``beat_init``: the SDK, for beat's own spans (Celery's publish spans).
* ``after_setup_logger`` / ``after_setup_task_logger``: ``AGENTWORKER_LOG_FORMAT=json``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Any

from celery import Celery, signals

from agentworker.ops import logs, metrics, traces
from agentworker.settings import Settings

log = logging.getLogger("agentworker.observability")

_installed = False


def install(app: Celery) -> None:
    """Connect the handlers (once per process; they serve every app)."""
    global _installed
    if _installed:
        return
    _installed = True
    signals.worker_init.connect(_worker_init, weak=False)
    signals.worker_process_shutdown.connect(_process_shutdown, weak=False)
    signals.worker_shutdown.connect(_worker_shutdown, weak=False)
    signals.beat_init.connect(_beat_init, weak=False)
    signals.after_setup_logger.connect(_json_logs, weak=False)
    signals.after_setup_task_logger.connect(_json_logs, weak=False)


def _worker_init(**_: Any) -> None:
    settings = Settings()
    if settings.metrics_port is not None:
        start_worker_metrics(settings)
    traces.setup_tracing("agentworker-worker")


def start_worker_metrics(settings: Settings) -> None:
    """Serve the metrics of every process of this worker on the metrics port."""
    if not metrics.available():
        log.warning(
            "AGENTWORKER_METRICS_PORT is set but prometheus_client is missing: "
            "pip install 'agentworker[metrics]'"
        )
        return
    if not os.environ.get(metrics.MULTIPROC_DIR):
        os.environ[metrics.MULTIPROC_DIR] = tempfile.mkdtemp(prefix="agentworker-metrics-")
        metrics.use_multiprocess_values()
    from agentworker.wiring import make_store

    assert settings.metrics_port is not None
    metrics.serve(settings.metrics_port, settings.metrics_addr, make_store(settings))


#: How often a process's sweeps read the step queue's depth, in seconds.
QUEUE_DEPTH_SECONDS = 5.0
_depth_read_at = -1e18


def read_queue_depth(app: Celery, queue: str) -> None:
    """After a sweep: the step queue's depth, every ``QUEUE_DEPTH_SECONDS`` (best effort)."""
    global _depth_read_at
    now = time.monotonic()
    if not metrics.available() or now - _depth_read_at < QUEUE_DEPTH_SECONDS:
        return
    _depth_read_at = now
    try:
        metrics.queue_depth(queue, metrics.queue_size(app, queue))
    except Exception as exc:  # the sweep's work is done; a depth is only a reading
        log.debug("queue depth of %s unavailable: %s", queue, exc)


def _process_shutdown(**_: Any) -> None:
    traces.flush()
    metrics.process_ended(os.getpid())


def _worker_shutdown(**_: Any) -> None:
    traces.shutdown()


def _beat_init(**_: Any) -> None:
    traces.setup_tracing("agentworker-beat")


def _json_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    if logger is not None and logs.json_enabled():
        logs.use_json(logger)
