"""RabbitMQ for the fleet suites: the host's broker or a private node, a vhost per test.

The broker: the one at ``AGENTWORKER_TEST_AMQP_URL`` (default: guest on 127.0.0.1:5672),
else a private node started for the session when rabbitmq-server is installed, else the
tests skip, saying so. On the local node each test gets a vhost of its own
(``rabbitmqctl``); elsewhere, queues named for the test; both are removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from kombu import Connection

from tests.support.servers import RABBITMQ, Fleet, RabbitMQServer, RedisServer

AMQP_URL = os.environ.get("AGENTWORKER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def _reachable(url: str) -> bool:
    try:
        with Connection(url, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=0, timeout=2)
        return True
    except Exception:  # noqa: BLE001 - any failure means: no broker to test against
        return False


@pytest.fixture(scope="session")
def amqp_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, bool]]:
    """``(URL without the vhost, whether rabbitmqctl manages that node)``."""
    if _reachable(AMQP_URL + "%2F"):
        yield AMQP_URL, "AGENTWORKER_TEST_AMQP_URL" not in os.environ
        return
    if not Path(RABBITMQ).exists():
        pytest.skip(
            f"RabbitMQ is not reachable at {AMQP_URL} (set AGENTWORKER_TEST_AMQP_URL) and "
            "rabbitmq-server is not installed to start a private node"
        )
    node = RabbitMQServer(tmp_path_factory.mktemp("rabbitmq")).start()
    try:
        yield node.url[: -len("/")], False
    finally:
        node.stop()


def _rabbitmqctl(*args: str) -> bool:
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        return False
    done = subprocess.run([ctl, *args], capture_output=True, timeout=60, check=False)
    return done.returncode == 0


@pytest.fixture()
def broker_url(amqp_base: tuple[str, bool]) -> Iterator[str]:
    """A vhost of this test's own on the local node, else the default vhost."""
    base, managed = amqp_base
    vhost = "agentworker-e2e-" + uuid.uuid4().hex[:8]
    if managed and _rabbitmqctl("add_vhost", vhost):
        _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        try:
            yield base + quote(vhost, safe="")
        finally:
            _rabbitmqctl("delete_vhost", vhost)
    else:
        yield base + "%2F"


@pytest.fixture()
def rabbit_env(
    broker_url: str, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """Workers' and producer's settings: RabbitMQ broker, queues named for this test."""
    tag = uuid.uuid4().hex[:8]
    env = {
        "AGENTWORKER_REDIS_URL": redis_server.url,
        "AGENTWORKER_BROKER_URL": broker_url,
        "AGENTWORKER_NAMESPACE": "e2e-rmq-" + tag,
        "AGENTWORKER_AGENT_LOADER": "tests.support.fleet_agents:loader",
        "AGENTWORKER_LEASE_SECONDS": "2",
        "AGENTWORKER_SWEEP_INTERVAL": "0.5",
        "AGENTWORKER_LOST_WAKEUP_SECONDS": "2",
        "AGENTWORKER_STEP_TIME_LIMIT": "30",
        "AGENTWORKER_STEP_QUEUE": f"agentworker.steps.{tag}",
        "AGENTWORKER_SWEEP_QUEUE": f"agentworker.sweep.{tag}",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield env
    with Connection(broker_url, connect_timeout=5) as conn:  # the default vhost's case
        channel = conn.channel()
        for name in (env["AGENTWORKER_STEP_QUEUE"], env["AGENTWORKER_SWEEP_QUEUE"]):
            channel.queue_delete(name)
            channel.exchange_delete(name)


@pytest.fixture()
def rabbit_fleet(
    rabbit_env: dict[str, str], tmp_path: Path, redis_server: RedisServer
) -> Iterator[Fleet]:
    redis_server.client().flushall()
    fleet = Fleet(rabbit_env, tmp_path / "logs")
    try:
        yield fleet
    finally:
        fleet.stop()
