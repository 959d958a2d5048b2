"""Worker mode: a step's last save gives the lease back in the same write."""

from __future__ import annotations

from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentRunner,
    AgentTurnStatus,
    AgentWorker,
    AiMessage,
    FunctionModel,
    InMemoryAgentTurnStore,
    LeaseLostError,
    ModelRequest,
    ToolCall,
    ToolMessage,
    tool,
)


class ReleaseCountingStore(InMemoryAgentTurnStore):
    def __init__(self) -> None:
        super().__init__()
        self.explicit_releases = 0
        self.released_by_save = 0

    def release_lease(self, turn_id: str, worker_id: str, lease_id: str) -> bool:
        self.explicit_releases += 1
        return super().release_lease(turn_id, worker_id, lease_id)

    def commit(self, commit: Any) -> Any:
        result = super().commit(commit)
        self.released_by_save += result.lease_released
        return result


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def _two_tools(request: ModelRequest) -> AiMessage:
    done = sum(1 for m in request.messages if isinstance(m, ToolMessage))
    if done == 0:
        calls = [
            ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2}),
            ToolCall(id="c2", name="add", arguments={"a": 3, "b": 4}),
        ]
        return AiMessage(tool_calls=calls)
    return AiMessage("done")


def _runner(store: InMemoryAgentTurnStore) -> AgentRunner:
    runner = AgentRunner(turn_store=store)
    runner.loader.register(Agent("adder", FunctionModel(_two_tools), tools=[add]))  # type: ignore[attr-defined]
    return runner


def test_every_step_releases_with_its_last_save() -> None:
    store = ReleaseCountingStore()
    runner = _runner(store)
    turn = runner.start("adder", "go")

    steps = AgentWorker(runner, "w1").run_until_idle()

    final = runner.restore(turn.id)
    assert final.status is AgentTurnStatus.COMPLETED and steps == 3
    assert store.released_by_save == 3 and store.explicit_releases == 0
    assert store.peek(turn.id).lease is None


def test_after_a_releasing_save_the_step_writes_nothing_more() -> None:
    store = ReleaseCountingStore()
    runner = _runner(store)
    turn = runner.start("adder", "go")
    held = runner.claim(turn.id, "w1")
    assert held is not None
    with runner.holding(held):
        runner.step(held, release=True)
        assert held.held_lease is not None and held.held_lease.released
        with pytest.raises(LeaseLostError):
            runner.save_snapshot(held)
    assert store.explicit_releases == 0
    # another worker can take the next step at once
    assert runner.claim(turn.id, "w2") is not None


def test_a_step_that_saves_nothing_still_gives_the_lease_back() -> None:
    store = ReleaseCountingStore()
    runner = _runner(store)
    turn = runner.start("adder", "go")
    held = runner.claim(turn.id, "w1")
    assert held is not None
    held.state.status = AgentTurnStatus.WAITING_FOR_USER  # not steppable: a no-op step
    with runner.holding(held):
        runner.step(held, release=True)
    assert store.released_by_save == 0 and store.explicit_releases == 1
    assert store.peek(turn.id).lease is None


def test_without_release_the_lease_outlives_the_step() -> None:
    store = ReleaseCountingStore()
    runner = _runner(store)
    turn = runner.start("adder", "go")
    held = runner.claim(turn.id, "w1")
    assert held is not None
    with runner.holding(held):
        runner.step(held)
        runner.step(held)  # two steps under one lease are fine without release
        assert store.peek(turn.id).lease is not None
    assert store.released_by_save == 0 and store.explicit_releases == 1
