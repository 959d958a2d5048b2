"""Snapshots for contract tests."""

from __future__ import annotations

import time
import uuid
from typing import Any

from runner_core import AgentTurnSnapshot, AgentTurnStatus, Suspension, SuspensionType, UserMessage


def snap(turn_id: str | None = None, **fields: Any) -> AgentTurnSnapshot:
    """A root turn (READY, one user message) unless ``fields`` say otherwise."""
    turn_id = turn_id or uuid.uuid4().hex
    now = time.time()
    values: dict[str, Any] = {
        "id": turn_id,
        "agent_id": "agent",
        "agent_version": "1",
        "root_turn_id": turn_id,
        "messages": [UserMessage("hello")],
        "created_at": now,
        "updated_at": now,
    }
    values.update(fields)
    return AgentTurnSnapshot(**values)


def child_of(parent: AgentTurnSnapshot, **fields: Any) -> AgentTurnSnapshot:
    """A READY child of ``parent``."""
    return snap(
        parent_turn_id=parent.id, root_turn_id=parent.root_turn_id, depth=parent.depth + 1, **fields
    )


def waiting_for(parent: AgentTurnSnapshot, *children: AgentTurnSnapshot) -> None:
    """Make ``parent`` wait for ``children`` (in place)."""
    ids = [c.id for c in children]
    parent.status = AgentTurnStatus.WAITING_FOR_CHILD
    parent.suspension = Suspension(
        type=SuspensionType.CHILD,
        correlation_id=ids[0] if len(ids) == 1 else None,
        metadata={"child_turn_ids": ids},
    )
