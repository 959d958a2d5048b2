"""The ``agentworker`` command: the CLI, or one line saying which extra it needs."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the CLI; without the ``[fleet]`` extra, say how to install it."""
    try:
        from agentworker.cli.commands import app
    except ModuleNotFoundError as exc:
        sys.exit(
            f"agentworker: the command line needs the fleet extra "
            f"(pip install 'agentworker[fleet]'): {exc}"
        )
    app()
