"""Per-process dependencies of an agent: built once per worker process, never persisted.

``Agent(deps=factory)`` names a zero-argument callable (sync or ``async``) returning
whatever the agent's tools share: a database pool, an HTTP client, an MCP session. The
first tool call of the agent in a process builds it (an async factory on the process
event loop, so loop-bound clients live there); every later call, of any turn, in any
thread of that process, gets the same object as ``AgentToolContext.deps``. A forked child
builds its own. Nothing of it is ever saved: a restored turn gets the process's object.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from runner_core._engine import aio
from runner_core.tools import ToolCallAbortedError

if TYPE_CHECKING:
    from runner_core.agent import Agent

log = logging.getLogger("runner_core.deps")

#: What ``Agent(deps=...)`` takes: a zero-argument callable, sync or async.
DepsFactory = Callable[[], Any]

_Key = tuple[str, str, int]


class DependencyError(ToolCallAbortedError):
    """Raised when an agent's ``deps`` factory fails; the tool call that needed it fails.

    Retryable: the turn is retried by its retry policy (a database that was down may be
    up at the next attempt, which builds again) and fails once the attempts run out. It
    never goes back to the model, whatever the tool-error strategy.
    """

    def __init__(self, agent_id: str, version: str, cause: BaseException) -> None:
        super().__init__(
            f"agent {agent_id!r} version {version!r}: its deps factory failed: "
            f"{type(cause).__name__}: {cause}"
        )
        self.agent_id = agent_id
        self.version = version
        self.retryable = True


class ProcessDeps:
    """The dependencies built in this process, per agent id, version and factory."""

    def __init__(self) -> None:
        self._forget()

    def get(self, agent: Agent) -> Any:
        """The agent's dependencies (built now on first use); None when it has none."""
        factory = agent.deps
        if factory is None:
            return None
        key = (agent.id, agent.version, id(factory))
        built = self._built.get(key)
        if built is not None and built[0] is factory:
            return built[1]
        return self._build(agent, key, factory)

    def _build(self, agent: Agent, key: _Key, factory: DepsFactory) -> Any:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one build per agent, while other agents' calls go on
            built = self._built.get(key)
            if built is not None and built[0] is factory:
                return built[1]
            try:
                value = _call(factory)
            except Exception as exc:
                self._report(agent, key, exc)
                raise DependencyError(agent.id, agent.version, exc) from exc
            self._built[key] = (factory, value)
            return value

    def _report(self, agent: Agent, key: _Key, exc: Exception) -> None:
        with self._lock:
            first = key not in self._reported
            self._reported.add(key)
        if first:
            log.error(
                "agent %r version %r: deps factory failed in process %d: %s: %s "
                "(logged once per process; every call that needs them fails the same way)",
                agent.id,
                agent.version,
                os.getpid(),
                type(exc).__name__,
                exc,
                exc_info=exc,
            )

    def _forget(self) -> None:
        """Start empty (and after a fork: the parent's objects are not this process's)."""
        self._lock = threading.Lock()
        self._locks: dict[_Key, threading.Lock] = {}
        self._built: dict[_Key, tuple[DepsFactory, Any]] = {}
        self._reported: set[_Key] = set()


def _call(factory: DepsFactory) -> Any:
    if inspect.iscoroutinefunction(factory):
        return aio.run(factory())
    value = factory()
    if inspect.isawaitable(value):
        return aio.run(_await(value))
    return value


async def _await(value: Awaitable[Any]) -> Any:
    return await value


PROCESS_DEPS = ProcessDeps()
"""The dependencies of this process's agents."""

os.register_at_fork(after_in_child=PROCESS_DEPS._forget)


def agent_deps(agent: Agent) -> Any:
    """The agent's dependencies in this process (built on first use); None without a factory."""
    return PROCESS_DEPS.get(agent)
