"""The README runs as written: its Python blocks execute, its commands and links exist.

Python blocks run in order in a temporary directory; a block opening with ``# name.py`` is
written there as a module instead (the "bring your own agent" loader). The fleet block runs
against a private redis-server with ``AGENTWORKER_AGENT_LOADER=my_agents:loader``.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentworker.cli.commands import app
from runner_core import AgentTurnStatus
from tests.support.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
MODULE = re.compile(r"^# (\w+)\.py\n")


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README.read_text()) if lang == language]


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTWORKER_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m == "my_agents"]:
        del sys.modules[name]


@pytest.fixture()
def redis_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    monkeypatch.setenv("AGENTWORKER_REDIS_URL", server.url)
    monkeypatch.setenv("AGENTWORKER_BROKER_URL", server.url)
    monkeypatch.setenv("AGENTWORKER_NAMESPACE", "readme-" + uuid.uuid4().hex[:8])
    monkeypatch.setenv("AGENTWORKER_AGENT_LOADER", "my_agents:loader")
    yield server
    server.stop()


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    python = blocks("python")
    assert len(python) >= 4
    assert MODULE.match(python[0]) and MODULE.match(python[0]).group(1) == "my_agents"


def test_every_python_block_runs_as_written(workdir: Path, redis_env: RedisServer) -> None:
    namespaces = []
    for body in blocks("python"):
        module = MODULE.match(body)
        if module:
            (workdir / f"{module.group(1)}.py").write_text(body)
            continue
        if "runner_core.mcp" in body and importlib.util.find_spec("mcp") is None:
            continue  # make test-min runs the [mcp] extra's floor in a venv of its own
        namespace: dict[str, object] = {"__name__": "__readme__"}
        exec(compile(body, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
        namespaces.append(namespace)

    # The in-process block ends with the approved refund
    embedded = next(ns for ns in namespaces if "AgentRunner" in ns)
    turn = embedded["turn"]
    assert turn.status is AgentTurnStatus.COMPLETED  # type: ignore[attr-defined]
    assert turn.final_output == "Done: refunded 5.0 on 1001."  # type: ignore[attr-defined]
    # The fleet block saved a READY turn in the private Redis, for the workers
    fleet = next(ns for ns in namespaces if "agentworker" in ns)
    started = fleet["turn"]
    stored = fleet["runner"].store.load(started.id)  # type: ignore[attr-defined]
    assert stored.status is AgentTurnStatus.READY and stored.agent_id == "support"


def test_the_comments_in_the_embedded_block_match_what_it_prints(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = blocks("python")
    (workdir / "my_agents.py").write_text(python[0])
    embedded = next(b for b in python if "AgentRunner()" in b)
    exec(compile(embedded, "README.md", "exec"), {"__name__": "__readme__"})  # noqa: S102
    printed = capsys.readouterr().out.splitlines()
    promised = [line.split("  # ", 1)[1] for line in embedded.splitlines() if "print(" in line]
    assert len(printed) == len(promised) == 2
    for out, comment in zip(printed, promised, strict=True):
        assert out.startswith(comment.removesuffix("...}}").rstrip(".")), (out, comment)


def commands() -> list[list[str]]:
    lines = [
        line.split("  #", 1)[0].strip()
        for body in blocks("console")
        for line in body.splitlines()
        if line.startswith("$ ")
    ]
    return [shlex.split(line[2:].replace("<id>", "ID").replace("...", "x")) for line in lines]


def test_make_targets_in_the_readme_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.M))
    used = set()
    for argv in commands():
        if "make" in argv:
            used |= {w for w in argv[argv.index("make") + 1 :] if "=" not in w}
    assert used and used <= targets, used - targets


def test_agentworker_commands_in_the_readme_parse() -> None:
    import typer.main

    root = typer.main.get_command(app)
    seen = 0
    for argv in commands():
        if not argv or argv[0] != "agentworker":
            continue
        group = root.commands[argv[1]]  # type: ignore[attr-defined]
        command = group.commands[argv[2]] if hasattr(group, "commands") else group
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        for word in argv[3:]:
            if word.startswith("--"):
                assert word in options, (argv, word)
        seen += 1
    assert seen >= 5


def test_links_stay_inside_the_repository() -> None:
    text = README.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links
    for link in links:
        assert "://" not in link, link
        assert (ROOT / link.split("#")[0]).exists(), link
