"""Stream entries that ride in the next commit's round trip, or go on their own soon after.

A step's provisional events (the step, model and tool calls starting) are streamed before
its commit, so a follower sees them first. Sent on their own they would cost every step a
second round trip. Instead the event bridge hands them here (``put``) and the store's next
commit of the same turn, on the same server, sends them in its own write, ahead of its
script (``take``), so they still land first. What no commit takes within ``delay``
seconds (a call that runs longer, a step that commits nothing) a background thread sends
by itself, so a follower sees a long call begin at most ``delay`` after it began.

One thread per ``StreamRiders``, started at its first ``put`` (again after a fork); it
wakes at most once per ``delay`` while entries wait, once a second otherwise, and ends
when its riders are collected.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence

from stores.redis.codec import Arg

#: One command: ``("XADD", key, ...)``.
Command = tuple[Arg, ...]
#: Seconds an entry waits for a commit to take it before the thread sends it.
DELAY = 0.02
#: Seconds between an idle thread's checks that its riders still exist.
IDLE_CHECK = 1.0


class StreamRiders:
    """Commands waiting for the next commit; ``send`` writes those none took in time.

    ``send`` gets the waiting commands turn by turn (the turn that waits longest first),
    each turn's in the order they were put, and must not raise: it logs its failures.
    """

    def __init__(self, send: Callable[[Sequence[Command]], None], delay: float = DELAY) -> None:
        self.send = send
        self.delay = delay
        #: Waiting commands by the turn whose events they write, oldest turn first.
        self._waiting: dict[str, list[Command]] = {}
        self._since = 0.0
        self._started = False
        self._idle = True
        self._generation = 0
        self._in_flight = False
        self._cond = threading.Condition()
        #: Held while the thread sends: a commit takes nothing until that write is done,
        #: so its own events never land before the provisional ones sent ahead of them.
        self._sending = threading.Lock()
        _LIVE.add(self)

    def put(self, turn_id: str, commands: Sequence[Command]) -> None:
        """Have the next commit of ``turn_id`` (or the thread, after ``delay``) send them."""
        self._wait(turn_id, commands, first=False)

    def take(self, turn_id: str) -> list[Command]:
        """What waits for ``turn_id``'s commit, to send ahead of its script (oldest first).

        Only that turn's: a commit carrying another turn's entries could land after that
        turn's own commit, sent at the same time from another thread. While the thread
        sends, this waits until that write is done.
        """
        # read without the locks: ``flush`` marks its send before it empties the table,
        # and a put racing this take is a later event, which rides with a later commit
        if turn_id not in self._waiting and not self._in_flight:
            return []
        with self._sending, self._cond:
            return self._waiting.pop(turn_id, [])

    def put_back(self, turn_id: str, commands: Sequence[Command]) -> None:
        """Entries ``take`` gave a commit whose write failed: first in line again.

        The next commit of the turn (the kernel tries it again) or the thread sends them,
        ahead of anything put since. A write that failed after the server ran it may so
        stream them twice (provisional events only), never lose them.
        """
        self._wait(turn_id, commands, first=True)

    def _wait(self, turn_id: str, commands: Sequence[Command], *, first: bool) -> None:
        """Queue ``commands`` for ``turn_id`` (ahead of what waits, if ``first``)."""
        if not commands:
            return
        with self._cond:
            if not self._started:
                self._started = True
                args = (weakref.ref(self), self._generation)
                thread = threading.Thread(target=_serve, args=args, name="stream-riders")
                thread.daemon = True
                thread.start()
            if not self._waiting:
                self._since = time.monotonic()
            queued = self._waiting.get(turn_id, [])
            self._waiting[turn_id] = [*commands, *queued] if first else [*queued, *commands]
            if self._idle:
                self._idle = False
                self._cond.notify()

    def flush(self) -> None:
        """Send what waits now (the thread does it after ``delay``; also at exit)."""
        with self._sending:
            with self._cond:
                if not self._waiting:
                    return
                self._in_flight = True
                taken = [c for commands in self._waiting.values() for c in commands]
                self._waiting = {}
            try:
                self.send(taken)
            finally:
                self._in_flight = False

    def _forked(self) -> None:
        """In a forked child: the thread is gone and the locks may be held by it."""
        self._cond = threading.Condition()
        self._sending = threading.Lock()
        self._started = False
        self._idle = True
        self._in_flight = False
        self._generation += 1

    def _wait_until_due(self) -> bool:
        """Block a while (a second at most); True when what waits is due to be sent."""
        with self._cond:
            if not self._waiting:
                self._idle = True
                self._cond.wait(IDLE_CHECK)
                return False
            self._idle = False
            wait = self._since + self.delay - time.monotonic()
            if wait > 0:
                self._cond.wait(wait)  # a commit may take them meanwhile
                return False
            return True


def _serve(ref: weakref.ref[StreamRiders], generation: int) -> None:
    """The thread: holds its riders only between waits, so they can be collected."""
    while True:
        riders = ref()
        if riders is None or riders._generation != generation:  # noqa: SLF001
            return
        if riders._wait_until_due():  # noqa: SLF001
            riders.flush()
        del riders


_LIVE: weakref.WeakSet[StreamRiders] = weakref.WeakSet()


def _after_fork() -> None:
    for riders in list(_LIVE):
        riders._forked()  # noqa: SLF001 - this module's own bookkeeping


def _at_exit() -> None:
    for riders in list(_LIVE):
        riders.flush()


os.register_at_fork(after_in_child=_after_fork)
atexit.register(_at_exit)
