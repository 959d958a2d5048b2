"""The turn's tool fingerprints are stored: in Redis, and absent from older records."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner_core import AgentResumeCommand, AgentRunner, AgentTurnStatus, InMemoryAgentLoader
from runner_core.mcp import MCPToolset
from runner_core.snapshot import load_snapshot
from stores.redis import RedisAgentTurnStore
from tests.support.mcp_fixtures import ServerFiles, stdio_toolset
from tests.support.scripts import Script, agent, ask, call
from tests.support.servers import RedisServer
from tests.support.stores import snap


@pytest.fixture()
def redis_store(tmp_path: Path) -> Iterator[RedisAgentTurnStore]:
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    store = RedisAgentTurnStore(server.url, namespace="mcp-" + uuid.uuid4().hex[:8])
    try:
        yield store
    finally:
        store.close()
        server.stop()


@pytest.fixture()
def toolset(mcp_files: ServerFiles) -> Iterator[MCPToolset]:
    made = stdio_toolset(mcp_files, requires_approval=True)
    yield made
    made.close()


def test_fingerprints_are_saved_with_the_pending_calls(
    redis_store: RedisAgentTurnStore, toolset: MCPToolset
) -> None:
    # Given a turn whose call to add waits for approval, on the Redis store
    runner = AgentRunner(turn_store=redis_store, agent_loader=InMemoryAgentLoader())
    script = Script(ask(call("add", "c1", a=1, b=2)), "three")
    turn = runner.run(agent(script, toolset), "1+2")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL

    # Then the stored turn has the listed tool's fingerprint
    [add] = [t for t in toolset.agent_tools() if t.name == "add"]
    assert redis_store.load(turn.id).tool_fingerprints == {"add": add.fingerprint}

    # And a worker with the same listing runs the call
    done = runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
    assert done.status is AgentTurnStatus.COMPLETED
    assert redis_store.load(turn.id).tool_fingerprints == {"add": add.fingerprint}


def test_a_record_written_before_fingerprints_loads_without_them() -> None:
    data = snap().model_dump(mode="json")
    del data["tool_fingerprints"]

    assert load_snapshot(data).tool_fingerprints == {}
