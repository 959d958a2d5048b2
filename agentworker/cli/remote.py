"""``agentworker http ...``: the inbox and its answers through the HTTP API, not Redis.

For operators who hold an API token but no access to Redis: the same credentials and tenant
rules as the console (docs/http.md). Uses ``agentworker.client``. ``--url`` and ``--token``
default to ``AGENTWORKER_API_URL`` and ``AGENTWORKER_API_TOKEN``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

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


def _calls(turn: TurnView) -> list[dict[str, Any]]:
    """The calls a turn waiting for approval has not had answered yet."""
    return list((turn.suspension or {}).get("waiting_calls") or [])


def _rows(turn: TurnView) -> list[tuple[str, str]]:
    """(call id, what) per waiting call: a turn waiting on three approvals is three rows."""
    suspension = turn.suspension or {}
    if turn.status == "WAITING_FOR_APPROVAL":
        return [
            (str(c.get("call_id")), f"{c.get('tool')}({json.dumps(c.get('arguments', {}))})")
            for c in _calls(turn)
        ]
    metadata = suspension.get("metadata", {})
    what = f"{metadata.get('tool')}: {suspension.get('message', '')}"
    return [(str(suspension.get("correlation_id") or ""), what)]


@remote.command("inbox")
@_one_line
def inbox(
    url: Url = "http://127.0.0.1:8000",
    token: Token = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """What waits for a person: turn, agent, each call id with its tool and arguments."""
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
        for call, what in _rows(t):
            table.add_row(t.id, t.agent_id, t.status, call, escape(what))
    console.print(table)


CallIds = Annotated[
    list[str] | None, typer.Argument(help="The call ids to answer (see inbox).", show_default=False)
]


def _chosen(client: AgentworkerClient, turn_id: str, call_ids: list[str], every: bool) -> list[str]:
    """The call ids named, or with ``--all`` every call the turn still waits on."""
    if every == bool(call_ids):
        errors.print("error: name the call ids or give --all (not both)")
        raise typer.Exit(2)
    if not every:
        return call_ids
    turn = client.get(turn_id)
    if not (waiting := [str(c["call_id"]) for c in _calls(turn)]):
        errors.print(f"error: turn {turn_id} waits on no tool call ({turn.status})")
        raise typer.Exit(1)
    return waiting


def _done(turn: TurnView) -> None:
    left = ", ".join(str(c.get("call_id")) for c in _calls(turn))
    console.print(f"{turn.id}: {turn.status}" + (f" (still waiting on {left})" if left else ""))


@remote.command("approve")
@_one_line
def approve(
    turn_id: str,
    call_ids: CallIds = None,
    every: Annotated[bool, typer.Option("--all", help="Every call still waiting.")] = False,
    reason: Annotated[str, typer.Option(help="Saved on the turn's resume log.")] = "",
    url: Url = "http://127.0.0.1:8000",
    token: Token = "",
) -> None:
    """Approve waiting tool calls: one, several, or --all (the others keep it waiting)."""
    client = AgentworkerClient(url, token=token)
    chosen = _chosen(client, turn_id, call_ids or [], every)
    if len(chosen) == 1 and not every:
        _done(client.approve(turn_id, chosen[0], reason))
    else:
        _done(client.approve_tools(turn_id, chosen))


@remote.command("reject")
@_one_line
def reject(
    turn_id: str,
    reason: Annotated[str, typer.Option(help="Told to the model.")],
    call_ids: CallIds = None,
    every: Annotated[bool, typer.Option("--all", help="Every call still waiting.")] = False,
    url: Url = "http://127.0.0.1:8000",
    token: Token = "",
) -> None:
    """Reject waiting tool calls (one, several, or --all), telling the model why."""
    client = AgentworkerClient(url, token=token)
    chosen = _chosen(client, turn_id, call_ids or [], every)
    if len(chosen) == 1 and not every:
        _done(client.reject(turn_id, chosen[0], reason))
    else:
        _done(client.reject_tools(turn_id, dict.fromkeys(chosen, reason)))


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
