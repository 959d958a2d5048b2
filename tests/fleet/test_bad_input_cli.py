"""Bad input from the CLI and to a worker: one short line, exit 1, nothing stored.

The CLI and worker rows of the census (docs/limits.md), on a private redis-server.
"""

from __future__ import annotations

import uuid

import pytest
from typer.testing import CliRunner

from agentworker.cli.commands import app
from agentworker.fleet.stepping import step_once
from agentworker.settings import Settings
from agentworker.wiring import create_app, make_runner
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

cli = CliRunner()
HUGE_ID = "q" * 20_000
#: Metadata nested deeper than a recursive JSON reader can go.
DEEP = '{"tree": ' + "[" * 50_000 + "]" * 50_000 + "}"
#: Metadata a reader takes, nested deeper than the library keeps.
NESTED = '{"tree": ' + "[" * 500 + "]" * 500 + "}"


@pytest.fixture()
def namespace(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> str:
    name = "bad-cli-" + uuid.uuid4().hex[:8]
    values = {
        "AGENTWORKER_REDIS_URL": server.url,
        "AGENTWORKER_NAMESPACE": name,
        "AGENTWORKER_AGENT_LOADER": "tests.support.fleet_agents:loader",
        "AGENTWORKER_BROKER_URL": f"redis://127.0.0.1:{server.port}/1",
        "AGENTWORKER_MAX_INPUT_BYTES": "100",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return name


def _keys(server: RedisServer, namespace: str) -> int:
    return len(server.client().keys(f"*{namespace}*"))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["turns", "start", "e2e-tools", "go", "--metadata", '{"x": NaN}'], "metadata key 'x'"),
        (["turns", "start", "e2e-tools", "go", "--metadata", '{"x": 1e999}'], "metadata key 'x'"),
        (["turns", "start", "e2e-tools", "go", "--metadata", NESTED], "deeper than 100 levels"),
        (["turns", "start", "e2e-tools", "go", "--metadata", DEEP], "nests too deeply"),
        (["turns", "start", "e2e-tools", "g" * 101], "the limit is 100"),
        (["turns", "show", HUGE_ID], "(20000 chars) not found"),
        (["turns", "cancel", HUGE_ID], "(20000 chars) not found"),
        (["turns", "resume", HUGE_ID, "--approve", "c1"], "(20000 chars) not found"),
    ],
    ids=[
        "cli start: NaN in metadata",
        "cli start: Infinity in metadata",
        "cli start: metadata nested 500 levels deep",
        "cli start: metadata nested 50,000 levels deep",
        "cli start: input over AGENTWORKER_MAX_INPUT_BYTES",
        "cli show: a 20000-character id",
        "cli cancel: a 20000-character id",
        "cli resume: a 20000-character id",
    ],
)
def test_bad_input_is_one_short_line_and_stores_nothing(
    server: RedisServer, namespace: str, args: list[str], said: str
) -> None:
    before = _keys(server, namespace)

    result = cli.invoke(app, args, env={"COLUMNS": "200"})

    assert result.exit_code == 1, result.output[:500]
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 300, result.output[:500]
    assert said in lines[0]
    assert _keys(server, namespace) == before


def test_a_wakeup_for_a_huge_unknown_id_is_dropped(server: RedisServer, namespace: str) -> None:
    settings = Settings()
    runner = make_runner(settings, create_app(settings))
    before = _keys(server, namespace)

    assert step_once(runner, "w" * (1 << 20), "worker-1") == "not-found"

    assert _keys(server, namespace) == before
