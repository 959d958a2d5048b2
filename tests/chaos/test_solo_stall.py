"""The stall that keeps the solo pool off RabbitMQ, reproduced (deploy/README.md).

The solo pool runs a task inside the event loop's read callback; the late ack it queues
with ``call_soon`` waits for the loop's next poll timeout (about 2 s), and with prefetch 1
RabbitMQ sends nothing meanwhile. It does not happen on every run, so up to three rounds
are tried; if Celery fixes it, this test fails, and solo may come back on AMQP.
"""

from __future__ import annotations

import time

import pytest

from agentworker.fleet.app import create_app
from agentworker.settings import Settings
from tests.support.servers import Fleet

pytestmark = pytest.mark.chaos

TASKS = 200
CAP = 10.0


def test_a_solo_worker_on_amqp_stalls_where_prefork_does_not(
    rabbit_fleet: Fleet, rabbit_env: dict[str, str]
) -> None:
    app = create_app(Settings())
    queue = rabbit_env["AGENTWORKER_STEP_QUEUE"]

    def seconds_for(n: int) -> float:
        """Send ``n`` no-op tasks; seconds until the queue is empty (at most ``CAP``)."""
        started = time.monotonic()
        for _ in range(n):
            app.send_task("agentworker.ping", queue=queue)
        with app.connection_for_write() as conn:
            channel = conn.channel()
            while channel.queue_declare(queue, passive=True).message_count:
                if time.monotonic() - started > CAP:
                    channel.queue_purge(queue)
                    break
                time.sleep(0.02)
        return time.monotonic() - started

    rabbit_fleet.start_worker("prefork1", pool="prefork")
    rabbit_fleet.wait_ready()
    prefork = max(seconds_for(TASKS) for _ in range(3))
    rabbit_fleet.stop()
    solo: list[float] = []
    for i in range(3):
        rabbit_fleet.start_worker(f"solo{i}", pool="solo")
        rabbit_fleet.wait_ready()
        solo.append(seconds_for(TASKS))
        rabbit_fleet.stop()
        if solo[-1] > 2.0:
            break
    print(f"{TASKS} no-op tasks on RabbitMQ: prefork {prefork:.2f} s (worst of 3), solo {solo}")
    assert prefork < 2.0
    assert max(solo) > 2.0 and max(solo) > 3 * prefork
