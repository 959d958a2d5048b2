"""A typed final output over Redis: restored by another runner, shown by the HTTP API."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from pydantic import BaseModel
from starlette.testclient import TestClient

from agentworker.client import TurnView
from agentworker.http import create_http_app
from agentworker.settings import Settings
from runner_core import Agent, AgentRunner, AgentTurnStatus, InMemoryAgentLoader
from runner_core.output import FINAL_TOOL
from runner_core.testing import ScriptedModel, asks, tool_call
from stores import RedisAgentTurnStore
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

TOKEN = "acme"
CREDENTIALS = [{"token": TOKEN, "tenant": "acme", "scopes": ["read", "write"]}]
GOOD = {"product": "lamp", "price": 12.5, "tags": ["desk", "led"]}


class Quote(BaseModel):
    product: str
    price: float
    tags: tuple[str, ...]


def quoter(model: ScriptedModel) -> Agent:
    return Agent("quoter", model, output_type=Quote, version="3")


@pytest.fixture
def settings(server: RedisServer) -> Settings:
    namespace = "out-" + uuid.uuid4().hex[:8]
    return Settings(redis_url=server.url, namespace=namespace, credentials=json.dumps(CREDENTIALS))


def runner_of(settings: Settings, agent: Agent) -> AgentRunner:
    """A runner of its own (store connection, loader, agent object), like another process."""
    store = RedisAgentTurnStore(settings.redis_url, namespace=settings.namespace)
    return AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader([agent]))


@pytest.fixture
def http(settings: Settings) -> Iterator[TestClient]:
    worker = runner_of(settings, quoter(ScriptedModel(asks(tool_call(FINAL_TOOL, "f1", **GOOD)))))
    front = runner_of(settings, quoter(ScriptedModel()))
    front.dispatcher = lambda turn_id: worker.run_until_blocked(worker.restore(turn_id)) and None
    with TestClient(create_http_app(front, settings)) as client:
        yield client


def test_the_output_is_json_in_the_api_and_typed_after_a_restore(
    http: TestClient, settings: Settings
) -> None:
    # Given a turn started over HTTP and run by another runner (the worker)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    started = http.post("/turns", json={"agent": "quoter", "input": "lamp?"}, headers=headers)
    assert started.status_code in (200, 201), started.text
    turn_id = started.json()["id"]

    # When the API shows it
    shown = http.get(f"/turns/{turn_id}", headers=headers).json()

    # Then the output is the value's JSON, the final output its JSON text
    assert shown["status"] == "COMPLETED"
    assert shown["output"] == GOOD
    assert json.loads(shown["final_output"]) == GOOD
    view = TurnView.model_validate(shown)
    assert view.output_as(Quote) == Quote(product="lamp", price=12.5, tags=("desk", "led"))

    # And a third runner restoring it from Redis reads an instance of the type
    restored = runner_of(settings, quoter(ScriptedModel())).restore(turn_id)
    assert restored.status is AgentTurnStatus.COMPLETED
    assert isinstance(restored.output, Quote)
    assert restored.output.tags == ("desk", "led")


def test_a_view_without_output_reads_none() -> None:
    view = TurnView.model_validate(
        {**_minimal_view(), "final_output": "plain"}  # an older server sends no "output"
    )
    assert view.output is None and view.output_as(Quote) is None


def _minimal_view() -> dict[str, object]:
    return {
        "id": "t",
        "root_turn_id": "t",
        "parent_turn_id": None,
        "agent_id": "a",
        "agent_version": "1",
        "conversation_id": None,
        "status": "COMPLETED",
        "phase": "MODEL",
        "version": 1,
        "suspension": None,
        "next_runnable_at": None,
        "counters": {"iterations": 1, "steps": 1, "tool_calls": 0, "retries": 0},
        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        "progress": None,
        "error": None,
        "terminal_reason": None,
        "cancel_requested": False,
        "metadata": {},
        "children": [],
        "created_at": 0.0,
        "updated_at": 0.0,
    }
