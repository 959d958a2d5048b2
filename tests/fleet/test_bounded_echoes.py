"""A worker's log line and a stream-id refusal cut the id they echo."""

from __future__ import annotations

import logging

import pytest

from agentworker.fleet.stepping import step_once
from agentworker.notify.streams import check_stream_id
from runner_core import AgentRunner, InMemoryAgentLoader, InMemoryAgentTurnStore

HUGE = "w" * (1 << 20)


def test_a_wake_up_for_a_huge_unknown_id_logs_one_short_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = AgentRunner(turn_store=InMemoryAgentTurnStore(), agent_loader=InMemoryAgentLoader())

    with caplog.at_level(logging.WARNING, logger="agentworker"):
        assert step_once(runner, HUGE, "worker-1") == "not-found"

    [record] = [r for r in caplog.records if "unknown turn" in r.getMessage()]
    assert len(record.getMessage()) < 200, record.getMessage()[:300]
    assert "1048576 chars" in record.getMessage()


def test_a_short_unknown_id_is_logged_whole(caplog: pytest.LogCaptureFixture) -> None:
    runner = AgentRunner(turn_store=InMemoryAgentTurnStore(), agent_loader=InMemoryAgentLoader())

    with caplog.at_level(logging.WARNING, logger="agentworker"):
        step_once(runner, "t-gone", "worker-1")

    assert any("'t-gone'" in r.getMessage() for r in caplog.records)


def test_a_huge_bad_stream_id_is_cut_in_the_error() -> None:
    with pytest.raises(ValueError, match="not a stream id") as caught:
        check_stream_id("9" * 100_000 + "x")

    assert len(str(caught.value)) < 200
    assert "100001 chars" in str(caught.value)
    assert check_stream_id("12-3") == "12-3"
