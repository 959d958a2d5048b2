"""All state of one worker or beat process, in one object that ``wiring.create_app`` builds.

A prefork worker builds its app (and so this object) in its main process, then forks: what
a child must not share with its parent (the runner, whose store and event loop belong to
one process, and the clock of its repair scans) is built again in the child at first use.
Clients that survive a fork (redis-py reconnects in a new pid) are built once.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, signals

from agentworker.fleet.beat import gate_for
from agentworker.fleet.limits import check_pool, enforcement
from agentworker.fleet.queues import declare_queues
from agentworker.fleet.stepping import RepairClock
from agentworker.ops.signals import Observability, QueueDepth
from agentworker.settings import Settings
from runner_core import AgentRunner, AgentWorkerError
from runner_core.store import AgentTurnStore
from stores.redis import SweepGate, make_client

log = logging.getLogger("agentworker.worker")


class FleetApp(Celery):  # type: ignore[misc]
    """The Celery app of agentworker; ``process`` holds the state of the process it runs in."""

    process: FleetProcess


@dataclass
class _Forked:
    """What belongs to one OS process: a forked child starts a new one at first use."""

    pid: int
    runner: AgentRunner | None = None
    repairs: RepairClock = field(default_factory=RepairClock)


class FleetProcess:
    """Everything a worker or beat process keeps between tasks; nothing else is global.

    ``build_runner`` and ``build_store`` come from the composition root, so this module
    needs nothing of it.
    """

    def __init__(
        self,
        app: Celery,
        settings: Settings,
        build_runner: Callable[[], AgentRunner],
        build_store: Callable[[], AgentTurnStore],
    ) -> None:
        self.app = app
        self.settings = settings
        self.build_store = build_store
        self._build_runner = build_runner
        self.observability = Observability(app, settings, build_store)
        self.queue_depth = QueueDepth(app, settings.step_queue)
        self._lock = threading.Lock()
        self._forked = _Forked(os.getpid())
        self._webhook_redis: Any = None
        self._gate: SweepGate | None = None

    def connect(self) -> None:
        """Connect the app's worker and beat signals: the start checks first, then telemetry.

        Weakly: the app holds this object, so an app nobody holds any more (a test's) takes
        its handlers with it. The dispatch uid names this object: Celery 5.4 keys a bound
        method by its function alone, so a second app's handler would not be connected.
        """
        uid = f"agentworker.check_worker.{id(self)}"
        signals.worker_init.connect(self.check_worker, weak=True, dispatch_uid=uid)
        uid = f"agentworker.say_limits.{id(self)}"
        signals.celeryd_after_setup.connect(self.say_limits, weak=True, dispatch_uid=uid)
        self.observability.connect()

    def runner(self) -> AgentRunner:
        """The runner of this process, built at first use (in a prefork child: after the fork)."""
        with self._lock:
            forked = self._current()
            if forked.runner is None:
                forked.runner = self._build_runner()
            return forked.runner

    def repairs(self) -> RepairClock:
        """When this process's sweeps last ran the repair scan."""
        with self._lock:
            return self._current().repairs

    def webhook_redis(self) -> Any:
        """The webhook outbox's client (one per process; redis-py reconnects after a fork)."""
        with self._lock:
            if self._webhook_redis is None:
                self._webhook_redis = make_client(self.settings.redis_url)
            return self._webhook_redis

    def sweep_gate(self) -> SweepGate:
        """Beat's pending mark, built at first use (raises while a cluster is unreachable)."""
        with self._lock:
            if self._gate is None:
                self._gate = gate_for(self.settings)
            return self._gate

    def check_worker(self, sender: Any = None, **_: Any) -> None:
        """Refuse to start a worker of this app that cannot serve: agents, queues, pool.

        It must load its agents, declare its queues and run on a pool where the step time
        limit is enforced (``fleet/limits.py``). One line, exit status 2 (a queue of another
        type: ``QueueTypeMismatchError``). Connected to ``worker_init``: beat, Flower and
        producers start without agents.
        """
        if getattr(sender, "app", None) is not self.app:
            return
        try:
            check_pool(getattr(sender, "pool_cls", None))
            self.settings.load_agent_loader()
            declare_queues(self.app, self.settings.queue_type)
        except AgentWorkerError as exc:
            sys.stderr.write(f"agentworker: the worker cannot start: {exc}\n")
            sys.stderr.flush()
            raise SystemExit(2) from None

    def say_limits(self, sender: Any = None, instance: Any = None, **_: Any) -> None:
        """Log which pool enforces what of the step time limit (``celeryd_after_setup``)."""
        if getattr(instance, "app", None) is self.app:
            log.info("%s", enforcement(self.settings, getattr(instance, "pool_cls", None)))

    def _current(self) -> _Forked:
        if self._forked.pid != os.getpid():
            self._forked = _Forked(os.getpid())
        return self._forked


def worker_id() -> str:
    """``host:pid``; every claim also gets a fresh random lease id, so reuse is safe."""
    return f"{socket.gethostname()}:{os.getpid()}"
