"""The ``agentworker`` command line: inspect, resume and cancel turns; sweep; the demo."""

from __future__ import annotations

import json
from typing import Annotated, Any

import redis
import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from runner_core import (
    AgentResumeCommand,
    AgentRunner,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AgentWorkerError,
)

app = typer.Typer(help="Operate agentworker turns on the configured Redis.", no_args_is_help=True)
turns = typer.Typer(help="List, inspect, follow, resume and cancel turns.", no_args_is_help=True)
app.add_typer(turns, name="turns")
console = Console()


def _runner() -> AgentRunner:
    from agentworker.runtime import make_runner

    return make_runner()


def _fail(error: Exception) -> typer.Exit:
    console.print(f"[red]error:[/] {error}")
    return typer.Exit(code=1)


@app.command()
def demo() -> None:
    """Run the offline demo (what ``make demo`` runs)."""
    from agentworker.demo import main

    main()


@app.command()
def sweep() -> None:
    """Run one sweep now: wake due retries, lost wake-ups, dead workers' turns, parents."""
    from agentworker.settings import Settings
    from agentworker.stepping import sweep_once

    report = sweep_once(_runner(), Settings().lost_wakeup_seconds)
    console.print(f"due {report.due}  lost {report.lost}  repaired {report.repaired}")


@turns.command("list")
def list_turns(
    status: Annotated[AgentTurnStatus | None, typer.Option(help="Only this status.")] = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent id.")] = None,
    conversation: Annotated[str | None, typer.Option(help="Only this conversation.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
) -> None:
    """List turns, newest first."""
    store = _runner().store
    lister = getattr(store, "list_turns", None)
    if lister is None:
        raise _fail(TypeError(f"{type(store).__name__} cannot list turns"))
    filtered = agent is not None or conversation is not None
    rows = [
        r
        for r in lister(status=status, limit=10_000 if filtered else limit)
        if (agent is None or r.agent_id == agent)
        and (conversation is None or r.conversation_id == conversation)
    ][:limit]
    table = Table()
    for column in ("turn", "agent", "status", "version", "conversation", "parent", "leased by"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r.turn_id,
            r.agent_id,
            _status(r.status),
            str(r.version),
            r.conversation_id or "",
            (r.parent_turn_id or "")[:12],
            r.lease_owner or "",
        )
    console.print(table)


def _status(status: str | AgentTurnStatus) -> str:
    s = AgentTurnStatus(status)
    color = "green" if s is AgentTurnStatus.COMPLETED else "red" if s.is_terminal else "yellow"
    return f"[{color}]{s.value}[/]"


@turns.command("show")
def show(turn_id: str) -> None:
    """A turn and its children: status, phase, usage, what it waits for."""
    runner = _runner()
    try:
        root = runner.store.load(turn_id)
    except AgentWorkerError as exc:
        raise _fail(exc) from exc
    tree = Tree(_label(root))
    _add_children(runner, tree, root.id)
    console.print(tree)
    if root.final_output:
        console.print(f"[bold]final output:[/] {root.final_output}")


def _label(s: AgentTurnSnapshot) -> str:
    label = (
        f"[bold]{s.id}[/] {s.agent_id}@{s.agent_version}  {_status(s.status.value)} "
        f"phase {s.phase.value}  steps {s.step_count}  model calls {s.iteration_count}  "
        f"tools {s.tool_call_count}  tokens {s.usage.total_tokens}  v{s.version}"
    )
    if s.suspension is not None:
        label += (
            f"\n  waits for {s.suspension.type.value}: {s.suspension.message}"
            f" [dim]({s.suspension.correlation_id or ''})[/]"
        )
    if s.terminal_reason:
        label += f"\n  reason: {s.terminal_reason}"
    return label


def _add_children(runner: AgentRunner, tree: Tree, turn_id: str) -> None:
    for child_id in runner.store.children_of(turn_id):
        child = runner.store.load(child_id)
        _add_children(runner, tree.add(_label(child)), child_id)


@turns.command("tail")
def tail(
    turn_id: str,
    after: Annotated[str, typer.Option(help="Resume after this stream id.")] = "0-0",
    timeout: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
) -> None:
    """Follow the live events of a turn's tree until its root ends."""
    from agentworker.eventstream import follow
    from agentworker.settings import Settings

    settings = Settings()
    runner = _runner()
    try:
        root_id = runner.store.load(turn_id).root_turn_id
    except AgentWorkerError as exc:
        raise _fail(exc) from exc
    client = redis.Redis.from_url(settings.redis_url)
    for stream_id, event in follow(client, settings.namespace, root_id, after, timeout):
        data = event.get("data") or {}
        detail = data.get("tool") or data.get("reason") or data.get("message") or ""
        console.print(
            f"[dim]{stream_id}[/] {event['agent_id']:<16} {event['turn_id'][:8]} "
            f"{event['type']:<24} {data.get('status', '')} {detail}",
            highlight=False,
        )


@turns.command("resume")
def resume(
    turn_id: str,
    approve: Annotated[str | None, typer.Option(help="Approve this tool call id.")] = None,
    reject: Annotated[str | None, typer.Option(help="Reject this tool call id.")] = None,
    reason: Annotated[str, typer.Option(help="Why the call is rejected.")] = "",
    input: Annotated[str | None, typer.Option("--input", help="User input: JSON or text.")] = None,
    call: Annotated[str | None, typer.Option(help="The call id the input is for.")] = None,
    retry: Annotated[bool, typer.Option("--continue", help="Run a scheduled retry now.")] = False,
    by: Annotated[str | None, typer.Option(help="Who resumes (saved as audit metadata).")] = None,
) -> None:
    """Resume a blocked turn (a worker then runs it)."""
    chosen = [x for x in (approve, reject, input, retry or None) if x]
    if len(chosen) != 1:
        raise _fail(ValueError("give exactly one of --approve, --reject, --input, --continue"))
    if approve:
        command = AgentResumeCommand.approve_tool(approve)
    elif reject:
        command = AgentResumeCommand.reject_tool(reject, reason)
    elif input is not None:
        command = AgentResumeCommand.user_input(_json_or_text(input), call)
    else:
        command = AgentResumeCommand.continue_turn()
    if by:
        command = command.with_metadata(by=by)
    try:
        turn = _runner().submit_resume(turn_id, command)
    except AgentWorkerError as exc:
        raise _fail(exc) from exc
    console.print(f"{turn.id}: {_status(turn.status.value)} (v{turn.version})")


def _json_or_text(value: str) -> str | dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return value
    return parsed if isinstance(parsed, dict) else value


@turns.command("cancel")
def cancel(turn_id: str, reason: Annotated[str | None, typer.Option()] = None) -> None:
    """Cancel a turn and its children."""
    try:
        turn = _runner().cancel(turn_id, reason)
    except AgentWorkerError as exc:
        raise _fail(exc) from exc
    console.print(
        f"{turn.id}: {_status(turn.status.value)}"
        + ("" if turn.status.is_terminal else " (cancellation requested)")
    )
