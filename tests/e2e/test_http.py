"""The HTTP API on a real uvicorn server, with real Celery workers and a private Redis."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agentworker.http import create_http_app, sign, signed_headers, target_of
from agentworker.notify.streams import read_events
from agentworker.settings import Settings
from agentworker.wiring import create_app, make_runner
from stores import RedisAgentTurnStore
from tests.support.servers import ROOT, Fleet, RedisServer, free_port

pytestmark = pytest.mark.e2e

SECRET = "e2e-webhook-secret"
ACME_SECRET = "whsec_ZTJlLWFjbWUtc2lnbmluZy1rZXktMDEyMzQ1Njc4OQ=="
BEARER = {"Authorization": "Bearer tok"}
ACME = {"Authorization": "Bearer tok-acme"}
GLOBEX = {"Authorization": "Bearer tok-globex"}
CREDENTIALS = json.dumps(
    [
        {"token": "tok", "tenant": "*", "scopes": ["read", "write", "approve"]},
        {"token": "tok-acme", "tenant": "acme", "scopes": ["read", "write", "approve"]},
        {"token": "tok-globex", "tenant": "globex", "scopes": ["read", "write", "approve"]},
        {"secret": ACME_SECRET, "tenant": "acme", "scopes": ["write", "approve"]},
    ]
)


@pytest.fixture(scope="module")
def env(redis_server: RedisServer) -> dict[str, str]:
    return {
        "AGENTWORKER_REDIS_URL": redis_server.url,
        "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{redis_server.port}/2",
        "AGENTWORKER_NAMESPACE": "http-" + uuid.uuid4().hex[:8],
        "AGENTWORKER_AGENT_LOADER": "tests.support.fleet_agents:loader",
        "AGENTWORKER_LEASE_SECONDS": "2",
        "AGENTWORKER_STEP_TIME_LIMIT": "30",
        "AGENTWORKER_VISIBILITY_TIMEOUT": "60",
    }


@pytest.fixture(scope="module")
def settings(env: dict[str, str]) -> Settings:
    values = {k.removeprefix("AGENTWORKER_").lower(): v for k, v in env.items()}
    return Settings(**values, webhook_secret=SECRET, credentials=CREDENTIALS)


@pytest.fixture(scope="module")
def fleet(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(env, tmp_path_factory.mktemp("http-logs"))
    f.start_worker("h1")
    f.start_worker("h2")
    try:
        f.wait_ready()
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="module")
def base_url(settings: Settings, fleet: Fleet) -> Iterator[str]:
    app = create_http_app(make_runner(settings, create_app(settings)), settings)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def store(settings: Settings) -> RedisAgentTurnStore:
    return RedisAgentTurnStore(settings.redis_url, namespace=settings.namespace)


@pytest.fixture
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=10) as client:
        yield client


def signed_body(path: str, payload: Any) -> bytes:
    return json.dumps({**payload, "target": target_of("POST", path)}).encode()


def signed_post(
    http: httpx.Client,
    path: str,
    payload: Any,
    request_id: str | None = None,
    secret: str = SECRET,
    **headers: str,
) -> httpx.Response:
    body = signed_body(path, payload)
    auth = signed_headers(secret, body, request_id or uuid.uuid4().hex)
    return http.post(path, content=body, headers={**auth, **headers})


def start(http: httpx.Client, secret: str = SECRET) -> str:
    payload = {"agent": "e2e-approval", "input": f"pay {uuid.uuid4().hex[:6]}"}
    answer = signed_post(http, "/turns", payload, secret=secret)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def wait_for(
    http: httpx.Client, turn_id: str, status: str, headers: dict[str, str] = BEARER
) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        turn: dict[str, Any] = http.get(f"/turns/{turn_id}", headers=headers).json()
        if turn["status"] == status:
            return turn
        time.sleep(0.05)
    raise AssertionError(f"turn {turn_id} never reached {status}: {turn}")


def approve(turn: dict[str, Any]) -> dict[str, Any]:
    return {"command": "approve_tool", "call_id": turn["suspension"]["correlation_id"]}


def test_an_approval_flow_driven_only_over_http(http: httpx.Client) -> None:
    # Given a turn started over HTTP that the workers ran into its approval
    turn_id = start(http)
    waiting = wait_for(http, turn_id, "WAITING_FOR_APPROVAL")
    assert waiting["suspension"]["metadata"]["tool"] == "pay"
    # When the reviewer's signed callback approves it
    answer = signed_post(http, f"/turns/{turn_id}/resume", approve(waiting))
    assert answer.status_code == 200, answer.text
    # Then the workers finish the turn
    done = wait_for(http, turn_id, "COMPLETED")
    assert done["final_output"] == "done: paid 5.0"
    assert done["counters"]["tool_calls"] == 1


def test_refused_calls_change_nothing(http: httpx.Client, store: RedisAgentTurnStore) -> None:
    # Given acme's turn, started by acme's signed call, waiting for approval
    turn_id = start(http, ACME_SECRET)
    waiting = wait_for(http, turn_id, "WAITING_FOR_APPROVAL", ACME)
    assert waiting["metadata"]["tenant_id"] == "acme"
    before = store.load(turn_id)
    path = f"/turns/{turn_id}/resume"
    body = signed_body(path, approve(waiting))
    now = int(time.time())

    def post(request_id: str, signature: str, ts: int = now, to: str = path, **more: str) -> int:
        auth = {"webhook-timestamp": str(ts), "webhook-signature": signature}
        headers = {**auth, "webhook-id": request_id, **more}
        answer = http.post(to, content=body, headers=headers)
        assert answer.status_code < 500, answer.text
        return answer.status_code

    # When callers send bad signatures or a stale timestamp
    assert post("r-bad", sign(b"not-the-secret", "r-bad", now, body)) == 401
    assert post("r-zero", "v1," + "A" * 44) == 401
    stale = signed_headers(ACME_SECRET, body, "r-stale", now - 301)["webhook-signature"]
    assert post("r-stale", stale, now - 301) == 401
    # or move a good signature to another turn or endpoint
    moved = signed_headers(ACME_SECRET, body, "r-moved", now)["webhook-signature"]
    assert post("r-moved", moved, to=f"/turns/{turn_id}/cancel") == 401
    other = start(http, ACME_SECRET)
    assert post("r-moved", moved, to=f"/turns/{other}/resume") == 401
    # or come from another tenant, whatever header they send
    globex = {**GLOBEX, "X-Tenant-Id": "acme"}
    assert http.post(f"/turns/{turn_id}/cancel", headers=globex).status_code == 404
    assert http.get(f"/turns/{turn_id}", headers=globex).status_code == 404
    assert http.get(f"/turns/{turn_id}", headers={"X-Tenant-Id": "acme"}).status_code == 401
    # and reuse a request id, spent on a resume that did not fit, for another body
    wrong = signed_post(
        http, path, {"command": "approve_tool", "call_id": "c9"}, "r-used", ACME_SECRET
    )
    assert wrong.status_code == 409 and "is not the one waiting" in wrong.text
    used = signed_headers(ACME_SECRET, body, "r-used", now)["webhook-signature"]
    assert post("r-used", used) == 409
    # Then nothing changed
    after = store.load(turn_id)
    assert (after.version, after.status, after.cancel_requested, after.resume_log) == (
        before.version,
        before.status,
        False,
        [],
    )
    # And a good call works, while its captured signature under a fresh id does not
    good = signed_headers(ACME_SECRET, body, "r-good", now)["webhook-signature"]
    assert post("r-good", good) == 200
    assert post("r-replay", good) == 401
    log = store.load(turn_id).resume_log
    assert [entry["metadata"]["request_id"] for entry in log] == ["r-good"]
    wait_for(http, turn_id, "COMPLETED", ACME)


def test_the_same_signed_callback_twice_is_one_resume(
    http: httpx.Client, store: RedisAgentTurnStore
) -> None:
    turn_id = start(http)
    waiting = wait_for(http, turn_id, "WAITING_FOR_APPROVAL")
    body = signed_body(f"/turns/{turn_id}/resume", approve(waiting))
    headers = signed_headers(SECRET, body, "callback-1")

    first = http.post(f"/turns/{turn_id}/resume", content=body, headers=headers)
    second = http.post(f"/turns/{turn_id}/resume", content=body, headers=headers)

    assert first.status_code == second.status_code == 200
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    wait_for(http, turn_id, "COMPLETED")
    assert len(store.load(turn_id).resume_log) == 1


def read_sse(
    http: httpx.Client, turn_id: str, last_id: str | None, stop_after: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """Read SSE messages until ``stop_after`` (then drop the connection) or the end."""
    headers = {"Last-Event-ID": last_id} if last_id else {}
    got: list[tuple[str, dict[str, Any]]] = []
    with http.stream("GET", f"/turns/{turn_id}/events", headers={**BEARER, **headers}) as response:
        assert response.status_code == 200
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line and not line.startswith(":"):
                key, _, value = line.partition(": ")
                fields[key] = value
                continue
            if "id" in fields:
                got.append((fields["id"], json.loads(fields["data"])))
                if got[-1][1]["type"] == stop_after:
                    return got  # leaving the block disconnects mid-stream
            fields = {}
    return got


def test_the_event_stream_resumes_after_a_disconnect_without_gaps(
    http: httpx.Client, settings: Settings, redis_server: RedisServer
) -> None:
    turn_id = start(http)
    # Given a follower that read until the approval request, then lost its connection
    first = read_sse(http, turn_id, None, stop_after="TURN_SUSPENDED")
    waiting = wait_for(http, turn_id, "WAITING_FOR_APPROVAL")
    signed_post(http, f"/turns/{turn_id}/resume", approve(waiting))
    # When it reconnects with the last id it saw
    rest = read_sse(http, turn_id, first[-1][0], stop_after=None)
    # Then it has every event of the stream exactly once, ending with the root's end
    full = read_events(redis_server.client(), settings.namespace, turn_id, count=10_000)
    assert first + rest == full
    assert rest[-1][1]["type"] == "TURN_COMPLETED"
    ids = [sid for sid, _ in first + rest]
    assert len(set(ids)) == len(ids)
    committed = [e for _, e in first + rest if not e["provisional"]]
    sequences = [(e["turn_id"], e["sequence"]) for e in committed]
    assert len(set(sequences)) == len(sequences)  # provisional ones repeat the last
    assert {e["data"]["status"] for _, e in rest} >= {"RUNNING", "COMPLETED"}
    # and each call's start is in the stream before its end (the workers' provisional
    # events ride in their commits, ahead of the script)
    started = {"MODEL": 0, "TOOL": 0}
    ended = {"MODEL": 0, "TOOL": 0}
    for _, e in full:
        kind, _, what = e["type"].partition("_")
        if kind in started and what == "STARTED":
            started[kind] += 1
        elif kind in ended and what in ("COMPLETED", "FAILED"):
            ended[kind] += 1
            assert ended[kind] <= started[kind], [x["type"] for _, x in full]
    assert ended["MODEL"] >= 2 and ended["TOOL"] >= 1
    # and a reconnect after the end is told there is nothing more
    answer = http.get(f"/turns/{turn_id}/events", headers={**BEARER, "Last-Event-ID": rest[-1][0]})
    assert answer.status_code == 204


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def anonymous_post(port: int, announced: int, send: int) -> tuple[bytes, float]:
    """Announce ``announced`` bytes, send up to ``send`` of them; (answer, seconds to it)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = f"POST /turns HTTP/1.1\r\nHost: x\r\nContent-Length: {announced}\r\n\r\n"
        sock.sendall(head.encode())
        chunk, sent = b"x" * (1 << 20), 0
        try:
            while sent < send:
                sock.sendall(chunk[: min(len(chunk), send - sent)])
                sent += len(chunk)
        except OSError:
            pass  # the server answered and closed while we were still sending: good
        answer = sock.recv(65536)
        return answer, time.monotonic() - t0


def test_uvicorn_serves_the_module_level_app_from_the_environment(
    env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "uvicorn.log"
    command = [sys.executable, "-m", "uvicorn", "agentworker.http:app", "--port", str(port)]
    full_env = {**os.environ, **env, "AGENTWORKER_API_TOKEN": "tok", "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=full_env, cwd=ROOT, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/turns/nope", headers=BEARER)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise AssertionError(log.read_text())
        assert answer.status_code == 404, answer.text
        assert httpx.get(f"http://127.0.0.1:{port}/turns/nope").status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200

        # An anonymous 100 MB POST is answered 401 without being read into memory
        before = rss_mib(proc.pid)
        answer_100, seconds_100 = anonymous_post(port, 100 << 20, 100 << 20)
        after = rss_mib(proc.pid)
        # and one that announces 100 MB and sends 1 KB is answered at once, not held open
        answer_1k, seconds_1k = anonymous_post(port, 100 << 20, 1024)
        print(
            f"RSS {before:.0f} -> {after:.0f} MiB around an anonymous 100 MB POST "
            f"({seconds_100:.2f} s to its 401); announce 100 MB, send 1 KB: {seconds_1k:.2f} s"
        )
        assert answer_100.startswith(b"HTTP/1.1 401") and answer_1k.startswith(b"HTTP/1.1 401")
        assert after - before < 20
        assert seconds_1k < 2
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_typed_client_drives_a_turn_through_approval(base_url: str) -> None:
    from agentworker.client import AgentworkerClient, HttpApiError

    acme = AgentworkerClient(base_url, token="tok-acme")
    signer = AgentworkerClient(base_url, secret=ACME_SECRET)
    turn_id = "client-" + uuid.uuid4().hex[:12]
    # Given a start sent twice with the same turn id (a retry after a lost answer)
    first = signer.start("e2e-approval", "pay 5", turn_id=turn_id)
    again = acme.start("e2e-approval", "pay 5", turn_id=turn_id)
    assert first.id == again.id == turn_id and first.metadata["tenant_id"] == "acme"
    # When the workers run it into its approval, and the client approves
    waiting = acme.wait(turn_id, timeout=20)
    assert waiting.status == "WAITING_FOR_APPROVAL" and waiting.suspension is not None
    signer.approve(turn_id, waiting.suspension["correlation_id"], reason="ok")
    # Then it ends, and the listing has it once
    done = acme.wait(turn_id, until="ended", timeout=20)
    assert done.status == "COMPLETED" and done.final_output == "done: paid 5.0"
    assert [t.id for t in acme.iter_turns(tree=turn_id)] == [turn_id]
    # And another tenant's client is told the turn does not exist
    with pytest.raises(HttpApiError) as missing:
        AgentworkerClient(base_url, token="tok-globex").get(turn_id)
    assert (missing.value.status, missing.value.type) == (404, "TurnNotFoundError")
