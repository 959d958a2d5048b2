"""A turn's conversation as entries, the same for the console page and ``turns show``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from runner_core import AgentTurnSnapshot, AgentTurnStatus
from runner_core.messages import AiMessage, SystemMessage, ToolMessage, UserMessage

Kind = Literal["system", "user", "assistant", "reasoning", "call", "result", "error", "final"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the transcript: who said it, a short title, and the text."""

    kind: Kind
    title: str
    body: str
    call_id: str | None = None


def entries(s: AgentTurnSnapshot, instructions: str = "") -> list[Entry]:
    """The turn's messages in order, each tool call and result on its own, then the end."""
    out = [Entry("system", "system instructions", instructions)] if instructions else []
    for message in s.messages:
        match message:
            case SystemMessage():
                out.append(Entry("system", "system", message.text))
            case UserMessage():
                out.append(Entry("user", "user", _user_text(message)))
            case AiMessage():
                out.extend(_ai(message))
            case ToolMessage():
                kind: Kind = "error" if message.is_error else "result"
                title = f"{message.name} {'failed' if message.is_error else 'returned'}"
                out.append(Entry(kind, title, message.content, message.call_id))
    if s.status is AgentTurnStatus.COMPLETED and s.output is not None:
        typed = json.dumps(s.output, indent=2, ensure_ascii=False)
        out.append(Entry("final", "typed output", typed))
    elif s.status is AgentTurnStatus.COMPLETED:
        out.append(Entry("final", "final answer", s.final_output or ""))
    elif s.error is not None:
        out.append(Entry("error", f"{s.status.value}: {s.error.type}", s.error.message))
    elif s.status.is_terminal:
        out.append(Entry("error", s.status.value, s.terminal_reason or ""))
    return out


def _user_text(message: UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(getattr(p, "text", None) or f"[{p.type}]" for p in message.content)


def _ai(message: AiMessage) -> list[Entry]:
    out: list[Entry] = []
    if message.reasoning:
        out.append(Entry("reasoning", "reasoning", message.reasoning))
    if message.text:
        out.append(Entry("assistant", "assistant", message.text))
    for call in message.tool_calls:
        arguments = json.dumps(dict(call.arguments), indent=2, ensure_ascii=False, default=str)
        out.append(Entry("call", f"calls {call.name}", arguments, call.id))
    return out


def as_text(items: list[Entry], width: int = 2000) -> str:
    """The entries as plain text, each body indented and cut at ``width`` characters."""
    lines: list[str] = []
    for item in items:
        head = f"[{item.kind}] {item.title}" + (f" ({item.call_id})" if item.call_id else "")
        lines.append(head)
        body = item.body if len(item.body) <= width else item.body[:width] + " …"
        lines.extend("    " + line for line in body.splitlines() or [""])
    return "\n".join(lines)
