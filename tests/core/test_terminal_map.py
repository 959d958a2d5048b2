"""The one map from terminal status to event, and every list that must agree with it."""

from __future__ import annotations

import re
from pathlib import Path

from runner_core import AgentTurnStatus
from runner_core.events import TERMINAL_EVENT, TERMINAL_EVENTS, AgentEventType
from runner_core.status import BLOCKED, TERMINAL

LUA = Path(__file__).resolve().parents[2] / "stores" / "redis" / "lua"


def _lua_table(name: str) -> set[str]:
    """The keys of ``local NAME = { KEY = true, ... }`` in the scripts' shared library."""
    text = (LUA / "_lib.lua").read_text()
    found = re.search(rf"local {name} = \{{(.*?)\}}", text, re.S)
    assert found is not None, f"_lib.lua has no table {name}"
    return set(re.findall(r"([A-Z_]+) = true", found.group(1)))


def test_the_terminal_statuses_are_the_maps_keys() -> None:
    assert set(TERMINAL_EVENT) == TERMINAL
    assert all(s.is_terminal for s in TERMINAL_EVENT)


def test_the_terminal_events_are_the_maps_values_one_per_status() -> None:
    assert TERMINAL_EVENTS == frozenset(TERMINAL_EVENT.values())
    assert len(TERMINAL_EVENTS) == len(TERMINAL_EVENT)
    assert TERMINAL_EVENT[AgentTurnStatus.FAILED] is AgentEventType.TURN_FAILED


def test_the_lua_scripts_know_the_same_terminal_statuses() -> None:
    assert _lua_table("TERMINAL") == {s.value for s in TERMINAL_EVENT}


def test_the_lua_scripts_know_every_status() -> None:
    live = {s.value for s in AgentTurnStatus if not s.is_terminal}
    assert _lua_table("KNOWN") == live  # the terminal ones are added from TERMINAL
    assert {s.value for s in BLOCKED} <= live
