"""The MCP suite: real MCP servers (tests/support/mcp_servers) over stdio and HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("mcp")

from runner_core import (  # noqa: E402
    AgentExecutionPolicy,
    AgentRunner,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
)
from tests.support.mcp_fixtures import mcp_files, mcp_http  # noqa: E402, F401


@pytest.fixture
def store() -> InMemoryAgentTurnStore:
    return InMemoryAgentTurnStore()


@pytest.fixture
def make_runner(store: InMemoryAgentTurnStore) -> Callable[..., AgentRunner]:
    """Runners sharing the test's store and loader (like processes sharing Redis)."""
    loader = InMemoryAgentLoader()

    def make(policy: AgentExecutionPolicy | None = None, **kwargs: Any) -> AgentRunner:
        return AgentRunner(turn_store=store, agent_loader=loader, policy=policy, **kwargs)

    return make
