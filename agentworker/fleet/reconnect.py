"""After the worker's broker connection comes back, wake-ups in flight may be gone.

kombu's Redis transport takes a message (BRPOP) and records it as unacked in a second
command: a connection that breaks in between loses the message, and messages a worker
held when it broke come back only after the visibility timeout. A lost wake-up's turn is
still marked queued, so the sweeper would trust it for ``requeue_after_seconds`` (300 s by
default). When the consumer reconnects, this step therefore clears the marks set before
that moment (``AgentTurnStore.forget_queued``): the sweeper re-sends those turns that
nobody claims within ``lost_wakeup_seconds``. A backlog loses its marks once per broker
outage, so each queued turn gets at most one extra wake-up per outage.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import bootsteps

from runner_core.store import AgentTurnStore

log = logging.getLogger("agentworker.reconnect")


class ForgetQueuedOnReconnect(bootsteps.StartStopStep):  # type: ignore[misc]
    """A consumer bootstep: its ``start`` runs at boot and again after each reconnection.

    The store comes from the app's process object (``FleetApp.process``): Celery builds
    bootsteps itself, from the consumer, which knows its app.
    """

    requires = {"celery.worker.consumer.connection:Connection"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.connections = 0

    def start(self, parent: Any) -> None:
        """Count connections; from the second on, forget the marks set before it."""
        self.connections += 1
        if self.connections > 1:
            build_store = parent.app.process.build_store
            forget = threading.Thread(target=forget_after_reconnect, args=(build_store,))
            forget.daemon = True
            forget.start()


def forget_after_reconnect(build_store: Callable[[], AgentTurnStore]) -> int:
    """Clear the queued marks set before now; how many (0 and a warning on failure)."""
    try:
        store = build_store()
        cleared = store.forget_queued(store.now())
    except Exception as exc:  # the store may still be down: the marks run out by themselves
        log.warning(
            "broker connection back, but the queued marks could not be cleared (%s): "
            "wake-ups lost with the connection are re-sent when their marks run out",
            exc,
        )
        return 0
    log.info("broker connection back: %d queued wake-ups will be re-sent if unclaimed", cleared)
    return cleared
