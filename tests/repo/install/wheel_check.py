"""``make wheel-check``: install the wheel the way a user would and run one turn through it.

Builds the wheel, installs ``agentworker[all]`` from it into a fresh virtualenv in a
temporary directory (outside the checkout, which is therefore not importable), writes a
small agent module there, starts a private redis-server, ``celery -A agentworker worker``,
``celery -A agentworker beat`` and ``uvicorn agentworker.http:app`` from that virtualenv,
starts a turn over HTTP (a signed webhook call), approves its refund over HTTP, and waits
for the worker to complete it. Everything started is stopped at the end.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.servers import RedisServer, free_port, stop_process

ROOT = Path(__file__).resolve().parents[3]
SECRET = "wheel-check-secret"
TOKEN = "wheel-check-token"

AGENTS = '''
"""The agents of the wheel check: a refund that needs approval."""

from runner_core import (
    Agent, AiMessage, FunctionModel, InMemoryAgentLoader, ModelRequest, ModelResponse,
    ToolCall, ToolMessage, tool,
)


@tool(requires_approval=True)
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


def model(request: ModelRequest) -> ModelResponse:
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    if not results:
        call = ToolCall(id="call_1", name="refund", arguments={"order_id": "1001", "amount": 5.0})
        return ModelResponse(AiMessage(tool_calls=[call]))
    return ModelResponse(AiMessage(f"done: {results[-1].content}"))


def loader() -> InMemoryAgentLoader:
    return InMemoryAgentLoader([Agent("refunds", FunctionModel(model), tools=[refund])])
'''

WHEEL_MUST_HOLD = (
    "agentworker/http/__init__.py",
    "agentworker/http/api.py",
    "agentworker/http/root.py",
    "agentworker/http/console/static/console.js",
    "agentworker/fleet/app.py",
    "agentworker/py.typed",
    "runner_core/py.typed",
    "runner_core/models/openai.py",
    "stores/py.typed",
    "stores/redis/keys.py",
    "stores/redis/lua/commit.lua",
)


def say(text: str) -> None:
    """One progress line."""
    print(f"wheel-check: {text}", flush=True)


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command; on failure print its output and stop."""
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"wheel-check: failed ({done.returncode}): {' '.join(args)}")
    return done.stdout


def build_wheel(out: Path) -> Path:
    """``pip wheel`` the checkout (isolated build, as a user's pip would)."""
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], out)
    (wheel,) = out.glob("agentworker-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [n for n in WHEEL_MUST_HOLD if n not in names]
    lua = [n for n in names if n.startswith("stores/redis/") and n.endswith(".lua")]
    stray = sorted({n.split("/")[0] for n in names} - {"agentworker", "runner_core", "stores"})
    stray = [n for n in stray if not n.endswith(".dist-info")]
    if missing or not lua or stray:
        raise SystemExit(f"wheel-check: {wheel.name}: missing {missing}, lua {lua}, stray {stray}")
    return wheel


def install(wheel: Path, venv: Path, extras: str = "[all]") -> Path:
    """A fresh virtualenv with ``agentworker{extras}`` from the wheel; returns its bin dir."""
    run([sys.executable, "-m", "venv", str(venv)], venv.parent)
    bindir = venv / "bin"
    run([str(bindir / "python"), "-m", "pip", "install", "-q", f"{wheel}{extras}"], venv.parent)
    return bindir


EMBEDDED = """
from my_agents import loader
from runner_core import AgentResumeCommand, AgentRunner
import importlib.util

runner = AgentRunner(agent_loader=loader())
turn = runner.run("refunds", "refund 1001")
turn = runner.resume(turn.id, AgentResumeCommand.approve_tool("call_1"))
assert turn.final_output == "done: refunded 5.0 on 1001", turn.final_output
fleet = [m for m in ("celery", "redis", "flower", "starlette", "openai", "typer")
         if importlib.util.find_spec(m)]
assert not fleet, f"the base install pulled in {fleet}"
print("ok")
"""


def check_base_install(wheel: Path, work: Path, app_dir: Path) -> None:
    """The bare wheel: the embedded runtime runs a turn, and no fleet comes with it."""
    bindir = install(wheel, work / "venv-base", extras="")
    run([str(bindir / "python"), "-c", EMBEDDED], app_dir, clean_env(PYTHONPATH=str(app_dir)))
    done = subprocess.run(
        [str(bindir / "agentworker"), "turns", "list"], capture_output=True, text=True
    )
    if done.returncode == 0 or "agentworker[fleet]" not in done.stderr:
        raise SystemExit(f"wheel-check: agentworker without [fleet]: {done.stderr}")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything pointing back into the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTWORKER_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    return {**env, **extra}


def check_isolated(bindir: Path, app_dir: Path) -> None:
    """The installed packages come from site-packages, not from the checkout."""
    code = "import agentworker, runner_core, stores; print(agentworker.__file__, stores.__file__)"
    where = run([str(bindir / "python"), "-c", code], app_dir, clean_env())
    if str(ROOT) in where or "site-packages" not in where:
        raise SystemExit(f"wheel-check: imported from the wrong place: {where}")


def check_worker_refuses_without_loader(bindir: Path, app_dir: Path, redis_url: str) -> None:
    """No AGENTWORKER_AGENT_LOADER: the worker exits non-zero with one line saying so."""
    env = clean_env(AGENTWORKER_REDIS_URL=redis_url)
    args = [str(bindir / "celery"), "-A", "agentworker", "worker", "--pool=solo"]
    done = subprocess.run(args, cwd=app_dir, env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stderr.splitlines() if "AGENTWORKER_AGENT_LOADER" in line]
    if done.returncode == 0 or len(lines) != 1 or "Traceback" in done.stderr:
        raise SystemExit(f"wheel-check: loader-less worker: {done.returncode}\n{done.stderr}")


@contextmanager
def processes(bindir: Path, app_dir: Path, env: dict[str, str], port: int) -> Iterator[None]:
    """Worker, beat and the HTTP app from the installed package; stopped on exit."""
    commands = {
        "worker": [
            "celery", "-A", "agentworker", "worker", "--pool=solo", "--loglevel=INFO",
            "-Q", "agentworker.steps,agentworker.sweep", "-n", "wheel@%h",
        ],
        "beat": ["celery", "-A", "agentworker", "beat", "--schedule", "beat-schedule"],
        "http": ["uvicorn", "agentworker.http:app", "--host", "127.0.0.1", "--port", str(port)],
    }  # fmt: skip
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, (program, *args) in commands.items():
            log = (app_dir / f"{name}.log").open("wb")
            started[name] = subprocess.Popen(
                [str(bindir / program), *args], cwd=app_dir, env=env, stdout=log, stderr=log
            )
        yield
    except BaseException:
        for name in started:
            sys.stderr.write(f"--- {name}.log ---\n{(app_dir / f'{name}.log').read_text()}\n")
        raise
    finally:
        for proc in started.values():
            stop_process(proc)


def call(method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """One HTTP call: writes are signed webhooks, reads carry the bearer token."""
    data = None
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if body is not None:
        # Standard Webhooks: v1,<base64 HMAC-SHA256 of "id.timestamp.body">; the signed
        # body names its method and path (docs/http.md).
        path = urllib.parse.urlsplit(url).path
        data = json.dumps({**body, "target": f"{method} {path}"}).encode()
        request_id, timestamp = uuid.uuid4().hex, str(int(time.time()))
        signed = f"{request_id}.{timestamp}.".encode() + data
        digest = hmac.new(SECRET.encode(), signed, hashlib.sha256).digest()
        headers = {
            "Content-Type": "application/json",
            "webhook-id": request_id,
            "webhook-timestamp": timestamp,
            "webhook-signature": "v1," + base64.b64encode(digest).decode(),
        }
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def wait_for(url: str, statuses: set[str], timeout: float = 60.0, what: str = "") -> dict[str, Any]:
    """Poll ``GET url`` until the turn's status is one of ``statuses``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            code, last = call("GET", url)
        except (urllib.error.URLError, ConnectionError):
            code = 0
        if code == 200 and isinstance(last, dict) and last.get("status") in statuses:
            return last
        time.sleep(0.2)
    raise SystemExit(f"wheel-check: {what or url} never reached {statuses}: {last}")


def one_turn(base: str) -> None:
    """Start a turn, approve its refund, see it completed: all over HTTP."""
    deadline = time.monotonic() + 30
    while True:  # uvicorn builds the app on import: wait until it answers
        try:
            call("GET", f"{base}/turns/none")
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise SystemExit("wheel-check: the HTTP app never answered") from None
            time.sleep(0.2)
    code, turn = call("POST", f"{base}/turns", {"agent": "refunds", "input": "refund 1001"})
    if code != 201:
        raise SystemExit(f"wheel-check: POST /turns answered {code}: {turn}")
    url = f"{base}/turns/{turn['id']}"
    waiting = wait_for(url, {"WAITING_FOR_APPROVAL"}, what="the worker's first steps")
    call_id = waiting["suspension"]["correlation_id"]
    code, resumed = call("POST", f"{url}/resume", {"command": "approve_tool", "call_id": call_id})
    if code != 200:
        raise SystemExit(f"wheel-check: resume answered {code}: {resumed}")
    done = wait_for(url, {"COMPLETED", "FAILED", "CANCELLED"}, what="the approved turn")
    if done["status"] != "COMPLETED" or done["final_output"] != "done: refunded 5.0 on 1001":
        raise SystemExit(f"wheel-check: the turn ended wrong: {done}")


def check_cli(bindir: Path, app_dir: Path, env: dict[str, str]) -> None:
    """The installed ``agentworker`` command lists the turn as JSON."""
    out = run([str(bindir / "agentworker"), "turns", "list", "--json"], app_dir, env)
    rows = json.loads(out)
    if not any(r["agent_id"] == "refunds" and r["status"] == "COMPLETED" for r in rows):
        raise SystemExit(f"wheel-check: agentworker turns list --json: {rows}")


def check_health_commands(bindir: Path, app_dir: Path, env: dict[str, str], port: int) -> None:
    """The compose healthchecks pass against the running processes."""
    worker = f"wheel@{socket.gethostname()}"
    ping = ["celery", "-A", "agentworker", "inspect", "ping", "--timeout", "10", "-d", worker]
    run([str(bindir / ping[0]), *ping[1:]], app_dir, env)
    health = [str(bindir / "python"), "-m", "agentworker.ops.health"]
    run([*health, "beat", str(app_dir / "beat-schedule")], app_dir, env)
    run([*health, "http", f"http://127.0.0.1:{port}/healthz"], app_dir, env)


def main() -> None:
    """Build, install, run, tear down."""
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="agentworker-wheel-"))
    try:
        (work / "dist").mkdir()
        wheel = build_wheel(work / "dist")
        say(f"built {wheel.name}")
        bindir = install(wheel, work / "venv")
        say(f"installed agentworker[all] into {work / 'venv'}")
        app_dir = work / "app"
        app_dir.mkdir()
        (app_dir / "my_agents.py").write_text(AGENTS)
        check_isolated(bindir, app_dir)
        check_base_install(wheel, work, app_dir)
        say("the bare wheel runs an embedded turn without the fleet's dependencies")
        server = RedisServer(work / "redis").start()
        try:
            check_worker_refuses_without_loader(bindir, app_dir, server.url)
            say("a worker without AGENTWORKER_AGENT_LOADER refuses to start, in one line")
            port = free_port()
            env = clean_env(
                PYTHONPATH=str(app_dir),
                AGENTWORKER_REDIS_URL=server.url,
                AGENTWORKER_BROKER_URL=f"redis://127.0.0.1:{server.port}/1",
                AGENTWORKER_AGENT_LOADER="my_agents:loader",
                AGENTWORKER_SWEEP_INTERVAL="0.5",
                AGENTWORKER_WEBHOOK_SECRET=SECRET,
                AGENTWORKER_API_TOKEN=TOKEN,
            )
            with processes(bindir, app_dir, env, port):
                one_turn(f"http://127.0.0.1:{port}")
                say("worker, beat and HTTP app from the wheel ran one turn (approved over HTTP)")
                check_cli(bindir, app_dir, env)
                say("agentworker turns list --json sees it")
                check_health_commands(bindir, app_dir, env, port)
                say("the compose healthchecks (inspect ping, beat schedule, HTTP) pass")
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"passed in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
