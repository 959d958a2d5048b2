"""Structured logs: a record logged during a worker's step carries the turn and its trace."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from agentworker.fleet.stepping import step_once
from agentworker.ops import logs
from agentworker.ops import signals as observability
from runner_core import (
    AgentRunner,
    AgentTurnOptions,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    telemetry,
)
from tests.support.observed import POLICY, ROOT, agents, memory_fail_once


@pytest.fixture()
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """A handler on the scenario's logger, switched to JSON as Celery's signal does it."""
    monkeypatch.setenv(logs.FORMAT_VARIABLE, "json")
    out = io.StringIO()
    logger = logging.getLogger("tests.support.observed")
    handler = logging.StreamHandler(out)
    holder = logging.getLogger("test-json-holder")
    holder.addHandler(handler)
    observability._json_logs(logger=holder)  # what after_setup_logger runs
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield out
    logger.removeHandler(handler)
    holder.removeHandler(handler)


def test_a_record_logged_in_a_step_carries_the_turn_fields(captured: io.StringIO) -> None:
    # Given a turn stepped by step_once (as a worker does), whose tool logs a line
    store = InMemoryAgentTurnStore()
    runner = AgentRunner(store, InMemoryAgentLoader(agents(memory_fail_once())))
    turn = runner.start(ROOT, "go", options=AgentTurnOptions(policy=POLICY))
    step_once(runner, turn.id, "host:1")  # the model asks for two lookups
    step_once(runner, turn.id, "host:1")  # the lookups run and log

    # Then each line is JSON with the turn's id, root, version and lease owner
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["looking up a", "looking up b"]
    first = lines[0]
    assert first["level"] == "INFO" and first["logger"] == "tests.support.observed"
    assert first["turn_id"] == turn.id and first["root_turn_id"] == turn.id
    assert first["lease_owner"] == "host:1"
    assert isinstance(first["turn_version"], int) and first["turn_version"] > 0
    stored = runner.restore(turn.id)
    assert first.get("trace_id") == telemetry.trace_id(stored)  # None without an SDK


def test_outside_a_step_records_have_no_turn_fields(captured: io.StringIO) -> None:
    logging.getLogger("tests.support.observed").warning("idle %d", 1)
    [line] = [json.loads(s) for s in captured.getvalue().splitlines()]
    assert line["message"] == "idle 1" and "turn_id" not in line


def test_text_stays_text_without_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(logs.FORMAT_VARIABLE, raising=False)
    holder = logging.getLogger("test-text-holder")
    handler = logging.StreamHandler(io.StringIO())
    holder.addHandler(handler)
    observability._json_logs(logger=holder)
    assert not isinstance(handler.formatter, logs.JsonFormatter)
    holder.removeHandler(handler)


def test_an_exception_is_one_json_field() -> None:
    formatter = logs.JsonFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), None)
        import sys

        record.exc_info = sys.exc_info()
    line = json.loads(formatter.format(record))
    assert line["message"] == "failed" and "ValueError: boom" in line["exc_info"]
