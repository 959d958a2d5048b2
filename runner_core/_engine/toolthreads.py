"""The threads that run sync tool calls with a bound (a timeout or the step's deadline).

Python cannot stop a thread: a call past its bound is abandoned and counted in
``aio.ABANDONED_THREADS``; its thread runs on until the call returns, drops the result and
then serves later calls again.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

from runner_core._engine.aio import ABANDONED_THREADS, DeadlineExceeded

T = TypeVar("T")


class ToolThreads:
    """Daemon threads that run sync calls with a bound, kept for the next call when idle.

    Python cannot stop a thread: a call past its bound is abandoned (counted in
    ``ABANDONED_THREADS``); its thread runs on until the call returns, drops the result and
    then serves again. Daemon threads never keep the process from exiting.
    """

    def __init__(self, keep_idle: int = 32) -> None:
        self.keep_idle = keep_idle
        self._forget()

    def submit(self, fn: Callable[[], T], *, name: str = "call") -> concurrent.futures.Future[T]:
        """Start ``fn()`` on an idle thread (or a new one); cancelling before it starts skips it."""
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), daemon=True).start()
        inbox.put((fn, done, name))
        return done

    def call(self, fn: Callable[[], T], timeout: float, *, name: str = "call") -> T:
        """``fn()`` on one of the threads; ``DeadlineExceeded`` past ``timeout`` seconds."""
        done = self.submit(fn, name=name)
        try:
            return done.result(timeout)
        except TimeoutError:
            if done.done():
                return done.result()  # it ended meanwhile, or the TimeoutError was its own
            ABANDONED_THREADS.add()
            raise DeadlineExceeded(f"timed out after {timeout:g} s") from None

    def _serve(self, inbox: SimpleQueue[tuple[Callable[[], Any], Any, str]]) -> None:
        me = threading.current_thread()
        while True:
            fn, done, name = inbox.get()
            me.name = f"agentworker-tool-{name}"
            if done.set_running_or_notify_cancel():  # else: cancelled before it started
                try:
                    done.set_result(fn())
                except BaseException as exc:
                    done.set_exception(exc)
            with self._lock:
                if self._pid != os.getpid() or len(self._idle) >= self.keep_idle:
                    return
                self._idle.append(inbox)

    def _forget(self) -> None:
        """Start with no thread (and after a fork: the parent's threads are not here)."""
        self._lock = threading.Lock()
        self._idle: list[SimpleQueue[tuple[Callable[[], Any], Any, str]]] = []
        self._pid = os.getpid()


TOOL_THREADS = ToolThreads()
"""The threads of this process's sync calls with a bound."""

os.register_at_fork(after_in_child=TOOL_THREADS._forget)
