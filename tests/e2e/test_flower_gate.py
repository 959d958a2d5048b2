"""Flower behind the gate, the way docker-compose.yml runs it: nothing answers anonymously.

Flower itself serves ``/metrics`` and ``/healthcheck`` to anyone; the compose deployment
publishes only the gate (``python -m agentworker.http.flower_gate``), which asks for the
basic-auth password on every path before forwarding to Flower on loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ROOT, free_port, stop_process

pytestmark = pytest.mark.e2e

AUTH = ("ops", "gate-secret")


@pytest.fixture
def gate(fleet_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    port, upstream = free_port(), free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    env = {
        **clean,
        **fleet_env,
        "PYTHONPATH": str(ROOT),
        "FLOWER_BASIC_AUTH": ":".join(AUTH),
        "FLOWER_GATE_PORT": str(port),
        "FLOWER_GATE_UPSTREAM_PORT": str(upstream),
    }
    log = tmp_path / "gate.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentworker.http.flower_gate", "--persistent=False"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthcheck", auth=AUTH, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)


def test_flower_metrics_and_healthcheck_are_not_anonymous_behind_the_gate(gate: str) -> None:
    for path in ("/metrics", "/healthcheck", "/", "/api/workers", "/workers"):
        anonymous = httpx.get(gate + path, timeout=5)
        assert anonymous.status_code == 401, path
        assert anonymous.headers["WWW-Authenticate"].startswith("Basic")
        wrong = httpx.get(gate + path, auth=("ops", "guess"), timeout=5)
        assert wrong.status_code == 401, path
    metrics = httpx.get(gate + "/metrics", auth=AUTH, timeout=5)
    assert metrics.status_code == 200 and "flower_" in metrics.text
    assert httpx.get(gate + "/api/workers", auth=AUTH, timeout=5).status_code == 200
