"""Traces and metrics of real workers: the OTLP exporter of a prefork worker sends its spans
to a receiver in this test; its metrics port is scraped during and after the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("prometheus_client")

from opentelemetry import trace  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from agentworker.settings import Settings  # noqa: E402
from agentworker.wiring import create_app, make_runner  # noqa: E402
from runner_core import AgentResumeCommand, AgentTurnOptions, AgentTurnStatus  # noqa: E402
from tests.support.observed import CHILD, MODEL, POLICY, ROOT, collecting_spans  # noqa: E402
from tests.support.servers import ROOT as REPO  # noqa: E402
from tests.support.servers import Fleet, free_port  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    links: list[tuple[str, str]]
    error: bool
    pid: int


@dataclass
class Receiver:
    """An OTLP/HTTP (protobuf) trace receiver: what the workers' exporters send."""

    port: int
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    span = Span(
                        s.name,
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        _attributes(s.attributes),
                        [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                        s.status.code == 2,
                        int(resource.get("process.pid", 0)),
                    )
                    with self.lock:
                        self.spans.append(span)


def _attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in pairs:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind) if kind else None
        if kind == "array_value":
            value = tuple(getattr(v, v.WhichOneof("value")) for v in value.values)
        out[kv.key] = value
    return out


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    got = Receiver(free_port())

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                got.add(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", got.port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield got
    server.shutdown()
    server.server_close()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def wait_for(check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {check}")


@pytest.fixture()
def spans() -> Iterator[Any]:
    """The producer's (this process's) spans."""
    with collecting_spans() as exporter:
        yield exporter


#: How the root's steps end in the scenario, each at least once.
ROOT_ENDS = ("WAITING_FOR_APPROVAL", "RETRY_SCHEDULED", "WAITING_FOR_CHILD", "COMPLETED")


def test_one_trace_and_the_metrics_of_a_turn_run_by_prefork_workers(
    fleet: Fleet,
    producer_env: dict[str, str],
    receiver: Receiver,
    spans: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a prefork worker (2 processes) exporting spans over OTLP, with a metrics port
    metrics_port = free_port()
    loader = "tests.support.observed:loader"
    monkeypatch.setenv("AGENTWORKER_AGENT_LOADER", loader)
    fleet.env.update(
        {
            "AGENTWORKER_AGENT_LOADER": loader,
            "AGENTWORKER_METRICS_PORT": str(metrics_port),
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "e2e-worker",
            "AGENTWORKER_LOG_FORMAT": "json",
        }
    )
    fleet.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    fleet.start_worker("w1", concurrency=2, pool="prefork")
    fleet.start_beat()
    fleet.wait_ready()
    settings = Settings()  # the producer's, from the fleet's environment
    runner = make_runner(settings, create_app(settings))

    # When a producer starts the scenario's turn inside its own span, and approves the payment
    with trace.get_tracer("test").start_as_current_span("producer") as producer:
        turn = runner.start(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
    trace_id = format(producer.get_span_context().trace_id, "032x")
    wait_for(lambda: runner.restore(turn.id).status is AgentTurnStatus.WAITING_FOR_APPROVAL)
    runner.submit_resume(turn.id, AgentResumeCommand.approve_tool("pay-1"))
    wait_for(lambda: runner.restore(turn.id).status is AgentTurnStatus.COMPLETED)

    # Then the workers' spans arrive, all in the producer's trace
    def root_done() -> list[Span]:
        with receiver.lock:
            got = list(receiver.spans)
        # each prefork process exports on its own schedule: the root's last step can
        # arrive before the other process's child steps, or before its own earlier ones
        children = {s.parent_id for s in got if s.name == f"step {CHILD}"}
        steps = [s for s in got if s.name == f"step {ROOT}"]
        root = {s.attributes.get("agentworker.turn.status") for s in steps}
        done = set(ROOT_ENDS) <= root and len(children) >= 2
        return got if done else []

    got = wait_for(root_done, timeout=30)
    ours = [s for s in got if s.attributes.get("agentworker.root_turn.id") == turn.id]
    ours += [s for s in got if s.name.startswith(("chat ", "execute_tool "))]
    assert {s.trace_id for s in ours} == {trace_id}
    by_id = {s.span_id: s for s in got}

    steps = [s for s in got if s.name == f"step {ROOT}"]
    ends = [s.attributes["agentworker.turn.status"] for s in steps]
    for status in ROOT_ENDS:
        assert status in ends, ends
    # the root's steps continue the invoke_agent span the producer created
    assert {s.parent_id for s in steps} == {format(_invoke_span_id(spans, turn.id), "016x")}
    assert all(s.attributes["agentworker.lease.owner"] for s in steps)

    lookups = [s for s in got if s.name == "execute_tool lookup"]
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in lookups) == ["look-a", "look-b"]
    assert len({s.parent_id for s in lookups}) == 1
    chats = [s for s in got if s.name == f"chat {MODEL}" and s.trace_id == trace_id]
    assert sum(s.error for s in chats) == 1
    ok = next(s for s in chats if not s.error)
    assert ok.attributes["gen_ai.usage.input_tokens"] == 10
    assert ok.attributes["gen_ai.request.model"] == MODEL

    children = [s for s in got if s.name == f"invoke_agent {CHILD}" and s.trace_id == trace_id]
    assert len(children) == 2
    planning = by_id[children[0].parent_id]
    assert planning.name == f"step {ROOT}" and children[1].parent_id == planning.span_id
    assert planning.attributes["agentworker.turn.status"] == "WAITING_FOR_CHILD"
    child_steps = [s for s in got if s.name == f"step {CHILD}" and s.trace_id == trace_id]
    assert {s.parent_id for s in child_steps} == {c.span_id for c in children}

    # and a step links to the Celery task span of its wake-up while that is in another
    # trace: until the children end. A child's last step wakes the parent from inside this
    # trace, so from then on the task spans belong to it and a link would say nothing new.
    runs = {s.span_id: s for s in got if s.name == "run/agentworker.step_turn"}
    last_before_children = planning.attributes["agentworker.step.number"]
    for step in steps:
        linked = [runs[span_id] for _, span_id in step.links if span_id in runs]
        assert all(run.trace_id != trace_id for run in linked)
        if step.attributes["agentworker.step.number"] <= last_before_children:
            assert linked, step.attributes

    # And the worker's JSON log lines written during a step carry the turn and its trace
    lines = [
        json.loads(line)
        for line in (fleet.logs / "w1.log").read_text().splitlines()
        if line.startswith("{")
    ]
    lookup = next(line for line in lines if line["message"] == "looking up a")
    assert lookup["turn_id"] == turn.id and lookup["trace_id"] == trace_id
    assert lookup["lease_owner"].endswith(str(lookup["process"]))

    # And the worker's port counts what its processes did (prefork: summed over processes)
    def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        samples = scrape(metrics_port)
        key = ("agentworker_steps_total", (("outcome", "COMPLETED"),))
        return samples if samples.get(key, 0) >= 3 else {}

    try:
        samples = wait_for(counted, timeout=15)
    except AssertionError:
        print({k: v for k, v in scrape(metrics_port).items() if k[0].startswith("agentworker")})
        print((fleet.logs / "w1.log").read_text()[-5000:])
        raise
    assert samples[("agentworker_steps_total", (("outcome", "COMPLETED"),))] == 3
    tokens = (("agent", ROOT), ("direction", "input"), ("model", MODEL))
    assert samples[("agentworker_tokens_total", tokens)] == 40
    ended = (("agent", ROOT), ("status", "COMPLETED"))
    assert samples[("agentworker_turns_ended_total", ended)] == 1
    ended = (("agent", CHILD), ("status", "COMPLETED"))
    assert samples[("agentworker_turns_ended_total", ended)] == 2
    errors = (("agent", ROOT), ("error", "ModelError"), ("model", MODEL))
    assert samples[("agentworker_model_call_errors_total", errors)] == 1
    lookups_count = (("agent", ROOT), ("tool", "lookup"))
    assert samples[("agentworker_tool_call_duration_seconds_count", lookups_count)] == 2
    # one per claim of a runnable turn (the root, its retry, each child): a chained step
    # keeps its lease through its commit and is not woken, a woken parent is not timed
    assert samples[("agentworker_wakeup_latency_seconds_count", ())] >= 4
    assert samples[("agentworker_sweep_duration_seconds_count", ())] >= 1
    assert samples[("agentworker_sweep_woken_total", (("kind", "due"),))] >= 1
    assert ("agentworker_queue_depth", (("queue", "agentworker.steps"),)) in samples
    assert samples[("agentworker_turns", (("state", "live"),))] == 0
    assert not any("turn_id" in dict(labels) for _, labels in samples)


def _invoke_span_id(exporter: Any, turn_id: str) -> int:
    """The producer-side ``invoke_agent`` span of the turn (the test process exported it)."""
    for span in exporter.get_finished_spans():
        if span.name == f"invoke_agent {ROOT}" and (
            (span.attributes or {}).get("agentworker.turn.id") == turn_id
        ):
            return int(span.context.span_id)
    raise AssertionError("no invoke_agent span in the producer")


def test_the_http_app_serves_the_fleets_metrics_to_an_operator_only(
    fleet: Fleet, fleet_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a prefork worker and the HTTP app on one host, sharing a multiprocess directory
    shared = tmp_path / "prometheus"
    shared.mkdir()
    loader = "tests.support.observed:loader"
    env = {
        **fleet_env,
        "AGENTWORKER_AGENT_LOADER": loader,
        "PROMETHEUS_MULTIPROC_DIR": str(shared),
        "AGENTWORKER_METRICS_PORT": str(free_port()),
    }
    fleet.env.update(env)
    fleet.start_worker("w1", concurrency=2, pool="prefork")
    fleet.wait_ready()
    port = free_port()
    credentials = [{"token": "acme", "tenant": "acme", "scopes": ["read", "write"]}]
    http_env = {
        **os.environ,
        **env,
        "AGENTWORKER_API_TOKEN": "ops",
        "AGENTWORKER_CREDENTIALS": json.dumps(credentials),
        "PYTHONPATH": str(REPO),
    }
    command = [sys.executable, "-m", "uvicorn", "agentworker.http:app", "--port", str(port)]
    with (tmp_path / "uvicorn.log").open("wb") as out:
        proc = subprocess.Popen(command, env=http_env, cwd=REPO, stdout=out, stderr=out)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base + "/healthz"), timeout=20)

        # When a tenant starts a one-step turn over HTTP and it ends on the worker
        started = _request(base + "/turns", "acme", {"agent": CHILD, "input": "go"})
        assert started[0] == 201, started
        turn_id = json.loads(started[1])["id"]

        def ended() -> bool:
            status, body = _request(f"{base}/turns/{turn_id}", "acme")
            return status == 200 and json.loads(body)["status"] == "COMPLETED"

        wait_for(ended, timeout=30)

        # Then an operator reads the worker processes' counts through the HTTP app
        def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
            status, body = _request(base + "/metrics", "ops")
            assert status == 200, body
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(body)
                for s in family.samples
            }
            key = ("agentworker_turns_ended_total", (("agent", CHILD), ("status", "COMPLETED")))
            return samples if samples.get(key) == 1 else {}

        samples = wait_for(scraped, timeout=15)
        tokens = (("agent", CHILD), ("direction", "output"), ("model", MODEL))
        assert samples[("agentworker_tokens_total", tokens)] == 3
        assert samples[("agentworker_steps_total", (("outcome", "COMPLETED"),))] == 1
        assert ("agentworker_turns", (("state", "live"),)) in samples

        # and nobody else does
        assert _request(base + "/metrics", None)[0] == 401
        assert _request(base + "/metrics", "wrong")[0] == 401
        assert _request(base + "/metrics", "acme")[0] == 403
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def _request(url: str, token: str | None, body: dict[str, Any] | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
