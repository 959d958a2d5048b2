"""Wake-ups: sending a turn id to the dispatcher, and knowing which ones are queued.

A commit whose writer will send a wake-up marks the turns it makes runnable as queued
(``Commit.wake``); the claim clears the mark. Wake-ups sent for unmarked turns (a cancel,
a repair, the sweeper) are marked after they are sent. A send that fails clears the mark
so the sweeper picks the turn up; with the store down too, the id is kept and sent with
this process's next successful wake-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from runner_core.store import AgentTurnStore

log = logging.getLogger("runner_core.runner")

Dispatcher = Callable[[str], None]


@runtime_checkable
class DescribingDispatcher(Protocol):
    """A dispatcher that can also show which agent a wake-up is for (Flower, logs).

    Optional: any ``Callable[[str], None]`` is a dispatcher; one with this method gets the
    agent id when the sender knows it. The message still carries the turn id only.
    """

    def __call__(self, turn_id: str) -> None:
        """Send a wake-up for ``turn_id``."""

    def send_for(self, turn_id: str, agent_id: str) -> None:
        """Send the same wake-up, described as one for ``agent_id``'s turn."""


class Waker:
    """Sends wake-ups through whatever dispatcher the runner has now."""

    def __init__(self, store: AgentTurnStore, dispatcher: Callable[[], Dispatcher | None]) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self._unsent: dict[str, None] = {}

    def dispatch(self, turn_id: str, *, marked: bool = False, agent_id: str | None = None) -> bool:
        """Send one wake-up; ``marked``: its commit marked it queued. True if sent."""
        sent = self._send(turn_id, marked=marked, agent_id=agent_id)
        if sent and not marked:
            self.store.mark_queued([turn_id])
        return sent

    def wake(self, turn_ids: Sequence[str]) -> int:
        """Send a wake-up for each turn and mark the sent ones queued (one store call)."""
        sent = [t for t in turn_ids if self._send(t, marked=False)]
        if sent:
            try:
                self.store.mark_queued(sent)
            except Exception:
                log.warning("marking %d wake-ups queued failed", len(sent), exc_info=True)
        return len(sent)

    def retry_unsent(self) -> int:
        """Send the wake-ups kept after a failure (the sweeper calls this every sweep)."""
        before = len(self._unsent)
        if before:
            self._send_unsent()
        return before - len(self._unsent)

    def _send(self, turn_id: str, *, marked: bool, agent_id: str | None = None) -> bool:
        dispatcher = self.dispatcher()
        if dispatcher is None:
            return False
        # what ``isinstance(dispatcher, DescribingDispatcher)`` tests, without the generic
        # protocol check (it walks the protocol's members on every wake-up)
        send_for = getattr(dispatcher, "send_for", None) if agent_id is not None else None
        try:
            if callable(send_for):
                send_for(turn_id, agent_id)
            else:
                dispatcher(turn_id)
        except Exception:
            log.exception("dispatching turn %s failed; the sweeper will send it", turn_id)
            if marked:
                self._unsent_wake_up(turn_id)
            return False
        if self._unsent:
            self._send_unsent()
        return True

    def _unsent_wake_up(self, turn_id: str) -> None:
        """A marked turn whose wake-up failed: clear the mark, or (store down too) keep it."""
        try:
            self.store.unmark_queued(turn_id)
        except Exception:
            if len(self._unsent) < 10_000:
                self._unsent[turn_id] = None
            log.warning("turn %s stays marked queued; resent with the next wake-up", turn_id)

    def _send_unsent(self) -> None:
        for turn_id in list(self._unsent):
            self._unsent.pop(turn_id, None)
            if not self._send(turn_id, marked=True):
                return
