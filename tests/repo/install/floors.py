"""Print pip constraints pinning every runtime dependency to its declared floor.

``make test-min`` installs with these constraints, so the floors in pyproject.toml are the
versions the tests actually ran against (dev tools are left free).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

FLOOR = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def floors(pyproject: Path) -> dict[str, str]:
    """``{distribution: lowest version}`` of the base and every extra except ``dev``."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra, extra_requirements in project["optional-dependencies"].items():
        if extra != "dev":
            requirements.extend(extra_requirements)
    found: dict[str, str] = {}
    for requirement in requirements:
        match = FLOOR.match(requirement)
        if match and match.group(1) != project["name"]:
            found[match.group(1).lower()] = match.group(2)
    return found


def main() -> None:
    """Write ``name==version`` lines to stdout."""
    root = Path(__file__).resolve().parents[3]
    for name, version in sorted(floors(root / "pyproject.toml").items()):
        sys.stdout.write(f"{name}=={version}\n")


if __name__ == "__main__":
    main()
