"""Flower on a real worker fleet: basic auth guards its API, and operators can find a turn.

Flower is started the way deploy/README.md and docker-compose.yml start it
(``celery -A agentworker flower --basic-auth=user:password``), against a private
redis-server, with one real worker stepping real turns.
"""

from __future__ import annotations

import html
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from agentworker.settings import Settings
from agentworker.wiring import create_app, make_runner
from runner_core import AgentTurnStatus
from tests.support.servers import CELERY, ROOT, Fleet, free_port, stop_process

pytestmark = pytest.mark.e2e

USER, PASSWORD = "ops", "secret"
AUTH = (USER, PASSWORD)
T = TypeVar("T")


class FlowerProcess:
    """``celery -A agentworker flower`` on a free loopback port, with basic auth."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.log = log
        # Flower reads every FLOWER_* variable as an option: none may leak in from the
        # caller (FLOWER_UNAUTHENTICATED_API, FLOWER_BASIC_AUTH, ...).
        clean = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
        self.env = {**clean, **env, "PYTHONPATH": str(ROOT)}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FlowerProcess:
        args = [
            CELERY,
            "-A",
            "agentworker",
            "flower",
            f"--port={self.port}",
            "--address=127.0.0.1",
            f"--basic-auth={USER}:{PASSWORD}",
            # Flower's state in memory only: no flower.db in the project root.
            "--persistent=False",
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                args, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None:
            stop_process(proc)

    def alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"flower exited ({self.process.returncode}):\n{self.logs()}")

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture()
def flower(fleet: Fleet, fleet_env: dict[str, str]) -> Iterator[FlowerProcess]:
    proc = FlowerProcess(fleet_env, fleet.logs / "flower.log").start()
    try:
        yield proc
    finally:
        proc.stop()


def eventually(
    check: Callable[[], T | None], what: str, flower: FlowerProcess, timeout: float = 10.0
) -> T:
    """Poll ``check`` until it returns something truthy, or fail with Flower's log."""
    deadline = time.monotonic() + timeout
    while True:
        flower.alive()
        try:
            result = check()
        except httpx.TransportError:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} after {timeout}s; flower log:\n{flower.logs()}")
        time.sleep(0.1)


def shows(args: object, turn_id: str) -> bool:
    """A step task's arguments name this turn (and its agent, when the sender knew it)."""
    return args == f"(turn_id={turn_id!r})" or (
        isinstance(args, str) and args.startswith(f"(turn_id={turn_id!r}, agent=")
    )


def step_tasks(client: httpx.Client) -> dict[str, dict[str, Any]]:
    """Flower's ``agentworker.step_turn`` tasks, by task id."""
    response = client.get("/api/tasks", params={"taskname": "agentworker.step_turn"}, auth=AUTH)
    assert response.status_code == 200, response.text
    tasks: dict[str, dict[str, Any]] = response.json()
    return tasks


def test_flower_shows_the_worker_and_each_turns_steps_behind_basic_auth(
    fleet: Fleet, flower: FlowerProcess, producer_env: dict[str, str]
) -> None:
    # Given one worker and Flower (with basic auth) on the same broker
    fleet.start_worker("fw1")
    fleet.wait_ready()
    worker = f"fw1@{socket.gethostname()}"  # -n fw1@%h
    with httpx.Client(base_url=flower.url, timeout=5) as client:
        # Flower's event receiver is live once the worker's heartbeats reach its state
        # (events are a broadcast: anything sent before it listens is never seen).
        eventually(
            lambda: _alive(client, worker), "flower never saw the worker's heartbeat", flower
        )
        # When two turns run to completion
        settings = Settings()
        runner = make_runner(settings, create_app(settings))
        turns = [runner.start("e2e-tools", f"flower {i}").id for i in range(2)]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = [runner.store.load(t).status for t in turns]
            if all(s.is_terminal for s in states):
                break
            time.sleep(0.05)
        assert states == [AgentTurnStatus.COMPLETED] * 2, states

        # Then the API refuses anyone without the right credentials
        for path in ("/api/workers", "/api/tasks"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, auth=(USER, "wrong")).status_code == 401, path
            assert client.get(path, auth=("intruder", PASSWORD)).status_code == 401, path
            assert client.get(path, headers={"Authorization": "Bearer secret"}).status_code == 401

        # And with them it lists the worker (inspected on demand) ...
        # (an inspect already in flight is joined, not restarted: poll until it has all)
        def inspected() -> dict[str, Any] | None:
            response = client.get("/api/workers", params={"refresh": "1"}, auth=AUTH)
            assert response.status_code == 200, response.text
            info: dict[str, Any] = response.json().get(worker, {})
            return info if {"stats", "active_queues", "registered"} <= info.keys() else None

        info = eventually(inspected, "flower never listed the worker", flower)
        assert info["stats"]["pool"]["implementation"].endswith("solo:TaskPool")
        queues = {q["name"] for q in info.get("active_queues", [])}
        assert {"agentworker.steps", "agentworker.sweep"} <= queues, info.keys()
        assert "agentworker.step_turn" in info.get("registered", []), info.get("registered")

        # ... and every step of both turns, each showing which turn it stepped
        def all_steps_succeeded() -> dict[str, list[dict[str, Any]]] | None:
            by_turn: dict[str, list[dict[str, Any]]] = {t: [] for t in turns}
            for task in step_tasks(client).values():
                for turn_id in turns:
                    if shows(task.get("args"), turn_id):
                        by_turn[turn_id].append(task)
            done = all(
                steps and all(s["state"] == "SUCCESS" for s in steps) for steps in by_turn.values()
            )
            return by_turn if done else None

        by_turn = eventually(all_steps_succeeded, "flower never showed both turns' steps", flower)
        for turn_id, steps in by_turn.items():
            assert all(s["name"] == "agentworker.step_turn" for s in steps)
            assert all(s["worker"] == worker for s in steps), steps
            # A search by turn id finds that turn's steps and no other (how an operator looks).
            found = client.get(
                "/api/tasks",
                params={"search": turn_id, "taskname": "agentworker.step_turn"},
                auth=AUTH,
            )
            assert found.status_code == 200, found.text
            assert all(shows(t["args"], turn_id) for t in found.json().values())
            assert {s["uuid"] for s in steps} <= {t["uuid"] for t in found.json().values()}
            # The task page a person opens shows the turn id and its agent as the arguments.
            page = client.get(f"/task/{steps[0]['uuid']}", auth=AUTH)
            assert page.status_code == 200
            assert f"(turn_id={turn_id!r}, agent=" in html.unescape(page.text)

        # And the dashboard a person sees lists the worker, behind the browser's login prompt
        assert client.get("/workers").headers.get("WWW-Authenticate", "").startswith("Basic ")
        assert client.get("/workers", auth=(USER, "wrong")).status_code == 401
        dashboard = client.get("/workers", auth=AUTH)
        assert dashboard.status_code == 200
        assert f"<td>{html.escape(worker)}</td>" in dashboard.text


def _alive(client: httpx.Client, worker: str) -> bool:
    response = client.get("/api/workers", params={"status": "1"}, auth=AUTH)
    return response.status_code == 200 and response.json().get(worker) is True
