"""The console's accounts of a turn, without a browser: prices, waterfall rows, transcript."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentworker.http.console import work
from agentworker.http.console.waterfall import rows_of, totals
from agentworker.ops.costs import NO_PRICES, Price, prices_of
from agentworker.ops.transcript import entries
from agentworker.settings import Settings
from runner_core import (
    Agent,
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    ConfigurationError,
    InMemoryAgentTurnStore,
    ModelError,
    RetryPolicy,
    Usage,
    tool,
)
from runner_core.output import FINAL_TOOL
from runner_core.testing import ScriptedModel, asks, tool_call
from tests.support.scripts import EventLog, Script, agent, ask, call

E = AgentEventType


@tool(requires_approval=True)
def pay(amount: float) -> str:
    """Pays."""
    return f"paid {amount}"


def test_prices_come_from_json_or_a_file_and_price_cached_tokens_apart(tmp_path: Path) -> None:
    table = {"m": {"input": 2.0, "cached_input": 0.5, "output": 8.0}}
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(table))
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000, cached_input_tokens=400_000)

    for raw in (json.dumps(table), str(path)):
        prices = prices_of(raw)
        # 600k fresh at 2, 400k cached at 0.5, 100k out at 8
        assert prices.cost("m", usage) == pytest.approx(1.2 + 0.2 + 0.8)
        assert prices.cost("other", usage) is None
    assert Price(input=1.0).cost(usage) == pytest.approx(1.0)  # cached at the input price
    assert prices_of(None) is NO_PRICES
    assert Settings(prices=json.dumps(table)).prices == json.dumps(table)


@pytest.mark.parametrize(
    "raw", ["{nope", '["m"]', '{"m": {"input": -1}}', '{"m": {"inptu": 1}}', "/no/such/file"]
)
def test_a_bad_price_table_is_refused_naming_the_setting(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="AGENTWORKER_PRICES"):
        prices_of(raw)


def _runner() -> tuple[AgentRunner, EventLog]:
    runner = AgentRunner(turn_store=InMemoryAgentTurnStore(keep_events=True))
    log = EventLog()
    runner.add_event_listener(log)
    return runner, log


def test_the_waterfall_has_steps_calls_tokens_and_the_wait_for_approval() -> None:
    runner, _ = _runner()
    usage = Usage(input_tokens=100, output_tokens=10, reasoning_tokens=4)
    script = Script(ask(call("pay", "p1", amount=5), usage=usage), "done")
    turn = runner.run(agent(script, pay), "pay 5")
    runner.resume(turn.id, AgentResumeCommand.approve_tool("p1"))

    events = runner.store.read_events(turn.id)
    prices = prices_of(json.dumps({"Script": {"input": 1.0, "output": 2.0}}))
    rows = rows_of(events, prices, runner.store.now())
    kinds = [r.kind for r in rows]

    assert kinds.count("model") == 2 and kinds.count("tool") == 1 and kinds.count("end") == 1
    assert all(r.seconds is not None for r in rows if r.kind in ("step", "model", "tool"))
    [wait] = [r for r in rows if r.kind == "wait"]
    assert wait.label == "waiting for approval" and wait.seconds is not None
    first = next(r for r in rows if r.kind == "model")
    assert first.usage == usage and first.cost == pytest.approx((100 + 20) / 1_000_000)
    html = work.waterfall(turn.id, rows, 1, live=False)
    assert "4 reasoning" in html and 'data-kind="wait"' in html
    assert totals(events, prices)[turn.id].calls == 2


def test_a_retry_row_says_when_the_next_attempt_runs() -> None:
    runner, _ = _runner()
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=30))
    script = Script(ModelError("busy", retryable=True), "ok")
    turn = runner.run(agent(script), "go", options=AgentTurnOptions(policy=policy))
    events = runner.store.read_events(turn.id)

    rows = rows_of(events, NO_PRICES, runner.store.now())

    [retry] = [r for r in rows if r.kind == "retry"]
    assert retry.due == turn.state.next_runnable_at
    assert "ModelError: busy" in retry.detail
    waits = [r for r in rows if r.kind == "wait"]
    assert waits and waits[-1].label == "waiting to retry" and (waits[-1].seconds or 0) >= 29


def test_the_transcript_folds_long_contents_and_cuts_a_very_long_turn() -> None:
    runner, _ = _runner()
    long = "x" * (work.FOLD_CHARS + 10)
    turn = runner.run(agent(Script(long)), "hi")

    html = work.transcript(entries(turn.state, "be kind"))

    assert html.index('class="final final"') < html.index('class="entry user"')
    assert '<details class="system">' in html and "be kind" in html
    assert '<details class="fold">' in html
    many = entries(turn.state) * (work.KEEP_FIRST + work.KEEP_LAST)
    cut = work.transcript(many)
    assert cut.count('class="entry ') == work.KEEP_FIRST + work.KEEP_LAST
    assert "messages not shown here" in cut


def test_a_typed_answer_is_shown_as_its_value() -> None:
    class Quote(BaseModel):
        product: str
        amount: float

    runner, _ = _runner()
    typed = Agent(
        "quoter",
        ScriptedModel(asks(tool_call(FINAL_TOOL, "f1", product="lamp", amount=9.5))),
        output_type=Quote,
    )
    turn = runner.run(typed, "a quote for a lamp")

    final = [e for e in entries(turn.state) if e.kind == "final"]

    assert [e.title for e in final] == ["typed output"]
    assert json.loads(final[0].body) == {"product": "lamp", "amount": 9.5}
