"""Old module paths of earlier releases still import: the same module, with a warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import importlib, sys, warnings
import agentworker, runner_core
moved = {**runner_core.MOVED, **agentworker.MOVED}
for old, new in moved.items():
    assert old not in sys.modules, old
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new), (old, new)
    assert any(new in str(w.message) and w.category is DeprecationWarning for w in caught), old
print(len(moved))
"""


def test_every_old_path_is_the_new_module_and_says_where_it_went() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 20


def test_python_dash_m_runs_a_moved_module() -> None:
    # the compose files of earlier releases run the health check by its old path
    old = subprocess.run(
        [sys.executable, "-m", "agentworker.health"], cwd=ROOT, capture_output=True, text=True
    )
    new = subprocess.run(
        [sys.executable, "-m", "agentworker.ops.health"], cwd=ROOT, capture_output=True, text=True
    )
    assert old.returncode == new.returncode != 0
    assert "usage: python -m agentworker.ops.health" in old.stderr + old.stdout
