"""The Makefile checks Python >= 3.11 first, and never reuses a broken .venv."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def fake_python(path: Path, version: str) -> Path:
    """A 'python' that reports ``version`` and fails the version check like it would."""
    ok = tuple(int(p) for p in version.split(".")[:2]) >= (3, 11)
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-V" ]; then echo "Python {version}"; exit 0; fi\n'
        f"exit {0 if ok else 1}\n"
    )
    path.chmod(0o755)
    return path


def make(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=tmp_path, capture_output=True, text=True
    )


def test_an_old_python_is_refused_with_what_to_do(tmp_path: Path) -> None:
    python = fake_python(tmp_path / "python3.10", "3.10.12")
    done = make(tmp_path, f"PYTHON={python}", "demo")
    assert done.returncode != 0
    assert "agentworker needs Python >= 3.11" in done.stdout
    assert "3.10.12" in done.stdout and "make PYTHON=python3.11" in done.stdout
    assert not (tmp_path / ".venv").exists()


def test_a_missing_python_is_refused(tmp_path: Path) -> None:
    done = make(tmp_path, "PYTHON=no-such-python3", "test")
    assert done.returncode != 0 and "no-such-python3 not found" in done.stdout


def test_a_broken_venv_is_removed_not_reused(tmp_path: Path) -> None:
    # Given a .venv whose python is older than 3.11 (or broken)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    fake_python(tmp_path / ".venv" / "bin" / "python", "3.10.12")
    (tmp_path / ".venv" / ".installed").touch()
    # When make reads the Makefile (any target)
    done = make(tmp_path, "help")
    # Then it says so and the .venv is gone, to be rebuilt
    assert ".venv is broken or older than Python 3.11: rebuilding it." in done.stdout
    assert not (tmp_path / ".venv").exists()


def test_a_good_venv_is_kept(tmp_path: Path) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    fake_python(tmp_path / ".venv" / "bin" / "python", "3.12.1")
    done = make(tmp_path, "help")
    assert done.returncode == 0 and "rebuilding" not in done.stdout
    assert (tmp_path / ".venv" / "bin" / "python").exists()


def test_help_lists_the_fast_run_next_to_the_full_one(tmp_path: Path) -> None:
    done = make(tmp_path, "help")
    listed = {line.split("\t")[0] for line in done.stdout.splitlines()}
    assert {"test", "test-fast"} <= listed


def test_the_full_run_shares_modules_between_xdist_workers(tmp_path: Path) -> None:
    # -n: a dry run, nothing is installed or started; the recipe is what CI runs.
    (tmp_path / "pyproject.toml").touch()
    done = make(tmp_path, "-n", "test", "WORKERS=3")
    assert "-m pytest -n 3 --dist loadgroup" in done.stdout


def test_the_fast_run_selects_in_process_tests_only(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").touch()
    done = make(tmp_path, "-n", "test-fast")
    recipe = next(line for line in done.stdout.splitlines() if "-m pytest" in line)
    argv = recipe.split("-m pytest", 1)[1].split()
    # When pytest collects what the recipe names
    collected = subprocess.run(
        # pyproject's addopts already has -q: one -q prints the test ids
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    # Then it has the core suite and the memory store's contract runs, and no Redis run
    assert any(i.startswith("tests/core/") for i in ids)
    assert any(i.startswith("tests/stores/") and "[memory" in i for i in ids)
    assert any(i.startswith("tests/repo/") for i in ids)
    params = [i.partition("[")[2] for i in ids]
    assert not [p for p in params if "redis" in p or "cluster" in p]
    assert not [i for i in ids if i.startswith("tests/stores/") and "[memory" not in i]
