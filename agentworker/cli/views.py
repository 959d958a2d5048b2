"""What the CLI prints: tables and trees for people, plain JSON shapes for scripts."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from agentworker.ops.transcript import as_text, entries
from runner_core import AgentTurnSnapshot, AgentTurnStatus, SuspensionType
from runner_core.resume import waiting_calls
from stores.redis import TurnSummary


def status_markup(status: str | AgentTurnStatus) -> str:
    """The status in green (completed), red (other ends) or yellow (live)."""
    s = AgentTurnStatus(status)
    color = "green" if s is AgentTurnStatus.COMPLETED else "red" if s.is_terminal else "yellow"
    return f"[{color}]{s.value}[/]"


def clock(timestamp: float | None) -> str:
    """Local time; with the date when it is not today."""
    if timestamp is None:
        return ""
    when = datetime.fromtimestamp(timestamp)
    today = datetime.fromtimestamp(time.time()).date()
    return when.strftime("%H:%M:%S" if when.date() == today else "%Y-%m-%d %H:%M:%S")


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())
    return json.dumps(arguments)


def waiting_for(snapshot: AgentTurnSnapshot | None) -> str:
    """One line: what a blocked turn waits for (empty for the others)."""
    if snapshot is None or snapshot.suspension is None:
        return ""
    s = snapshot.suspension
    meta = s.metadata
    if s.type is SuspensionType.TOOL_APPROVAL:
        calls = waiting_calls(snapshot)
        shown = ", ".join(f"{c['tool']}({_arguments(c.get('arguments', {}))})" for c in calls)
        return f"approval of {shown}" if len(calls) < 2 else f"approval of {len(calls)}: {shown}"
    if s.type is SuspensionType.USER_INPUT:
        return f"input for {meta.get('tool', '?')}: {s.message}"
    if s.type is SuspensionType.CHILD:
        return f"{len(meta.get('child_turn_ids', [])) or 'its'} child turn(s)"
    if s.type is SuspensionType.RETRY:
        return f"retry {meta.get('attempt', '')} at {clock(snapshot.next_runnable_at)}"
    return s.message


#: Characters of a turn id the narrow table shows (as the console does).
SHORT_ID = 12
#: A terminal at least this wide gets the wide table without asking.
WIDE_COLUMNS = 160


def turns_table(rows: list[tuple[TurnSummary, AgentTurnSnapshot | None]], wide: bool) -> Table:
    """The ``turns list`` table: all columns when ``wide``, else what fits 80 columns."""
    if wide:
        return _wide_table(rows)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("turn", no_wrap=True)
    table.add_column("agent", overflow="ellipsis", no_wrap=True, max_width=16)
    table.add_column("status", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    table.add_column("waiting for", overflow="fold", ratio=1)
    for row, snapshot in rows:
        cancelling = " (cancelling)" if row.cancel_requested else ""
        table.add_row(
            row.turn_id[:SHORT_ID] + ("↳" if row.parent_turn_id else ""),
            escape(row.agent_id),
            status_markup(row.status) + cancelling,
            clock(row.updated_at),
            escape(waiting_for(snapshot)),
        )
    return table


def _wide_table(rows: list[tuple[TurnSummary, AgentTurnSnapshot | None]]) -> Table:
    table = Table()
    columns = ("turn", "agent", "status", "v", "created", "updated", "waiting for", "leased by")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row, snapshot in rows:
        table.add_row(
            row.turn_id,
            row.agent_id,
            status_markup(row.status) + (" (cancelling)" if row.cancel_requested else ""),
            str(row.version),
            clock(row.created_at),
            clock(row.updated_at),
            escape(waiting_for(snapshot)),
            row.lease_owner or "",
        )
    return table


def summary_json(row: TurnSummary, snapshot: AgentTurnSnapshot | None) -> dict[str, Any]:
    """One listed turn as JSON (times are Unix seconds)."""
    return {
        "id": row.turn_id,
        "agent_id": row.agent_id,
        "status": AgentTurnStatus(row.status).value,
        "version": row.version,
        "root_turn_id": row.root_turn_id,
        "parent_turn_id": row.parent_turn_id,
        "conversation_id": row.conversation_id,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "lease_owner": row.lease_owner,
        "cancel_requested": row.cancel_requested,
        "waiting_for": suspension_json(snapshot),
    }


def suspension_json(snapshot: AgentTurnSnapshot | None) -> dict[str, Any] | None:
    """The suspension with its details (tool and arguments, form schema, child ids)."""
    if snapshot is None or snapshot.suspension is None:
        return None
    s, approval = snapshot.suspension, SuspensionType.TOOL_APPROVAL
    return {
        "type": s.type.value,
        "correlation_id": s.correlation_id,
        "message": s.message,
        "metadata": s.metadata,
        "next_runnable_at": snapshot.next_runnable_at,
        **({"waiting_calls": waiting_calls(snapshot)} if s.type is approval else {}),
    }


def turn_json(s: AgentTurnSnapshot, children: list[dict[str, Any]]) -> dict[str, Any]:
    """One turn of ``turns show --json``, with its children nested."""
    return {
        "id": s.id,
        "agent_id": s.agent_id,
        "agent_version": s.agent_version,
        "status": s.status.value,
        "phase": s.phase.value,
        "version": s.version,
        "root_turn_id": s.root_turn_id,
        "parent_turn_id": s.parent_turn_id,
        "conversation_id": s.conversation_id,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "steps": s.step_count,
        "model_calls": s.iteration_count,
        "tool_calls": s.tool_call_count,
        "retries": s.retry_count,
        "usage": {"input_tokens": s.usage.input_tokens, "output_tokens": s.usage.output_tokens},
        "waiting_for": suspension_json(s),
        "cancel_requested": s.cancel_requested,
        "final_output": s.final_output,
        "error": s.error.model_dump(mode="json") if s.error else None,
        "terminal_reason": s.terminal_reason,
        "children": children,
    }


def transcript_text(s: AgentTurnSnapshot, instructions: str = "") -> str:
    """The turn's transcript, as the console's turn page shows it (markup escaped)."""
    return escape(as_text(entries(s, instructions)))


def turn_label(s: AgentTurnSnapshot) -> str:
    """One node of the ``turns show`` tree."""
    label = (
        f"[bold]{s.id}[/] {s.agent_id}@{s.agent_version}  {status_markup(s.status)} "
        f"phase {s.phase.value}  steps {s.step_count}  model calls {s.iteration_count}  "
        f"tools {s.tool_call_count}  tokens {s.usage.total_tokens}  v{s.version}"
        f"\n  created {clock(s.created_at)}  updated {clock(s.updated_at)}"
    )
    if s.suspension is not None:
        label += (
            f"\n  waits for {s.suspension.type.value}: {escape(s.suspension.message)}"
            f" [dim]({s.suspension.correlation_id or ''})[/]"
        )
        if s.suspension.type is SuspensionType.TOOL_APPROVAL:
            label += "".join(_call_label(call) for call in waiting_calls(s))
    if s.cancel_requested and not s.status.is_terminal:
        label += "\n  cancellation requested"
    if s.terminal_reason:
        label += f"\n  reason: {escape(s.terminal_reason)}"
    return label


def _call_label(call: dict[str, Any]) -> str:
    """A call waiting for approval: its tool, id and arguments, one per line."""
    arguments = json.dumps(call.get("arguments", {}), indent=2, sort_keys=True)
    head = f"\n  call {escape(str(call['call_id']))}: tool {escape(str(call.get('tool', '?')))}"
    return f"{head} with arguments:\n" + "\n".join(
        "    " + escape(line) for line in arguments.splitlines()
    )
