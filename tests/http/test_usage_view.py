"""The API and its typed client show the cached and reasoning parts of a turn's usage."""

from __future__ import annotations

from agentworker.client import TurnView
from agentworker.http.schemas import turn_summary
from runner_core.models import Usage
from runner_core.snapshot import AgentTurnSnapshot


def test_a_turn_view_shows_cached_input_and_reasoning_tokens() -> None:
    usage = Usage(input_tokens=100, output_tokens=60, cached_input_tokens=80, reasoning_tokens=50)
    snapshot = AgentTurnSnapshot(
        id="t1", agent_id="a", agent_version="1", root_turn_id="t1",
        created_at=1.0, updated_at=1.0, usage=usage,
    )  # fmt: skip

    shown = turn_summary(snapshot)["usage"]
    view = TurnView.model_validate(turn_summary(snapshot))

    assert shown == {
        "input_tokens": 100, "output_tokens": 60, "total_tokens": 160,
        "cached_input_tokens": 80, "reasoning_tokens": 50,
    }  # fmt: skip
    assert (view.usage.cached_input_tokens, view.usage.reasoning_tokens) == (80, 50)
