"""``make demo-fleet KEEP=1``: a fleet left running with turns waiting, and what to do next.

Runs ``python -m examples.fleet --keep`` as a person would, follows the printed commands
with the installed CLI, then stops the fleet with the printed ``kill`` line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import ROOT

pytestmark = pytest.mark.redis


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_keep_leaves_a_fleet_with_waiting_turns_and_says_how_to_stop_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTWORKER_")}
    env["COLUMNS"] = "200"
    done = subprocess.run(
        [sys.executable, "-m", "examples.fleet", "--keep", "--turns", "2", "--timeout", "60"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    pids_file = Path(re.search(r"kill \$\(cat (\S+)\)", out).group(1))  # type: ignore[union-attr]
    pids = [int(p) for p in pids_file.read_text().split()]
    try:
        assert "The fleet keeps running" in out and len(pids) == 4  # 2 workers, beat, redis
        assert all(alive(p) for p in pids)
        # The printed environment and commands work as printed
        exports = dict(re.findall(r"(AGENTWORKER_[A-Z_]+)=(\S+)", out))
        cli_env = {**env, **exports, "PYTHONPATH": str(ROOT)}
        agentworker = str(Path(sys.executable).with_name("agentworker"))
        listed = subprocess.run(
            [agentworker, "turns", "list", "--status", "waiting_for_approval", "--json"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        rows = json.loads(listed.stdout)
        assert len(rows) == 2, listed.stderr
        printed = re.search(r"agentworker turns resume (\w+) --approve call_refund", out)
        assert printed and printed.group(1) in {r["id"] for r in rows}
        turn_id = printed.group(1)
        resumed = subprocess.run(
            [agentworker, "turns", "resume", turn_id, "--approve", "call_refund", "--by", "t"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert resumed.returncode == 0, resumed.stderr
    finally:
        # The printed way to stop it
        subprocess.run(f"kill $(cat {pids_file})", shell=True, check=True)
    deadline = time.monotonic() + 15
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)
