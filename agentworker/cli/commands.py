"""The ``agentworker`` command line: start, inspect, follow, resume and cancel turns; sweep.

Every command reads ``AGENTWORKER_*`` like the workers do. Exit status: 0 done, 1 an error
(one line on stderr: Redis down, unknown turn, a refused resume, bad settings), 2 a usage
error, 3 nothing to do (the turn had already ended, or the resume changed nothing).
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

import redis
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from agentworker.cli.remote import remote
from agentworker.cli.views import (
    WIDE_COLUMNS,
    status_markup,
    summary_json,
    transcript_text,
    turn_json,
    turn_label,
    turns_table,
)
from runner_core import (
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AgentWorkerError,
)
from runner_core.resume import waiting_calls

app = typer.Typer(help="Operate agentworker turns on the configured Redis.", no_args_is_help=True)
turns = typer.Typer(
    help="Start, list, inspect, follow, resume and cancel turns.", no_args_is_help=True
)
app.add_typer(turns, name="turns")
app.add_typer(remote, name="http")
console = Console()
errors = Console(stderr=True)

NOTHING_TO_DO = 3

P = ParamSpec("P")
R = TypeVar("R")


def one_line_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the errors an operator can meet into one line on stderr and exit status 1."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except (AgentWorkerError, redis.RedisError, OSError) as exc:
            raise fail(str(exc) or type(exc).__name__) from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "settings"
            raise fail(f"invalid setting {where}: {first['msg']}") from None

    return wrapper


class OneLineLog(logging.Handler):
    """Warnings of the runner (a wake-up that could not be sent) as one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        """``warning: message (cause)``, never a traceback."""
        cause = record.exc_info[1] if record.exc_info else None
        sys.stderr.write(
            f"warning: {record.getMessage()}" + (f" ({cause})" if cause else "") + "\n"
        )


@app.callback()
def _setup() -> None:
    root = logging.getLogger()
    if not root.handlers:  # a command-line process; an embedding one keeps its logging
        root.addHandler(OneLineLog(logging.WARNING))


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` (one line, stderr) and return the exit to raise."""
    errors.print(f"[red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code=code)


def nothing_to_do(message: str) -> typer.Exit:
    """Print ``nothing to do: message`` and return exit status 3."""
    console.print(f"[yellow]nothing to do:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code=NOTHING_TO_DO)


def _runner(require_agents: bool = False) -> AgentRunner:
    """A runner on the configured Redis; agents are loaded only by commands that need them."""
    from agentworker.wiring import make_runner

    return make_runner(require_agents=require_agents)


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


@app.command()
@one_line_errors
def sweep() -> None:
    """Run one sweep now: wake due retries, lost wake-ups, dead workers' turns, parents."""
    from agentworker.settings import Settings
    from agentworker.wiring import sweep_once

    report = sweep_once(_runner(), Settings().lost_wakeup_seconds)
    console.print(f"due {report.due}  lost {report.lost}  repaired {report.repaired}")


@turns.command("start")
@one_line_errors
def start(
    agent: Annotated[str, typer.Argument(help="The agent id (from AGENTWORKER_AGENT_LOADER).")],
    input: Annotated[str, typer.Argument(help="The user's input.")],  # noqa: A002
    conversation: Annotated[str | None, typer.Option(help="Conversation id.")] = None,
    metadata: Annotated[str | None, typer.Option(help="Turn metadata, a JSON object.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the turn as JSON.")] = False,
) -> None:
    """Start a turn; a worker runs it (needs AGENTWORKER_AGENT_LOADER, like the workers)."""
    meta = _json_object(metadata, "--metadata") if metadata else {}
    turn = _runner(require_agents=True).start(
        agent, input, conversation_id=conversation, options=AgentTurnOptions(metadata=meta)
    )
    if as_json:
        _print_json(turn_json(turn.state, []))
    else:
        console.print(f"{turn.id}: {status_markup(turn.status)} (v{turn.state.version})")


@turns.command("list")
@one_line_errors
def list_turns(
    status: Annotated[
        AgentTurnStatus | None,
        typer.Option(case_sensitive=False, help="Only this status (any case)."),
    ] = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent id.")] = None,
    conversation: Annotated[str | None, typer.Option(help="Only this conversation.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    wide: Annotated[
        bool, typer.Option("--wide", help="Every column and whole ids (else: fits 80 columns).")
    ] = False,
) -> None:
    """List turns, newest first, with their times and what the blocked ones wait for."""
    store = _runner().store
    lister = getattr(store, "list_turns", None)
    if lister is None:
        raise fail(f"{type(store).__name__} cannot list turns")
    filtered = agent is not None or conversation is not None
    rows = [
        r
        for r in lister(status=status, limit=10_000 if filtered else limit)
        if (agent is None or r.agent_id == agent)
        and (conversation is None or r.conversation_id == conversation)
    ][:limit]
    # One extra read per blocked turn, for what it waits for.
    with_snapshots = [
        (r, store.load(r.turn_id) if AgentTurnStatus(r.status).is_blocked else None) for r in rows
    ]
    if as_json:
        _print_json([summary_json(r, s) for r, s in with_snapshots])
    else:
        console.print(turns_table(with_snapshots, wide or console.width >= WIDE_COLUMNS))


@turns.command("quarantined")
@one_line_errors
def quarantined(
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """Turns whose stored record could not be read: moved aside, never woken again."""
    found = _runner().store.quarantined(limit)
    rows = [{"turn_id": t, "reason": r, "at": at} for t, r, at in found]
    if as_json:
        _print_json(rows)
        return
    if not rows:
        console.print("no quarantined turns")
    for row in rows:
        console.print(f"{row['turn_id']}  {escape(str(row['reason']))}")


@turns.command("show")
@one_line_errors
def show(
    turn_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tree as JSON.")] = False,
    transcript: Annotated[
        bool, typer.Option(help="Print the turn's messages, as the console shows them.")
    ] = True,
) -> None:
    """A turn and its children (status, phase, usage, times, what it waits for); its messages."""
    runner = _runner()
    root = runner.store.load(turn_id)
    if as_json:
        _print_json(_tree_json(runner, root))
        return
    tree = Tree(turn_label(root))
    _add_children(runner, tree, root.id)
    console.print(tree)
    if transcript:
        console.print("[bold]transcript:[/]")
        console.print(transcript_text(root, _instructions(runner, root)), soft_wrap=True)
    if root.final_output:
        console.print(f"[bold]final output:[/] {escape(root.final_output)}")


def _instructions(runner: AgentRunner, s: AgentTurnSnapshot) -> str:
    """The agent's system instructions, when this process can load the agent."""
    try:
        return runner.loader.load(s.agent_id, s.agent_version).instructions
    except AgentWorkerError:
        return ""


def _tree_json(runner: AgentRunner, s: AgentTurnSnapshot) -> dict[str, Any]:
    children = [_tree_json(runner, runner.store.load(c)) for c in runner.store.children_of(s.id)]
    return turn_json(s, children)


def _add_children(runner: AgentRunner, tree: Tree, turn_id: str) -> None:
    for child_id in runner.store.children_of(turn_id):
        child = runner.store.load(child_id)
        _add_children(runner, tree.add(turn_label(child)), child_id)


@turns.command("tail")
@one_line_errors
def tail(
    turn_id: str,
    after: Annotated[str, typer.Option(help="Resume after this stream id.")] = "0-0",
    timeout: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
) -> None:
    """Follow the live events of a turn's tree until its root ends."""
    from agentworker.notify.streams import follow
    from agentworker.settings import Settings
    from stores.redis import make_client

    settings = Settings()
    root_id = _runner().store.load(turn_id).root_turn_id
    client = make_client(settings.redis_url)
    for stream_id, event in follow(client, settings.namespace, root_id, after, timeout):
        data = event.get("data") or {}
        detail = data.get("tool") or data.get("reason") or data.get("message") or ""
        console.print(
            f"[dim]{stream_id}[/] {event['agent_id']:<16} {event['turn_id'][:8]} "
            f"{event['type']:<24} {data.get('status', '')} {escape(str(detail))}",
            highlight=False,
        )


@turns.command("resume")
@one_line_errors
def resume(
    turn_id: str,
    approve: Annotated[
        list[str] | None, typer.Option(help="Approve this tool call id (repeatable).")
    ] = None,
    reject: Annotated[
        list[str] | None, typer.Option(help="Reject this tool call id (repeatable).")
    ] = None,
    approve_all: Annotated[
        bool, typer.Option("--approve-all", help="Approve every call the turn waits on.")
    ] = False,
    reason: Annotated[str, typer.Option(help="Why the calls are rejected.")] = "",
    input: Annotated[str | None, typer.Option("--input", help="User input: JSON or text.")] = None,  # noqa: A002
    call: Annotated[str | None, typer.Option(help="The call id the input is for.")] = None,
    retry: Annotated[bool, typer.Option("--continue", help="Run a scheduled retry now.")] = False,
    by: Annotated[str | None, typer.Option(help="Who resumes (saved as audit metadata).")] = None,
) -> None:
    """Resume a blocked turn (a worker then runs it); calls left unanswered keep it waiting."""
    chosen = [x for x in (approve, reject, approve_all or None, input, retry or None) if x]
    if len(chosen) != 1:
        raise fail("give exactly one of --approve, --reject, --approve-all, --input, --continue")
    runner = _runner()
    before = runner.store.load(turn_id)
    if before.status.is_terminal:
        raise nothing_to_do(f"turn {turn_id} already ended ({before.status.value})")
    command = _resume_command(before, approve, reject, approve_all, reason, input, call)
    if by:
        command = command.with_metadata(by=by)
    turn = runner.submit_resume(turn_id, command)
    if turn.id == before.id and turn.state.version == before.version:
        raise nothing_to_do(f"turn {turn_id} is {turn.status.value}; the resume changed nothing")
    left = ", ".join(c["call_id"] for c in waiting_calls(turn.state))
    console.print(
        f"{turn.id}: {status_markup(turn.status)} (v{turn.state.version})"
        + (f" still waiting on {escape(left)}" if left else "")
    )


def _resume_command(
    before: AgentTurnSnapshot,
    approve: list[str] | None,
    reject: list[str] | None,
    approve_all: bool,
    reason: str,
    input: str | None,  # noqa: A002
    call: str | None,
) -> AgentResumeCommand:
    """The command the options of ``turns resume`` ask for (one of them is given)."""
    if approve_all:
        waiting = [c["call_id"] for c in waiting_calls(before)]
        if not waiting:
            raise fail(f"turn {before.id} waits on no tool call ({before.status.value})")
        return AgentResumeCommand.approve_tools(waiting)
    if approve:
        if len(approve) == 1:
            return AgentResumeCommand.approve_tool(approve[0])
        return AgentResumeCommand.approve_tools(approve)
    if reject:
        if len(reject) == 1:
            return AgentResumeCommand.reject_tool(reject[0], reason)
        return AgentResumeCommand.reject_tools(dict.fromkeys(reject, reason))
    if input is not None:
        return AgentResumeCommand.user_input(_json_or_text(input), call)
    return AgentResumeCommand.continue_turn()


def _json_or_text(value: str) -> str | dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return value
    except RecursionError:
        raise fail("the input is not JSON here: it nests too deeply") from None
    return parsed if isinstance(parsed, dict) else value


def _json_object(value: str, option: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise fail(f"{option} is not JSON: {exc}") from None
    except RecursionError:
        raise fail(f"{option} is not JSON here: it nests too deeply") from None
    if not isinstance(parsed, dict):
        raise fail(f"{option} must be a JSON object")
    return parsed


@turns.command("cancel")
@one_line_errors
def cancel(turn_id: str, reason: Annotated[str | None, typer.Option()] = None) -> None:
    """Cancel a turn and its children."""
    runner = _runner()
    before = runner.store.load(turn_id)
    if before.status.is_terminal:
        raise nothing_to_do(f"turn {turn_id} already ended ({before.status.value})")
    if before.cancel_requested:
        raise nothing_to_do(f"turn {turn_id}: cancellation was already requested")
    turn = runner.cancel(turn_id, reason)
    console.print(
        f"{turn.id}: {status_markup(turn.status)}"
        + ("" if turn.status.is_terminal else " (cancellation requested)")
    )
