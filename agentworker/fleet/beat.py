"""Beat's scheduler: at most one sweep waits in the broker, consumed or not.

The Redis broker drops an expired message only when a worker takes it, so a sweep schedule
nobody consumes would pile up messages forever. Beat therefore sends a sweep only when the
previous one has started: sending sets ``<namespace>:sweep:pending`` (SET NX, with a TTL of
a few sweep intervals) and the sweep task deletes it when it starts. When the key is absent
(the last sweep started, or its key expired because the message was lost or is still
waiting), beat also asks the broker how many sweeps wait in the queue and sends none while
one does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import redis
from celery.beat import PersistentScheduler

from agentworker.settings import Settings
from runner_core.errors import StoreUnavailableError
from stores.redis import Keyspace, SweepGate, make_client

log = logging.getLogger("agentworker.beat")

SWEEP_TASK = "agentworker.sweep"
#: How many sweep intervals the pending mark lives when the sweep never starts.
PENDING_INTERVALS = 5


def sweep_gate(redis_url: str, namespace: str, sweep_interval: float) -> SweepGate:
    """The gate of one deployment, on a client of its own (its holder keeps it)."""
    client = make_client(redis_url, socket_timeout=2.0, connect_timeout=2.0)
    return SweepGate(client, Keyspace(namespace), sweep_interval * PENDING_INTERVALS)


def gate_for(settings: Settings) -> SweepGate:
    """The gate for ``settings``."""
    return sweep_gate(settings.redis_url, settings.namespace, settings.sweep_interval)


def sweep_started(gate: Callable[[], SweepGate]) -> None:
    """Called first by the sweep task: clear the pending mark (best effort, it expires)."""
    try:
        gate().release()
    except (redis.RedisError, StoreUnavailableError) as exc:
        log.warning("sweep: could not clear the pending mark (%s); it expires by itself", exc)


class SweepScheduler(PersistentScheduler):  # type: ignore[misc]
    """Celery's persistent scheduler that never queues a sweep behind a waiting one.

    Set as ``beat_scheduler``; every other schedule entry is sent as usual. The gate's
    client is built at the first sweep, not at start: a cluster client reads the slot map
    when built, and beat must start (and send its other entries) while no node answers.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = Settings()
        self.settings = settings
        self.sweep_queue = settings.sweep_queue
        self._store_down = False
        self._stuck = False
        self._gate: SweepGate | None = None
        super().__init__(*args, **kwargs)

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        """Send a due entry; a sweep only if none is pending or waiting in the broker."""
        if entry.task != SWEEP_TASK:
            super().apply_entry(entry, producer=producer)
            return
        if not self._acquire():
            return
        try:
            waiting = self.waiting_sweeps()
            if waiting:
                self._report_stuck(waiting)
                return  # the mark stays: the broker is asked again once it expires
            self.apply_async(entry, producer=producer, advance=False)
            self._stuck = False
        except Exception:
            log.exception("beat: could not send %s", entry.task)
            self._release()

    def waiting_sweeps(self) -> int:
        """Sweep messages waiting in the broker (not those a worker already holds)."""
        queue = self.app.amqp.queues[self.sweep_queue]
        ok = queue.bind(self.producer.channel).queue_declare()
        return int(ok.message_count)

    def _report_stuck(self, waiting: int) -> None:
        level = logging.DEBUG if self._stuck else logging.WARNING
        log.log(
            level,
            "beat: %d sweep(s) still wait in %s: none sent (does a worker consume it?)",
            waiting,
            self.sweep_queue,
        )
        self._stuck = True

    @property
    def gate(self) -> SweepGate:
        """The pending mark (built on first use; raises while a cluster is unreachable)."""
        if self._gate is None:
            self._gate = gate_for(self.settings)
        return self._gate

    def _acquire(self) -> bool:
        try:
            acquired = self.gate.acquire()
        except (redis.RedisError, StoreUnavailableError) as exc:
            if not self._store_down:
                log.warning("beat: Redis unreachable (%s): no sweep until it is back", exc)
            self._store_down = True
            return False
        if self._store_down:
            log.warning("beat: Redis is back: sweeps resume")
            self._store_down = False
        return acquired

    def _release(self) -> None:
        try:
            self.gate.release()
        except (redis.RedisError, StoreUnavailableError):
            pass  # the mark expires by itself
