"""One event loop per process, where async tools and models run.

The step kernel stays synchronous (DESIGN.md, invariant 11): a step thread hands a coroutine
to this loop and waits for its result, which comes back to the step thread, the only
writer. The loop is created on first use and again in a forked child (a prefork worker's
children each get their own), so loop-bound clients (httpx, ``redis.asyncio``, MCP
sessions, DB pools) live as long as the process.

Two ways of running the one loop, chosen per call:

* **driven**: while nothing else needs the loop (no task, timer or open socket left on it,
  no other caller), the calling thread runs it itself until its coroutine is done. No
  thread hop: an async call costs about what ``run_until_complete`` costs.
* **threaded**: once anything outlives a call (a client's socket or background task, a
  timer, a second caller arriving while one drives, ``submit``), the loop moves to its own
  daemon thread for good and callers wait on it there, so whatever lives on the loop keeps
  running between calls.

Either way one loop object serves the whole process and only one thread runs it at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from queue import Empty, SimpleQueue
from typing import Any, TypeVar

from runner_core.errors import LoopReentryError as LoopReentryError

T = TypeVar("T")

CANCEL_GRACE = 0.05
"""Seconds a driven call waits for a cancelled coroutine to finish before giving it up."""


class DeadlineExceeded(TimeoutError):  # noqa: N818 - a TimeoutError, named for what it is
    """``run`` gave up on a coroutine at its timeout (and cancelled it)."""


class ProcessLoop:
    """The process's event loop; ``run`` waits on a coroutine from any thread but its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._driver: int | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop of this process, running on its own thread from now on."""
        with self._lock:
            self._ensure()
            if self._thread is None and self._driver is None:
                self._start_thread()
            assert self._loop is not None
            return self._loop

    @property
    def threaded(self) -> bool:
        """True once the loop runs on its own thread (it stays there until a fork)."""
        return self._thread is not None and self._pid == os.getpid()

    def on_loop_thread(self) -> bool:
        """True when called from the thread running this process's loop."""
        if self._pid != os.getpid():
            return False
        thread = self._thread
        return thread is threading.current_thread() or self._driver == threading.get_ident()

    def submit(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        context: contextvars.Context | None = None,
    ) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop (in ``context``, a copy of the caller's by default).

        The loop moves to its own thread, since nobody waits here to run it.
        """
        self._refuse_reentry(coro)
        ctx = contextvars.copy_context() if context is None else context
        with self._lock:
            self._ensure()
            if self._thread is None and self._driver is None:
                self._start_thread()
            return self._schedule(coro, ctx)

    def run(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        timeout: float | None = None,
        context: contextvars.Context | None = None,
    ) -> T:
        """Run ``coro`` on the loop and wait for its result.

        ``DeadlineExceeded`` (a ``TimeoutError``) at ``timeout`` seconds cancels it;
        ``LoopReentryError`` when called on the loop's own thread.
        """
        self._refuse_reentry(coro)
        ctx = contextvars.copy_context() if context is None else context
        with self._lock:
            self._ensure()
            drive = self._thread is None and self._driver is None and not _loop_running_here()
            if drive:
                self._driver = threading.get_ident()
            else:
                if self._thread is None and self._driver is None:
                    self._start_thread()  # this thread runs another loop: cannot drive ours
                future = self._schedule(coro, ctx)
        if drive:
            return self._drive(coro, ctx, timeout)
        return _wait(future, timeout)

    # -- driven ---------------------------------------------------------------------------
    def _drive(
        self, coro: Coroutine[Any, Any, T], ctx: contextvars.Context, timeout: float | None
    ) -> T:
        loop = self._loop
        assert loop is not None
        try:
            task = loop.create_task(coro, context=ctx)
        except BaseException:
            self._release()
            coro.close()
            raise
        try:
            expired = _run_until_done(loop, task, timeout)
        except BaseException:
            task.cancel()  # interrupted (a signal): nobody waits for it any more
            raise
        finally:
            self._release()
        if expired:
            raise DeadlineExceeded(f"timed out after {timeout:g} s")
        return task.result()

    def _release(self) -> None:
        """Stop driving; a loop with anything left on it moves to its own thread."""
        loop = self._loop
        assert loop is not None
        with self._lock:
            if _idle(loop):
                self._driver = None
                return
        _flush(loop)  # still the driver: whoever schedules now is seen by the check below
        with self._lock:
            if self._pid == os.getpid() and not _idle(loop):
                self._start_thread()
            self._driver = None

    # -- threaded -------------------------------------------------------------------------
    def _schedule(
        self, coro: Coroutine[Any, Any, T], ctx: contextvars.Context
    ) -> concurrent.futures.Future[T]:
        loop = self._loop
        assert loop is not None
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:
            if done.cancelled():  # given up before it started (the future stays PENDING
                coro.close()  # while it runs, so ``cancel()`` always reaches the task)
                return
            task = loop.create_task(_settling(coro, done), context=ctx)
            done.add_done_callback(lambda f: _cancel_task(loop, task, f))

        loop.call_soon_threadsafe(start)
        return done

    def _start_thread(self) -> None:
        """Run the loop on its own daemon thread from now on (called holding the lock)."""
        loop = self._loop
        assert loop is not None
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            while True:  # a stray loop.stop() must not leave the process without its loop
                loop.run_forever()

        thread = threading.Thread(target=serve, name="agentworker-loop", daemon=True)
        self._thread = thread
        thread.start()
        ready.wait()

    # -- both -----------------------------------------------------------------------------
    def _ensure(self) -> None:
        """A loop for this process (called holding the lock)."""
        if self._loop is None or self._pid != os.getpid():
            self._loop, self._thread, self._driver = asyncio.new_event_loop(), None, None
            self._pid = os.getpid()

    def _refuse_reentry(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self.on_loop_thread():
            coro.close()
            raise LoopReentryError(
                "a blocking agentworker call was made on the process event loop's own thread; "
                "await the async API (arun, astart, ...) there instead"
            )

    def _forget(self) -> None:
        """After a fork: the parent's loop (and its thread) is not this process's."""
        self._lock = threading.Lock()
        self._loop, self._thread, self._driver, self._pid = None, None, None, 0


def _run_until_done(
    loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], timeout: float | None
) -> bool:
    """Run ``loop`` on this thread until ``task`` is done or its timeout; True if timed out."""
    expired: list[asyncio.TimerHandle] = []

    def expire() -> None:
        task.cancel()
        expired.append(loop.call_later(CANCEL_GRACE, loop.stop))

    def stop(_: object) -> None:
        loop.stop()

    task.add_done_callback(stop)
    timer = loop.call_later(timeout, expire) if timeout is not None else None
    try:
        while not task.done():
            loop.run_forever()  # stopped when the task is done, or at the grace after expiry
            if expired:
                break
    finally:
        task.remove_done_callback(stop)
        for handle in (timer, *expired):
            if handle is not None:
                handle.cancel()
    return bool(expired)


def _idle(loop: asyncio.AbstractEventLoop) -> bool:
    """Nothing left on ``loop``: no task, no live timer, no callback, no socket but its own.

    Reads the default loop's internals; any other loop counts as busy (so it is threaded).
    """
    ready = getattr(loop, "_ready", None)
    scheduled = getattr(loop, "_scheduled", None)
    selector = getattr(loop, "_selector", None)
    if ready is None or scheduled is None or selector is None:
        return False
    if ready or not all(handle.cancelled() for handle in scheduled):
        return False
    if len(selector.get_map()) > 1:  # the loop's own self-pipe is always there
        return False
    return not asyncio.all_tasks(loop)


def _flush(loop: asyncio.AbstractEventLoop, rounds: int = 3) -> None:
    """Run the callbacks a finished task left behind (done callbacks, closed transports)."""
    for _ in range(rounds):
        if not getattr(loop, "_ready", None):
            return
        loop.call_soon(loop.stop)
        loop.run_forever()


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _wait(future: concurrent.futures.Future[T], timeout: float | None) -> T:
    try:
        return future.result(timeout)
    except TimeoutError:
        if not future.done():
            future.cancel()
            raise DeadlineExceeded(f"timed out after {timeout:g} s") from None
        return future.result()  # it ended meanwhile, or the TimeoutError was its own
    except BaseException:
        future.cancel()
        raise


async def _settling(coro: Coroutine[Any, Any, T], done: concurrent.futures.Future[T]) -> None:
    """Await ``coro`` and hand its outcome to ``done`` (in the same loop iteration)."""
    try:
        result = await coro
    except asyncio.CancelledError:
        done.cancel()
        raise
    except BaseException as exc:
        _hand(done.set_exception, exc)
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
    else:
        _hand(done.set_result, result)


def _hand(setter: Callable[[Any], None], value: Any) -> None:
    try:
        setter(value)
    except concurrent.futures.InvalidStateError:
        pass  # the waiter gave up (a timeout) in the meantime


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


def submit(
    coro: Coroutine[Any, Any, T], *, context: contextvars.Context | None = None
) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the process loop without waiting (see ``ProcessLoop.submit``)."""
    return PROCESS_LOOP.submit(coro, context=context)


def iterate(
    items: AsyncIterator[T],
    *,
    deadline: float | None = None,
    context: contextvars.Context | None = None,
) -> Generator[T, None, None]:
    """The items of an async iterator, as they come, on the calling thread.

    One task on the process loop drains ``items`` into a queue this thread reads, so an
    async generator runs in one task from start to end (cancel scopes stay in their
    task). ``deadline`` is a ``time.monotonic()`` value: past it ``DeadlineExceeded`` is
    raised and the task cancelled, as it is when the caller stops early.
    """
    queue: SimpleQueue[tuple[int, Any]] = SimpleQueue()

    async def pump() -> None:
        try:
            async for item in items:
                queue.put((_ITEM, item))
        except Exception as exc:
            queue.put((_FAILED, exc))
        else:
            queue.put((_END, None))

    future = submit(pump(), context=context)
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                kind, value = queue.get(timeout=left)
            except Empty:
                raise DeadlineExceeded("the deadline passed before the next item") from None
            if kind == _END:
                return
            if kind == _FAILED:
                raise value
            yield value
    finally:
        future.cancel()


_ITEM, _FAILED, _END = 0, 1, 2


def on_loop_thread() -> bool:
    """True when called from the thread running the process loop."""
    return PROCESS_LOOP.on_loop_thread()


def is_async_callable(fn: object) -> bool:
    """A coroutine function (or partial of one), or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - the method itself is what we inspect
    return call is not None and inspect.iscoroutinefunction(call)


def is_async_generator_callable(fn: object) -> bool:
    """An async generator function, or an object whose ``__call__`` is one."""
    if inspect.isasyncgenfunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - the method itself is what we inspect
    return call is not None and inspect.isasyncgenfunction(call)


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
