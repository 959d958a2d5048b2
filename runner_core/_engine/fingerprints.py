"""Schema fingerprints of toolset tools: recorded when calls are planned, checked before.

A toolset tool (``runner_core.mcp.MCPTool``) carries ``fingerprint``, a hash of its name
and input schema as its server lists it; plain tools carry none and are never checked.
"""

from __future__ import annotations

from collections.abc import Iterable

from runner_core.errors import ToolSchemaChangedError
from runner_core.messages import ToolCall
from runner_core.tools import Tool, ToolCallAbortedError
from runner_core.turn import AgentTurn


def record_fingerprints(turn: AgentTurn, calls: Iterable[ToolCall]) -> None:
    """Note the fingerprint of each toolset tool called, the first time it is called.

    Saved with the pending calls, so a worker that lists another schema later refuses to
    run them (``ToolSchemaChangedError``).
    """
    try:
        tools = turn.agent.tools
    except ToolCallAbortedError:
        return  # unreachable now: the call's classification records it later
    recorded = turn.state.tool_fingerprints
    for call in calls:
        current = getattr(tools.get(call.name), "fingerprint", None)
        if isinstance(current, str):
            recorded.setdefault(call.name, current)


def schema_changed(
    turn: AgentTurn, tool: Tool | None, call: ToolCall
) -> ToolSchemaChangedError | None:
    """A refusal when the tool's schema is not the one recorded when its call was planned."""
    recorded = turn.state.tool_fingerprints.get(call.name)
    current = getattr(tool, "fingerprint", None)
    if recorded is None:
        if isinstance(current, str):  # planned before fingerprints were kept
            turn.state.tool_fingerprints[call.name] = current
        return None
    if current == recorded:
        return None
    server = str(getattr(tool, "server", "") or "unknown")
    return ToolSchemaChangedError(turn.state.id, call.name, server, recorded, current or "absent")
