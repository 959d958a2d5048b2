"""pyproject.toml: every runtime dependency has a floor that test-min pins; extras hold.

The wheel itself is checked by ``make wheel-check`` (tests/install/wheel_check.py).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.repo.install.floors import floors

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = re.compile(r"^([A-Za-z0-9_.-]+)")


def runtime_requirements() -> list[str]:
    extras = PROJECT["optional-dependencies"]
    return PROJECT["dependencies"] + [r for e, rs in extras.items() if e != "dev" for r in rs]


def test_every_runtime_dependency_has_a_floor_that_test_min_pins() -> None:
    pinned = floors(ROOT / "pyproject.toml")
    for requirement in runtime_requirements():
        name = NAME.match(requirement).group(1).lower()  # type: ignore[union-attr]
        if name == PROJECT["name"]:
            continue  # an extra naming other extras
        assert ">=" in requirement, f"{requirement}: no floor"
        assert name in pinned, f"{requirement}: not pinned by test-min"


def test_the_base_install_is_the_embedded_runtime() -> None:
    base = {NAME.match(r).group(1).lower() for r in PROJECT["dependencies"]}  # type: ignore[union-attr]
    assert base == {"pydantic", "tenacity"}


def test_the_extras_compose() -> None:
    extras = PROJECT["optional-dependencies"]
    assert {"redis", "fleet", "http", "openai", "anthropic", "all", "dev"} <= set(extras)
    assert any(r.startswith("celery[redis]") for r in extras["fleet"])
    assert "agentworker[redis]" in extras["fleet"] and "agentworker[fleet]" in extras["http"]
    assert extras["all"] == ["agentworker[redis,fleet,http,openai,anthropic,otel,metrics,mcp]"]
    # httpx is used by tests only
    assert not any(r.startswith("httpx") for r in runtime_requirements())


def test_the_redis_floor_has_the_class_the_store_imports() -> None:
    # stores/redis/connection.py imports ExponentialWithJitterBackoff, new in redis 5.3.
    source = (ROOT / "stores/redis/connection.py").read_text()
    if "ExponentialWithJitterBackoff" in source:
        floor = tuple(int(p) for p in floors(ROOT / "pyproject.toml")["redis"].split("."))
        assert floor >= (5, 3)


def test_packages_are_found_automatically_and_typed() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "packages" not in setuptools or "find" in setuptools["packages"]
    for package in ("runner_core", "stores", "agentworker"):
        assert (ROOT / package / "py.typed").is_file(), package
