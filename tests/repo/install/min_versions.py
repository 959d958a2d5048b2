"""``make test-min``: the suites of make test (not browser, concurrency) at the floors.

Builds ``.venv-min`` (once per pyproject.toml change) with every runtime dependency pinned
to its floor (``floors.py``) and the test tools unpinned, then runs pytest from it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from tests.repo.install.floors import floors

ROOT = Path(__file__).resolve().parents[3]
VENV = ROOT / ".venv-min"
# standardwebhooks: the reference library the HTTP and webhook tests verify signatures with.
TEST_TOOLS = ["pytest", "pytest-timeout", "hypothesis", "pyyaml", "httpx", "standardwebhooks"]
# What make test runs but the browser test (no playwright here), concurrency and chaos.
SUITES = [
    "tests/core",
    "tests/stores",
    "tests/fleet",
    "tests/http",
    "--ignore=tests/http/browser",
    "tests/repo",
    "tests/e2e",
    "tests/cluster",
]


# The [mcp] extra's floor (mcp 2.0) needs pydantic 2.12 and uvicorn 0.31.1, above the base
# floors, and PyJWT 2.10, which redis 5.3 refuses (it pins PyJWT 2.9): it is tested in a
# venv of its own with every extra, mcp and those two at their floors, the rest left to the
# resolver, running the MCP suites and the README.
MCP_VENV = ROOT / ".venv-min-mcp"
MCP_EXTRAS = "all"
MCP_RAISED = {"pydantic": "2.12.0", "uvicorn": "0.31.1"}
MCP_SUITES = ["tests/mcp", "tests/repo/test_readme.py"]


def extras_but_mcp(pyproject: Path) -> str:
    """Every extra of the project but ``mcp``, ``all`` and ``dev``, comma-separated."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    return ",".join(e for e in extras if e not in ("mcp", "all", "dev"))


def build(venv: Path, extras: str, pins: dict[str, str]) -> Path:
    """The venv's python, (re)installed when pyproject.toml is newer than its stamp."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    pyproject = ROOT / "pyproject.toml"
    if stamp.exists() and stamp.stat().st_mtime >= pyproject.stat().st_mtime:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    venv.mkdir(exist_ok=True)
    constraints = venv / "constraints.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    print(f"test-min: installing the floors: {', '.join(f'{n}=={v}' for n, v in pins.items())}")
    install = [str(python), "-m", "pip", "install", "-q", "-c", str(constraints)]
    subprocess.run([*install, "-e", f"{ROOT}[{extras}]", *TEST_TOOLS], check=True, cwd=ROOT)
    stamp.touch()
    return python


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (pip prints some with underscores)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def check_pins(python: Path, pins: dict[str, str]) -> None:
    """Stop unless every pinned distribution is installed at its pin."""
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout.lower()
    installed = {
        canonical(name): version
        for name, version in (line.split("==", 1) for line in listing.split() if "==" in line)
    }
    wrong = {
        n: installed.get(canonical(n))
        for n, v in pins.items()
        if installed.get(canonical(n), "").split("+")[0] not in (v, v + ".0", v + ".0.0")
    }
    if wrong:
        raise SystemExit(f"test-min: not at the floor: {wrong}")


def main() -> None:
    """Install if needed, check the pins took, run the suites; then the [mcp] floor's."""
    started = time.monotonic()
    pyproject = ROOT / "pyproject.toml"
    everything = floors(pyproject)
    pins = {n: v for n, v in everything.items() if n != "mcp"}
    python = build(VENV, extras_but_mcp(pyproject), pins)
    check_pins(python, pins)
    args = [str(python), "-m", "pytest", *SUITES, "-p", "no:cacheprovider", *sys.argv[1:]]
    code = subprocess.run(args, cwd=ROOT).returncode
    mcp_pins = {"mcp": everything["mcp"], **MCP_RAISED}
    python = build(MCP_VENV, MCP_EXTRAS, mcp_pins)
    check_pins(python, mcp_pins)
    args = [str(python), "-m", "pytest", *MCP_SUITES, "-p", "no:cacheprovider", *sys.argv[1:]]
    code = code or subprocess.run(args, cwd=ROOT).returncode
    print(f"test-min: {time.monotonic() - started:.0f} s")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
