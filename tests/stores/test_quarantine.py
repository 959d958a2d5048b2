"""Corrupt records are quarantined once: moved out of every index, listed, never re-sent."""

from __future__ import annotations

import logging
import time

import pytest

from agentworker.fleet.stepping import step_once, sweep_once
from runner_core import Agent, AgentRunner, AiMessage, FunctionModel, InMemoryAgentLoader
from stores import RedisAgentTurnStore


def runner_on(store: RedisAgentTurnStore, sent: list[str]) -> AgentRunner:
    agent = Agent("plain", FunctionModel(lambda r: AiMessage("hi")))
    return AgentRunner(
        turn_store=store, agent_loader=InMemoryAgentLoader([agent]), dispatcher=sent.append
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("body", "{not json"),
        ("body", '{"schema_version":7}'),
        # passes the claim script's quick look: the worker's parse finds it
        ("body", '{"schema_version":1,"id":"x","nonsense":true}'),
        ("st", "BOGUS"),
        ("sv", "99"),
    ],
)
def test_a_corrupt_turn_is_quarantined_once_and_never_sent_again(
    redis_store: RedisAgentTurnStore, caplog: pytest.LogCaptureFixture, field: str, value: str
) -> None:
    sent: list[str] = []
    runner = runner_on(redis_store, sent)
    bad = runner.start("plain", "hi")
    good = runner.start("plain", "hi")
    redis_store.unmark_queued(bad.id)  # as if its wake-up was lost
    tag = redis_store.tag_of(bad.id)
    redis_store.redis.hset(redis_store.keys.header(tag, bad.id), field, value)
    sent.clear()
    time.sleep(0.02)  # the sweeper's estimate of the server clock is good to a millisecond

    with caplog.at_level(logging.ERROR, logger="stores.redis"):
        sweep_once(runner, lost_after=0.0)
        assert sent == [bad.id]
        assert step_once(runner, bad.id, "w1") == "quarantined"
        for _ in range(3):
            sweep_once(runner, lost_after=0.0)

    assert sent == [bad.id]  # sent once, never again
    assert sum("quarantined" in r.message for r in caplog.records) == 1
    [(turn_id, reason, _)] = redis_store.quarantined()
    assert turn_id == bad.id and reason
    assert step_once(runner, good.id, "w1") == "COMPLETED"  # the others go on
    assert redis_store.claim_runnable("w2", redis_store.now(), 1000, 10) == []
