"""The HTTP app over an in-memory runner that runs turns inline (no workers)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentworker.http import TENANT_HEADER, create_http_app, signed_headers, target_of
from agentworker.http.errors import status_of
from agentworker.notify.streams import RedisEventBridge, read_events
from agentworker.settings import Settings
from runner_core import (
    AgentConversationBusyException,
    AgentNotFoundError,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnStatus,
    ConcurrentModificationError,
    ConfigurationError,
    InMemoryAgentLoader,
    InvalidResumeError,
    LeaseLostError,
    SnapshotCorruptedError,
    TurnNotFoundError,
)
from tests.support.agents import approval_agent
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

SECRET = "unit-secret"
TOKEN = "unit-token"


@pytest.fixture
def settings(server: RedisServer) -> Settings:
    return Settings(
        redis_url=server.url,
        namespace="http-" + uuid.uuid4().hex[:8],
        webhook_secret=SECRET,
        api_token=TOKEN,
    )


@pytest.fixture
def runner(server: RedisServer, settings: Settings) -> AgentRunner:
    runner = AgentRunner(agent_loader=InMemoryAgentLoader([approval_agent()]))
    runner.dispatcher = lambda turn_id: _run_inline(runner, turn_id)
    runner.add_event_listener(RedisEventBridge(server.client(), settings.namespace, committed=True))
    return runner


def _run_inline(runner: AgentRunner, turn_id: str) -> None:
    runner.run_until_blocked(runner.restore(turn_id))


@pytest.fixture
def http(runner: AgentRunner, settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_http_app(runner, settings)) as client:
        yield client


class Api:
    """Signed calls, the way a webhook sender makes them."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def post(self, path: str, payload: Any, request_id: str | None = None, **headers: str) -> Any:
        body = signed_body("POST", path, payload)
        signed = signed_headers(SECRET, body, request_id or uuid.uuid4().hex)
        return self.client.post(path, content=body, headers={**signed, **headers})

    def get(self, path: str, **headers: str) -> Any:
        return self.client.get(path, headers={"Authorization": f"Bearer {TOKEN}", **headers})


def signed_body(method: str, path: str, payload: Any) -> bytes:
    """A signed body names what it does: its method and path (docs/http.md)."""
    return json.dumps({**payload, "target": target_of(method, path)}).encode()


@pytest.fixture
def api(http: TestClient) -> Api:
    return Api(http)


def start(api: Api, **headers: str) -> str:
    response = api.post("/turns", {"agent": "pay-agent", "input": "pay 5"}, **headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_an_approval_flow_over_http(api: Api) -> None:
    turn_id = start(api)
    waiting = api.get(f"/turns/{turn_id}").json()
    assert waiting["status"] == "WAITING_FOR_APPROVAL"
    assert waiting["suspension"]["correlation_id"] == "c1"
    assert waiting["suspension"]["metadata"] == {
        "tool": "pay",
        "arguments": {"amount": 5},
        "calls": [{"call_id": "c1", "tool": "pay", "arguments": {"amount": 5}}],
    }

    answer = api.post(f"/turns/{turn_id}/resume", {"command": "approve_tool", "call_id": "c1"})

    assert answer.status_code == 200, answer.text
    done = api.get(f"/turns/{turn_id}").json()
    assert done["status"] == "COMPLETED" and done["final_output"] == "done: paid 5.0"
    assert done["counters"]["tool_calls"] == 1


def test_the_same_resume_twice_is_one_resume(api: Api, runner: AgentRunner) -> None:
    turn_id = start(api)
    payload = {"command": "approve_tool", "call_id": "c1", "metadata": {"approver": "u-7"}}

    first = api.post(f"/turns/{turn_id}/resume", payload, request_id="cb-1")
    second = api.post(f"/turns/{turn_id}/resume", payload, request_id="cb-1")

    assert first.status_code == second.status_code == 200
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    log = runner.store.load(turn_id).resume_log
    assert [entry["metadata"] for entry in log] == [
        {"credential": "webhook_secret", "request_id": "cb-1", "approver": "u-7"}
    ]


def test_a_resigned_retry_gets_the_first_answer_and_another_body_is_refused(
    api: Api, runner: AgentRunner
) -> None:
    turn_id = start(api)
    path = f"/turns/{turn_id}/resume"
    body = signed_body("POST", path, {"command": "approve_tool", "call_id": "c1"})
    now = int(time.time())
    first = api.client.post(path, content=body, headers=signed_headers(SECRET, body, "cb", now - 9))
    retry = api.client.post(path, content=body, headers=signed_headers(SECRET, body, "cb", now))
    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json() and "Idempotent-Replayed" in retry.headers
    other = api.post(path, {"command": "continue_turn"}, request_id="cb")
    assert other.status_code == 409 and "already used" in other.json()["error"]["message"]
    assert len(runner.store.load(turn_id).resume_log) == 1


def test_a_resume_that_does_not_fit_is_409_and_changes_nothing(
    api: Api, runner: AgentRunner
) -> None:
    turn_id = start(api)
    before = runner.store.load(turn_id)
    answer = api.post(f"/turns/{turn_id}/resume", {"command": "approve_tool", "call_id": "c9"})
    assert answer.status_code == 409
    assert answer.json()["error"]["type"] == "InvalidResumeError"
    assert "'c9' is not the one waiting" in answer.json()["error"]["message"]
    assert runner.store.load(turn_id).version == before.version


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"input": "x"}, "agent"),
        ({"agent": "pay-agent", "input": 5}, "input"),
        ({"agent": "pay-agent", "input": "x", "colour": "red"}, "colour"),
        ({"agent": "nobody", "input": "x"}, "agent"),
    ],
)
def test_bad_start_bodies_are_422_naming_the_field(api: Api, payload: Any, field: str) -> None:
    answer = api.post("/turns", payload)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"command": "approve_tool"}, "call_id"),
        ({"command": "explode"}, "command"),
        ({"command": "user_input"}, "data"),
        ({"command": "continue_turn", "metadata": []}, "metadata"),
    ],
)
def test_bad_resume_bodies_are_422_naming_the_field(api: Api, payload: Any, field: str) -> None:
    turn_id = start(api)
    answer = api.post(f"/turns/{turn_id}/resume", payload)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field


def test_a_body_that_is_not_json_is_422(api: Api) -> None:
    body = b"{nope"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert api.client.post("/turns", content=body, headers=bearer).status_code == 422
    # Signed, it cannot name its target, so the signature does not cover what it does.
    headers = signed_headers(SECRET, body, "r-json")
    assert api.client.post("/turns", content=body, headers=headers).status_code == 401


def test_unknown_turns_are_404(api: Api) -> None:
    assert api.get("/turns/nope").status_code == 404
    assert api.get("/turns/nope/events").status_code == 404
    assert api.post("/turns/nope/cancel", {}).status_code == 404
    assert api.get("/turns/nope/wait?timeout=0").status_code == 404
    resume = api.post("/turns/nope/resume", {"command": "retry"})
    assert resume.status_code == 404 and resume.json()["error"]["type"] == "TurnNotFoundError"


def test_an_operator_token_may_act_as_one_tenant(http: TestClient, runner: AgentRunner) -> None:
    # The operator credential (the legacy token, tenant "*") may pick a tenant by header;
    # tenant credentials cannot (tests/unit/test_http_security.py).
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    acme = {**bearer, TENANT_HEADER: "acme"}
    created = http.post("/turns", json={"agent": "pay-agent", "input": "x"}, headers=acme)
    assert created.status_code == 201, created.text
    turn_id = created.json()["id"]
    assert runner.store.load(turn_id).metadata == {"tenant_id": "acme"}
    globex = {**bearer, TENANT_HEADER: "globex"}
    assert http.get(f"/turns/{turn_id}", headers=globex).status_code == 404
    assert http.get(f"/turns/{turn_id}", headers=acme).status_code == 200
    assert http.get(f"/turns/{turn_id}", headers=bearer).status_code == 200
    version = runner.store.load(turn_id).version
    cancel = http.post(f"/turns/{turn_id}/cancel", headers={**bearer, TENANT_HEADER: "globex"})
    assert cancel.status_code == 404
    assert runner.store.load(turn_id).version == version


def test_a_start_claiming_another_tenant_is_403(http: TestClient) -> None:
    payload = {"agent": "pay-agent", "input": "x", "metadata": {"tenant_id": "globex"}}
    headers = {"Authorization": f"Bearer {TOKEN}", TENANT_HEADER: "acme"}
    assert http.post("/turns", json=payload, headers=headers).status_code == 403


def test_the_bearer_token_reads_and_writes(http: TestClient, runner: AgentRunner) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    created = http.post("/turns", json={"agent": "pay-agent", "input": "x"}, headers=bearer)
    assert created.status_code == 201
    turn_id = created.json()["id"]
    assert http.get(f"/turns/{turn_id}").status_code == 401
    cancelled = http.post(f"/turns/{turn_id}/cancel", headers=bearer)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    assert runner.store.load(turn_id).status is AgentTurnStatus.CANCELLED


def parse_sse(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    messages = []
    for block in text.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith(":")]
        if not lines:
            continue  # a keep-alive comment
        fields = dict(line.split(": ", 1) for line in lines)
        messages.append((fields["id"], fields["event"], json.loads(fields["data"])))
    return messages


def test_the_event_stream_resumes_after_last_event_id(
    api: Api, server: RedisServer, settings: Settings
) -> None:
    turn_id = start(api)
    api.post(f"/turns/{turn_id}/resume", {"command": "approve_tool", "call_id": "c1"})
    full = read_events(server.client(), settings.namespace, turn_id, count=1000)

    everything = api.get(f"/turns/{turn_id}/events")
    assert everything.headers["content-type"].startswith("text/event-stream")
    messages = parse_sse(everything.text)
    assert [(m[0], m[2]) for m in messages] == full
    assert messages[-1][1] == "TURN_COMPLETED"

    middle = full[5][0]
    rest = parse_sse(api.get(f"/turns/{turn_id}/events", **{"Last-Event-ID": middle}).text)
    assert [m[0] for m in rest] == [sid for sid, _ in full[6:]]
    assert api.get(f"/turns/{turn_id}/events", **{"Last-Event-ID": full[-1][0]}).status_code == 204
    bad = api.get(f"/turns/{turn_id}/events", **{"Last-Event-ID": "yesterday"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "Last-Event-ID"


def test_the_event_stream_ends_when_the_tree_ended_without_a_streamed_end(
    api: Api, runner: AgentRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentworker.http import sse

    turn_id = start(api)
    for listener in list(runner.events._listeners):  # the workers stream nothing more
        runner.remove_event_listener(listener)
    runner.resume(turn_id, AgentResumeCommand.approve_tool("c1"))
    monkeypatch.setattr(sse, "PING_SECONDS", 0.1)
    monkeypatch.setattr(sse, "BLOCK_MS", 50)

    answer = api.get(f"/turns/{turn_id}/events")

    assert answer.status_code == 200
    assert parse_sse(answer.text)[-1][1] == "TURN_SUSPENDED"


def test_the_app_refuses_to_run_without_credentials(runner: AgentRunner) -> None:
    with pytest.raises(ConfigurationError, match="AGENTWORKER_CREDENTIALS"):
        create_http_app(runner, Settings(webhook_secret=None, api_token=None))


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (TurnNotFoundError("t"), 404),
        (InvalidResumeError("t", "no"), 409),
        (AgentConversationBusyException("c", "t", "RUNNING"), 409),
        (ConcurrentModificationError("t", 1, 2), 409),
        (LeaseLostError("t", "gone"), 409),
        (AgentNotFoundError("a"), 422),
        (ConfigurationError("no memory"), 422),
        (SnapshotCorruptedError("t", "bad"), 500),
        (RuntimeError("bug"), 500),
    ],
)
def test_errors_map_to_status_codes(error: Exception, status: int) -> None:
    assert status_of(error) == status


def test_a_resume_under_a_workers_live_lease_is_409_with_retry_after(
    api: Api, runner: AgentRunner
) -> None:
    turn_id = start(api)
    # Given a worker holds the turn's lease (it took it to end a cancel request)
    runner.store.request_cancellation(turn_id, "stop")
    held = runner.store.claim(turn_id, "worker-1", runner.store.now(), 20_000)
    assert held is not None
    before = runner.store.load(turn_id)

    answer = api.post(f"/turns/{turn_id}/resume", {"command": "approve_tool", "call_id": "c1"})

    assert answer.status_code == 409
    assert 1 <= int(answer.headers["Retry-After"]) <= 20
    assert answer.json()["error"]["type"] == "TurnLeasedError"
    assert "worker-1" in answer.json()["error"]["message"]
    after = runner.store.load(turn_id)
    assert (after.version, after.approved_call_ids) == (before.version, [])
