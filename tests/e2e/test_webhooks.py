"""Outbound webhooks with real workers and beat: retries, one id per event, a worker restart.

A local receiver refuses the first deliveries (500), then accepts; the worker that made the
first attempts is killed in between and another one takes over. Every notification still
arrives, exactly one logical notification per event (repeats carry the same id and body),
each verified by the Standard Webhooks reference library.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from agentworker.notify import webhooks
from agentworker.settings import Settings
from agentworker.wiring import create_app, make_runner
from runner_core import AgentResumeCommand
from tests.support.servers import Fleet, RedisServer

pytestmark = pytest.mark.e2e

SECRET = "whsec_" + base64.b64encode(b"e2e-receiver-key-0123456789abcd").decode()


class Receiver:
    """Answers 500 while ``failing`` is true, then 204; keeps every request."""

    def __init__(self) -> None:
        self.failing = True
        self.got: list[tuple[dict[str, str], bytes, int]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["content-length"]))
                status = 500 if outer.failing else 204
                with outer.lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    outer.got.append((headers, body, status))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def by_id(self) -> dict[str, list[tuple[dict[str, str], bytes, int]]]:
        with self.lock:
            out: dict[str, list[tuple[dict[str, str], bytes, int]]] = {}
            for item in self.got:
                out.setdefault(item[0]["webhook-id"], []).append(item)
            return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture
def env(fleet_env: dict[str, str], receiver: Receiver) -> dict[str, str]:
    subscription = [{"name": "reviewers", "url": receiver.url, "secret": SECRET}]
    return {
        **fleet_env,
        "AGENTWORKER_WEBHOOKS": json.dumps(subscription),
        "AGENTWORKER_WEBHOOK_RETRY_INITIAL_SECONDS": "0.3",
        "AGENTWORKER_WEBHOOK_RETRY_MAX_SECONDS": "1",
        "AGENTWORKER_WEBHOOK_MAX_ATTEMPTS": "30",
        "AGENTWORKER_WEBHOOK_TIMEOUT_SECONDS": "2",
    }


@pytest.fixture
def fleet(env: dict[str, str], tmp_path: Path, redis_server: RedisServer) -> Iterator[Fleet]:
    f = Fleet(env, tmp_path / "logs")
    try:
        yield f
    finally:
        f.stop()


def eventually(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(what)


@pytest.mark.timeout(240)  # room for a held hint (below)
def test_notifications_survive_failures_and_a_worker_restart_with_one_id_each(
    fleet: Fleet, env: dict[str, str], receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    fleet.start_worker("w1")
    fleet.start_beat()
    fleet.wait_ready()
    runner = make_runner(settings, create_app(settings))

    # Given a turn that the workers run into its approval, while the receiver refuses
    turn_id = runner.start("e2e-approval", "pay 5").id
    eventually(lambda: len(receiver.got) >= 2, "the first deliveries never came")

    # When the worker that tried is killed, and another one starts
    fleet.kill_worker("w1")
    fleet.start_worker("w2")
    fleet.wait_ready()
    receiver.failing = False

    # Then the approval notification arrives
    def delivered(kind: str) -> list[bytes]:
        return [
            body
            for items in receiver.by_id().values()
            for _, body, status in items
            if status == 204 and json.loads(body)["type"] == kind
        ]

    # (a hint w1 had reserved when it was killed waits out its hold, HOLD_SECONDS,
    # before the sweep sends another: the notification is late, never lost)
    eventually(
        lambda: delivered("turn.waiting_for_approval"),
        "approval never delivered",
        timeout=webhooks.HOLD_SECONDS + 30,
    )

    # And after the approval, the end is notified too (first try this time)
    call_id = runner.store.load(turn_id).suspension.correlation_id  # type: ignore[union-attr]
    runner.submit_resume(turn_id, AgentResumeCommand.approve_tool(call_id or ""))
    eventually(lambda: delivered("turn.ended"), "end never delivered")

    by_id = receiver.by_id()
    kinds = sorted(json.loads(items[0][1])["type"] for items in by_id.values())
    assert kinds == ["turn.ended", "turn.waiting_for_approval"]  # one id per event
    for msg_id, items in by_id.items():
        assert len({body for _, body, _ in items}) == 1, msg_id  # repeats: the same body
        assert [status for _, _, status in items][-1] == 204
        assert sum(1 for _, _, status in items if status == 204) == 1
        for headers, body, _ in items:
            assert Webhook(SECRET).verify(body, headers)["data"]["turn_id"] == turn_id
    approval = next(i for i in by_id.values() if b"waiting_for_approval" in i[0][1])
    assert len(approval) >= 3  # refused at least twice, then accepted

    log = webhooks.outbox_of(settings).log_of(turn_id)
    assert [(e["type"], e["state"]) for e in log] == [
        ("turn.waiting_for_approval", "delivered"),
        ("turn.ended", "delivered"),
    ]
    print(f"approval notification: {len(approval)} attempts across a worker restart")
