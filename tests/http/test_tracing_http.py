"""A turn started over HTTP continues the caller's trace (the ASGI instrumentation's span)."""

from __future__ import annotations

import json
import uuid

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.instrumentation.asgi")

from starlette.testclient import TestClient  # noqa: E402

from agentworker.http import create_http_app  # noqa: E402
from agentworker.settings import Settings  # noqa: E402
from runner_core import AgentRunner, InMemoryAgentLoader, InMemoryAgentTurnStore  # noqa: E402
from tests.support.observed import ROOT, agents, collecting_spans, memory_fail_once  # noqa: E402

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER = f"00-{CALLER_TRACE}-b7ad6b7169203331-01"


def test_a_turn_started_by_a_request_is_in_the_callers_trace() -> None:
    with collecting_spans() as spans:
        # Given the HTTP app (built while an SDK provider is set) over an in-memory runner
        credentials = [{"token": "acme", "tenant": "acme", "scopes": ["read", "write"]}]
        settings = Settings(
            namespace="trace-" + uuid.uuid4().hex[:8], credentials=json.dumps(credentials)
        )
        loader = InMemoryAgentLoader(agents(memory_fail_once()))
        runner = AgentRunner(InMemoryAgentTurnStore(), loader)
        http = TestClient(create_http_app(runner, settings))

        # When a caller in trace CALLER_TRACE starts a turn
        answer = http.post(
            "/turns",
            json={"agent": ROOT, "input": "go"},
            headers={"Authorization": "Bearer acme", "traceparent": CALLER},
        )
        assert answer.status_code == 201, answer.text

        # Then the turn's invoke_agent span is a child of the request's server span
        finished = spans.get_finished_spans()
        invoke = next(s for s in finished if s.name == f"invoke_agent {ROOT}")
        server = next(s for s in finished if s.kind.name == "SERVER")
        assert format(server.context.trace_id, "032x") == CALLER_TRACE
        assert invoke.parent is not None and invoke.parent.span_id == server.context.span_id
        stored = runner.store.load(answer.json()["id"])
        assert stored.metadata["traceparent"].split("-")[1] == CALLER_TRACE
