"""One event loop per process, on its own thread, where async tools and models run.

The step kernel stays synchronous (DESIGN.md, invariant 11): a step thread hands a coroutine
to this loop and waits for its result, which comes back to the step thread, the only
writer. The loop is created on first use and again in a forked child (a prefork worker's
children each get their own), so loop-bound clients (httpx, ``redis.asyncio``, MCP
sessions, DB pools) live as long as the process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopReentryError(RuntimeError):
    """A blocking call was made from the process loop's own thread (it would deadlock)."""


class ProcessLoop:
    """The process's event loop thread; ``run`` waits on a coroutine from any other thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop of this process, started now if there is none yet."""
        loop = self._loop
        if loop is not None and self._pid == os.getpid():
            return loop
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                self._start()
            assert self._loop is not None
            return self._loop

    def _start(self) -> None:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        thread = threading.Thread(target=serve, name="agentworker-loop", daemon=True)
        thread.start()
        ready.wait()
        self._loop, self._thread, self._pid = loop, thread, os.getpid()

    def on_loop_thread(self) -> bool:
        """True when called from this process's loop thread."""
        return self._thread is threading.current_thread() and self._pid == os.getpid()

    def submit(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        context: contextvars.Context | None = None,
    ) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop (in ``context``, a copy of the caller's by default)."""
        if self.on_loop_thread():
            coro.close()
            raise LoopReentryError(
                "a blocking agentworker call was made on the process event loop's own thread; "
                "await the async API (arun, astart, ...) there instead"
            )
        ctx = contextvars.copy_context() if context is None else context
        loop = self.loop()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:
            if done.cancelled():  # given up before it started (the future stays PENDING
                coro.close()  # while it runs, so ``cancel()`` always reaches the task)
                return
            task = loop.create_task(coro, context=ctx)
            task.add_done_callback(lambda t: _settle(t, done))
            done.add_done_callback(lambda f: _cancel_task(loop, task, f))

        loop.call_soon_threadsafe(start)
        return done

    def run(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        timeout: float | None = None,
        context: contextvars.Context | None = None,
    ) -> T:
        """Run ``coro`` on the loop and wait for its result (``TimeoutError`` cancels it)."""
        future = self.submit(coro, context=context)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"timed out after {timeout:g} s") from None
        except BaseException:
            future.cancel()
            raise

    def _forget(self) -> None:
        """After a fork: the parent's loop thread does not exist here."""
        self._lock = threading.Lock()
        self._loop, self._thread, self._pid = None, None, 0


def _settle(task: asyncio.Task[T], done: concurrent.futures.Future[T]) -> None:
    if done.done():  # cancelled by the waiter
        return
    if task.cancelled():
        done.cancel()
    elif (exc := task.exception()) is not None:
        done.set_exception(exc)
    else:
        done.set_result(task.result())


def _cancel_task(
    loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], future: concurrent.futures.Future[Any]
) -> None:
    if future.cancelled() and not task.done():
        loop.call_soon_threadsafe(task.cancel)


PROCESS_LOOP = ProcessLoop()
"""The one loop of this process."""

os.register_at_fork(after_in_child=PROCESS_LOOP._forget)


def run(
    coro: Coroutine[Any, Any, T],
    *,
    timeout: float | None = None,
    context: contextvars.Context | None = None,
) -> T:
    """Run ``coro`` on the process loop and wait for it (see ``ProcessLoop.run``)."""
    return PROCESS_LOOP.run(coro, timeout=timeout, context=context)


def on_loop_thread() -> bool:
    """True when called from the process loop's own thread."""
    return PROCESS_LOOP.on_loop_thread()


def call_in(context: contextvars.Context, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` inside ``context`` (for work handed to another thread)."""
    return context.run(fn, *args)


class _Counter:
    """A process-wide count that threads add to (reset in a forked child)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def add(self, n: int = 1) -> None:
        with self._lock:
            self._value += n

    @property
    def value(self) -> int:
        return self._value

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._value = 0


ABANDONED_THREADS = _Counter()
"""Threads of sync tool calls left running past their timeout, in this process."""

os.register_at_fork(after_in_child=ABANDONED_THREADS._forget)


def abandoned_threads() -> int:
    """How many sync tool calls this process abandoned on a timeout (their threads live on)."""
    return ABANDONED_THREADS.value
