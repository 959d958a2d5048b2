"""``agentworker http ...``: the inbox and its answers through the HTTP API, not Redis.

For operators who hold an API token but no access to Redis: the same credentials and tenant
rules as the console (docs/http.md). Uses ``agentworker.client``. ``--url`` and ``--token``
default to ``AGENTWORKER_API_URL`` and ``AGENTWORKER_API_TOKEN``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentworker.client import AgentworkerClient, HttpApiError, TurnView

remote = typer.Typer(
    help="The inbox and its answers through the HTTP API (a token, no Redis).",
    no_args_is_help=True,
)
console = Console()
errors = Console(stderr=True)

Url = Annotated[str, typer.Option(envvar="AGENTWORKER_API_URL", help="The HTTP API's URL.")]
Token = Annotated[str, typer.Option(envvar="AGENTWORKER_API_TOKEN", help="An API token.")]
P = ParamSpec("P")
R = TypeVar("R")
WAITING = ("WAITING_FOR_APPROVAL", "WAITING_FOR_USER")


def _one_line(command: Callable[P, R]) -> Callable[P, R]:
    """An API error or an unreachable server: one line on stderr, exit status 1."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except HttpApiError as exc:
            errors.print(f"error: {escape(exc.message)} (HTTP {exc.status} {exc.type})")
            raise typer.Exit(1) from None
        except OSError as exc:
            errors.print(f"error: the HTTP API does not answer: {escape(str(exc))}")
            raise typer.Exit(1) from None

    return wrapper


def _what(turn: TurnView) -> str:
    metadata = (turn.suspension or {}).get("metadata", {})
    if turn.status == "WAITING_FOR_APPROVAL":
        return f"{metadata.get('tool')}({json.dumps(metadata.get('arguments', {}))})"
    return f"{metadata.get('tool')}: {(turn.suspension or {}).get('message', '')}"


@remote.command("inbox")
@_one_line
def inbox(
    url: Url = "http://127.0.0.1:8000",
    token: Token = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """What waits for a person: turn, agent, call id, tool and arguments (or the prompt)."""
    client = AgentworkerClient(url, token=token)
    waiting = [t for status in WAITING for t in client.iter_turns(status=status)]
    if as_json:
        print(json.dumps([t.model_dump(mode="json") for t in waiting], indent=2))
        return
    table = Table()
    table.add_column("turn", no_wrap=True)  # a whole id, to paste into approve
    for name in ("agent", "waits for", "call", "what"):
        table.add_column(name)
    for t in waiting:
        call = (t.suspension or {}).get("correlation_id", "")
        table.add_row(t.id, t.agent_id, t.status, call, escape(_what(t)))
    console.print(table)


@remote.command("approve")
@_one_line
def approve(
    turn_id: str,
    call_id: str,
    reason: Annotated[str, typer.Option(help="Saved on the turn's resume log.")] = "",
    url: Url = "http://127.0.0.1:8000",
    token: Token = "",
) -> None:
    """Approve the waiting tool call."""
    turn = AgentworkerClient(url, token=token).approve(turn_id, call_id, reason)
    console.print(f"{turn.id}: {turn.status}")


@remote.command("reject")
@_one_line
def reject(
    turn_id: str,
    call_id: str,
    reason: Annotated[str, typer.Option(help="Told to the model.")],
    url: Url = "http://127.0.0.1:8000",
    token: Token = "",
) -> None:
    """Reject the waiting tool call, telling the model why."""
    turn = AgentworkerClient(url, token=token).reject(turn_id, call_id, reason)
    console.print(f"{turn.id}: {turn.status}")


@remote.command("wait")
@_one_line
def wait(
    turn_id: str,
    until: Annotated[str, typer.Option(help="blocked or ended")] = "blocked",
    timeout: Annotated[float, typer.Option(min=0, max=60)] = 30.0,
    url: Url = "http://127.0.0.1:8000",
    token: Token = "",
) -> None:
    """Wait until the turn blocks (or ends); print its status."""
    turn = AgentworkerClient(url, token=token).wait(turn_id, until, timeout)
    console.print(f"{turn.id}: {turn.status}")
