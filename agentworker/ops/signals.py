"""Traces, metrics and JSON logs in Celery processes, wired through Celery's signals.

``Observability(app, settings, store).connect()`` (``wiring.create_app`` calls it through
the app's process object) connects, for that app:

* ``worker_init`` (the main worker process, before a prefork pool forks): the OpenTelemetry
  SDK when OTEL_* asks for it (``agentworker.ops.traces``; children inherit it, the batch
  exporter restarts after the fork), and the metrics port when
  ``AGENTWORKER_METRICS_PORT`` is set. The port serves every process of the worker:
  metrics go to ``PROMETHEUS_MULTIPROC_DIR`` (a fresh temporary directory when unset).
* ``beat_init``: the SDK, for beat's own spans (Celery's publish spans).

and, once per process whatever the app (they need none):

* ``worker_process_shutdown``: buffered spans are flushed, the child's gauges dropped.
* ``worker_shutdown``: the exporter stops.
* ``after_setup_logger`` / ``after_setup_task_logger``: ``AGENTWORKER_LOG_FORMAT=json``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from celery import Celery, signals

from agentworker.ops import logs, metrics, traces
from agentworker.settings import Settings
from runner_core.store import AgentTurnStore

log = logging.getLogger("agentworker.observability")


class Observability:
    """The handlers of one app's worker and beat; ``store`` builds the store the port counts."""

    def __init__(
        self, app: Celery, settings: Settings, store: Callable[[], AgentTurnStore]
    ) -> None:
        self.app = app
        self.settings = settings
        self.store = store

    def connect(self) -> None:
        """Connect the handlers; weakly, so they live as long as their holder (the app's).

        Each under a uid of this object's (Celery 5.4 keys a bound method by its function).
        """
        uid = f"agentworker.observability.{id(self)}"
        signals.worker_init.connect(self._worker_init, weak=True, dispatch_uid=uid)
        signals.beat_init.connect(self._beat_init, weak=True, dispatch_uid=uid)
        connect_process_handlers()

    def _worker_init(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not self.app:
            return  # another app's worker (tests build many apps in one process)
        if self.settings.metrics_port is not None:
            start_worker_metrics(self.settings, self.store)
        traces.setup_tracing("agentworker-worker")

    def _beat_init(self, sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is self.app:
            traces.setup_tracing("agentworker-beat")


def connect_process_handlers() -> None:
    """The handlers that serve every app of the process (Celery keeps one per dispatch_uid)."""
    for signal, handler in (
        (signals.worker_process_shutdown, _process_shutdown),
        (signals.worker_shutdown, _worker_shutdown),
        (signals.after_setup_logger, _json_logs),
        (signals.after_setup_task_logger, _json_logs),
    ):
        signal.connect(handler, weak=False, dispatch_uid=f"agentworker.{handler.__name__}")


def start_worker_metrics(settings: Settings, store: Callable[[], AgentTurnStore]) -> None:
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
    assert settings.metrics_port is not None
    metrics.serve(settings.metrics_port, settings.metrics_addr, store())


#: How often a process's sweeps read the step queue's depth, in seconds.
QUEUE_DEPTH_SECONDS = 5.0


class QueueDepth:
    """The step queue's depth, read after a sweep at most every ``QUEUE_DEPTH_SECONDS``."""

    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue
        self.read_at = float("-inf")

    def read(self) -> None:
        """Record the depth when due (best effort)."""
        now = time.monotonic()
        if not metrics.available() or now - self.read_at < QUEUE_DEPTH_SECONDS:
            return
        self.read_at = now
        try:
            metrics.queue_depth(self.queue, metrics.queue_size(self.app, self.queue))
        except Exception as exc:  # the sweep's work is done; a depth is only a reading
            log.debug("queue depth of %s unavailable: %s", self.queue, exc)


def _process_shutdown(**_: Any) -> None:
    traces.flush()
    metrics.process_ended(os.getpid())


def _worker_shutdown(**_: Any) -> None:
    traces.shutdown()


def _json_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    if logger is not None and logs.json_enabled():
        logs.use_json(logger)
