"""``make demo``: one order-support turn on the embedded defaults, printed as it happens."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from examples.orders import order_loader
from runner_core import (
    AgentEvent,
    AgentEventType,
    AgentResumeCommand,
    AgentRunner,
    AgentTurn,
    AgentTurnStatus,
    AiMessage,
    SuspensionType,
)

E = AgentEventType
_STYLE = {
    E.TURN_STARTED: "bold cyan",
    E.TURN_COMPLETED: "bold green",
    E.TURN_FAILED: "bold red",
    E.TURN_CANCELLED: "bold red",
    E.TURN_SUSPENDED: "bold yellow",
    E.TURN_RESUMED: "bold cyan",
    E.MODEL_STARTED: "blue",
    E.MODEL_COMPLETED: "blue",
    E.TOOL_STARTED: "magenta",
    E.TOOL_COMPLETED: "magenta",
    E.TOOL_FAILED: "red",
    E.TOOL_PROGRESS: "magenta",
    E.TOOL_APPROVAL_REQUESTED: "yellow",
    E.TOOL_INPUT_REQUESTED: "yellow",
    E.PLAN_CREATED: "green",
    E.TASK_STARTED: "green",
    E.TASK_COMPLETED: "green",
    E.CHILD_STARTED: "green",
    E.RETRY_SCHEDULED: "yellow",
}
_QUIET = {E.STEP_STARTED, E.STEP_COMPLETED, E.MODEL_TEXT_DELTA, E.MODEL_TOOL_CALL_DELTA}


class EventPrinter:
    """Prints each event on one line: time, turn, event, the interesting data."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.perf_counter()
        self.depth: dict[str, int] = {}

    def __call__(self, event: AgentEvent) -> None:
        """Print one event (deltas and step markers are skipped)."""
        if event.type in _QUIET:
            return
        depth = self.depth.setdefault(
            event.turn_id, self.depth.get(event.parent_turn_id or "", -1) + 1
        )
        line = Text(f"{(time.perf_counter() - self.started) * 1000:7.1f} ms  ", style="dim")
        line.append("  " * depth + f"{event.agent_id:<14}", style="bold" if depth == 0 else "")
        line.append(f" {event.type.value:<24}", style=_STYLE.get(event.type, "dim"))
        line.append(_details(event), style="dim" if event.type is E.SNAPSHOT_SAVED else "")
        self.console.print(line, overflow="ellipsis", no_wrap=True)


def _details(event: AgentEvent) -> str:
    d = event.data
    match event.type:
        case E.SNAPSHOT_SAVED:
            return f"v{d['version']} {d['status']}/{d['phase']}"
        case E.MODEL_COMPLETED:
            calls = ", ".join(d["tool_calls"]) or "final answer"
            return f"-> {calls}  ({d['input_tokens']}+{d['output_tokens']} tokens)"
        case E.TOOL_STARTED:
            return f"{d['tool']}({_args(d['arguments'])})"
        case E.TOOL_COMPLETED | E.TOOL_FAILED:
            return f"{d['tool']} -> {d.get('content') or d.get('error') or ''}"
        case E.TOOL_PROGRESS:
            return f"{d['tool']}: {d['message']}"
        case E.TOOL_APPROVAL_REQUESTED:
            return f"{d['tool']}({_args(d['arguments'])})"
        case E.TOOL_INPUT_REQUESTED | E.TURN_SUSPENDED:
            return str(d.get("message", ""))
        case E.TASK_STARTED | E.TASK_COMPLETED:
            return f"task {d['task_id']} -> child {d['child_turn_id'][:8]}"
        case E.PLAN_CREATED:
            return f"{len(d['plan']['tasks'])} task(s): {d['plan']['goal']}"
        case E.TURN_COMPLETED:
            return f"after {d['step_count']} steps"
        case _:
            return str(d.get("reason") or "")


def _args(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())


def answer_suspension(runner: AgentRunner, turn: AgentTurn, console: Console) -> AgentTurn:
    """Play the human: grant the approval or fill in the form, then resume."""
    s = turn.suspension
    assert s is not None
    if s.type is SuspensionType.TOOL_APPROVAL:
        console.print(
            Panel(
                f"[bold]{s.metadata['tool']}[/]({_args(s.metadata['arguments'])})\n"
                "[green]ops@example.com approves[/]",
                title="approval needed",
                border_style="yellow",
                expand=False,
            )
        )
        command = AgentResumeCommand.approve_tool(s.correlation_id or "")
        return runner.resume(turn.id, command.with_metadata(approver="ops@example.com"))
    if s.type is SuspensionType.USER_INPUT:
        form = {"street": "12 Roastery Lane", "city": "Portland", "zip": "97201"}
        console.print(
            Panel(
                f"{s.message}\n[green]customer submits[/] {json.dumps(form)}",
                title="form",
                border_style="yellow",
                expand=False,
            )
        )
        return runner.resume(turn.id, AgentResumeCommand.user_input(form, s.correlation_id))
    raise RuntimeError(f"the demo cannot answer {s.type.value}")


def summary(console: Console, runner: AgentRunner, turn: AgentTurn) -> None:
    """The final turn: answer, counters, and the message history."""
    table = Table(title="history", show_lines=False, expand=True)
    table.add_column("#", justify="right", style="dim")
    table.add_column("role")
    table.add_column("content", overflow="fold")
    for i, m in enumerate(turn.messages, 1):
        content = getattr(m, "content", None) or getattr(m, "text", None) or ""
        if isinstance(m, AiMessage) and m.tool_calls:
            content = "calls " + ", ".join(c.name for c in m.tool_calls)
        table.add_row(str(i), m.role, str(content)[:160])
    console.print(table)
    children = runner.store.children_of(turn.id)
    stats = (
        f"status [bold]{turn.status.value}[/]  steps {turn.step_count}  model calls "
        f"{turn.iteration_count}  tool calls {turn.tool_call_count}  tokens "
        f"{turn.total_tokens} (children included)  child turns {len(children)}  "
        f"stored version {turn.version}"
    )
    console.print(
        Panel(f"{turn.final_output}\n\n[dim]{stats}[/]", title="final answer", border_style="green")
    )


def main() -> None:
    """Run the demo."""
    console = Console()
    runner = AgentRunner(agent_loader=order_loader())
    runner.add_event_listener(EventPrinter(console))
    console.rule("[bold]agentworker demo[/] · order support on the embedded runner")
    turn = runner.run(
        "order-support",
        "My espresso machine from order 1001 arrived with a "
        "cracked water tank. Refund me and send a new one, please.",
    )
    while turn.status.is_blocked and turn.status is not AgentTurnStatus.RETRY_SCHEDULED:
        turn = answer_suspension(runner, turn, console)
    console.rule()
    summary(console, runner, turn)


if __name__ == "__main__":
    main()
