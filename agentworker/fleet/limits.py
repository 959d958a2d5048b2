"""Who stops a step that runs too long on each worker pool: said at start, refused if no one.

Every pool gets the runner's own limits: at ``AGENTWORKER_STEP_TIME_LIMIT`` a step's tool
calls and async model calls stop (the model is told), and a step still running
``step_grace_seconds`` later loses its lease (the lease backstop, runner_core/worker.py):
another worker takes the turn, and the stuck step's writes are fenced. What differs is what
happens to the stuck thread:

* ``solo``: Celery enforces no time limit; the worker's one process stays busy until the
  call returns (other workers take its turns).
* ``threads``: the same, for one thread of ``--concurrency``.
* ``prefork``: Celery's soft limit then raises ``SoftTimeLimitExceeded`` in the step (whose
  writes are already fenced: the turn is not failed) and its hard limit kills the child.
* ``gevent``/``eventlet``: refused. The heartbeat, the tool timeouts and the process event
  loop need real threads; under monkey-patching a call that does not yield stops them all.
"""

from __future__ import annotations

from typing import Any

from agentworker.settings import Settings
from runner_core import ConfigurationError

_MODULES = {
    "celery.concurrency.prefork": "prefork",
    "celery.concurrency.solo": "solo",
    "celery.concurrency.thread": "threads",
    "celery.concurrency.gevent": "gevent",
    "celery.concurrency.eventlet": "eventlet",
}
_ALIASES = {"processes": "prefork", **{name: name for name in _MODULES.values()}}
GREEN_POOLS = ("gevent", "eventlet")


class UnsupportedPoolError(ConfigurationError):
    """Raised when a worker starts on a pool where the step time limit cannot be enforced."""

    def __init__(self, pool: str) -> None:
        super().__init__(
            f"--pool={pool} is not supported: the lease heartbeat, the tool timeouts and the "
            "process event loop need real threads, and under its monkey-patching a call that "
            "does not yield stops them all; use --pool=threads (I/O-bound agents) or prefork"
        )
        self.pool = pool


def pool_name(pool: Any) -> str:
    """``prefork``, ``solo``, ``threads``, ``gevent``, ``eventlet``, or the pool's own path.

    ``pool`` is what the worker holds: a class (from the command line) or a name or
    ``module:Class`` path (from the configuration).
    """
    if isinstance(pool, str):
        module = pool.partition(":")[0]
        return _ALIASES.get(pool) or _MODULES.get(module) or pool
    module = getattr(pool, "__module__", "") or ""
    if module in _MODULES:
        return _MODULES[module]
    return f"{module}:{getattr(pool, '__qualname__', type(pool).__name__)}"


def check_pool(pool: Any) -> None:
    """Raise ``UnsupportedPoolError`` for a pool where the limits cannot be enforced."""
    name = pool_name(pool)
    if name in GREEN_POOLS:
        raise UnsupportedPoolError(name)


def enforcement(settings: Settings, pool: Any) -> str:
    """One line for the worker's log: what stops a long step on this pool, and when."""
    name = pool_name(pool)
    limit, grace = settings.step_time_limit, settings.step_grace_seconds
    ours = (
        f"pool {name}: a step's tool and async model calls stop at {limit:g} s "
        f"(AGENTWORKER_STEP_TIME_LIMIT) and a step still running {grace:g} s later loses its "
        "lease to another worker"
    )
    if name == "prefork":
        return (
            f"{ours}; then Celery's soft limit raises SoftTimeLimitExceeded in the step at "
            f"{settings.task_soft_time_limit:g} s and its hard limit kills the child at "
            f"{settings.task_time_limit:g} s"
        )
    if name in ("solo", "threads"):
        busy = "this worker's process" if name == "solo" else "one of its threads"
        return (
            f"{ours}; Celery's time limits are not enforced on this pool: a call that never "
            f"returns keeps {busy} busy"
        )
    return f"{ours}; whether Celery's time limits are enforced depends on this pool"
