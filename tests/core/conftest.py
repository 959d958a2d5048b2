"""Fixtures of the unit suite: one in-memory store and loader per test, runners sharing them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    AgentExecutionPolicy,
    AgentRunner,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
)
from tests.support.scripts import EventLog


@pytest.fixture
def store() -> InMemoryAgentTurnStore:
    return InMemoryAgentTurnStore()


@pytest.fixture
def loader() -> InMemoryAgentLoader:
    return InMemoryAgentLoader()


@pytest.fixture
def make_runner(
    store: InMemoryAgentTurnStore, loader: InMemoryAgentLoader
) -> Callable[..., AgentRunner]:
    """Runners sharing the test's store and loader (like processes sharing Redis)."""

    def make(policy: AgentExecutionPolicy | None = None, **kwargs: Any) -> AgentRunner:
        return AgentRunner(turn_store=store, agent_loader=loader, policy=policy, **kwargs)

    return make


@pytest.fixture
def runner(make_runner: Callable[..., AgentRunner]) -> AgentRunner:
    return make_runner()


@pytest.fixture
def events(runner: AgentRunner) -> EventLog:
    log = EventLog()
    runner.add_event_listener(log)
    return log
