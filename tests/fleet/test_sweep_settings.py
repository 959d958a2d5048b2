"""Settings the sweeper, beat and housekeeping read: a bad one stops the process in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentworker.fleet.app import app_from_environment
from tests.support.census import SWEEP_SETTINGS


@pytest.mark.parametrize(
    ("name", "value"), SWEEP_SETTINGS, ids=[f"{n}={v}" for n, v in SWEEP_SETTINGS]
)
def test_a_bad_sweep_setting_exits_with_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(f"AGENTWORKER_{name}", value)

    with pytest.raises(SystemExit) as caught:
        app_from_environment()

    message = str(caught.value)
    assert message.startswith(f"agentworker: invalid settings: AGENTWORKER_{name}"), message
    assert "\n" not in message and len(message) < 300


def test_every_setting_row_is_in_the_docs() -> None:
    table = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    for name, value in SWEEP_SETTINGS:
        assert f"| `AGENTWORKER_{name}={value}` |" in table, name
