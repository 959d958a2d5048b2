"""The dispatcher: a Celery message per runnable turn, carrying its id and nothing else."""

from __future__ import annotations

from celery import Celery


class CeleryDispatcher:
    """Sends ``agentworker.step_turn(turn_id)``; a lost or doubled message is harmless."""

    def __init__(self, app: Celery, queue: str) -> None:
        self.app = app
        self.queue = queue

    def __call__(self, turn_id: str) -> None:
        """Wake a worker for ``turn_id``."""
        self.app.send_task(
            "agentworker.step_turn",
            args=[turn_id],
            queue=self.queue,
            argsrepr=f"(turn_id={turn_id!r})",
        )
