"""A per-turn policy read back from the store says only what its caller set."""

from __future__ import annotations

import pytest

from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStore,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    RetryPolicy,
)
from runner_core.snapshot import load_snapshot


def runner_on(store: AgentTurnStore, lease: float) -> AgentRunner:
    agent = Agent("plain", FunctionModel(lambda r: AiMessage("hi")))
    return AgentRunner(
        turn_store=store,
        agent_loader=InMemoryAgentLoader([agent]),
        policy=AgentExecutionPolicy(lease_seconds=lease),
    )


def test_a_stored_policy_keeps_only_the_fields_its_caller_set(store: AgentTurnStore) -> None:
    runner = runner_on(store, lease=2.0)
    own = AgentExecutionPolicy(max_steps=5, retry=RetryPolicy(max_retries=3))
    turn = runner.start("plain", "hi", options=AgentTurnOptions(policy=own))

    stored = store.load(turn.id).policy
    assert stored is not None
    assert stored.model_fields_set == {"max_steps", "retry"}
    assert stored.retry.model_fields_set == {"max_retries"}
    assert stored == own  # the values themselves are unchanged
    claimed = runner.claim(turn.id, "w1")
    assert claimed is not None and claimed.held_lease is not None
    assert runner.lease_seconds(store.load(turn.id)) == 2.0  # the worker's lease, not 30 s
    assert claimed.held_lease.seconds == 2.0
    runner.release(claimed)


def test_a_lease_the_caller_set_still_wins(store: AgentTurnStore) -> None:
    runner = runner_on(store, lease=2.0)
    own = AgentExecutionPolicy(max_steps=5, lease_seconds=45.0)
    turn = runner.start("plain", "hi", options=AgentTurnOptions(policy=own))

    assert runner.lease_seconds(store.load(turn.id)) == 45.0


@pytest.mark.parametrize(("lease", "wins"), [(30.0, 2.0), (45.0, 45.0)])
def test_an_older_snapshot_with_every_policy_field_reads_its_defaults_as_unset(
    lease: float, wins: float
) -> None:
    # Given a snapshot as earlier releases stored it: the policy with every field
    full = AgentExecutionPolicy(max_steps=5, lease_seconds=lease).model_dump(mode="json")
    doc = {
        "schema_version": 1,
        "id": "t1",
        "agent_id": "plain",
        "agent_version": "1",
        "root_turn_id": "t1",
        "created_at": 1.0,
        "updated_at": 1.0,
        "policy": full,
    }

    policy = load_snapshot(doc).policy

    assert policy is not None and policy.max_steps == 5 and policy.lease_seconds == lease
    assert runner_on(InMemoryAgentTurnStore(), lease=2.0).lease_seconds(load_snapshot(doc)) == wins
