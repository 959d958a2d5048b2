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


def commands_served(client: Any) -> dict[str, int]:
    """Commands each Redis node has run so far (INFO commandstats, INFO itself left out).

    One entry for a single server; one per master for a cluster client.
    """
    from stores.redis.connection import is_cluster

    nodes = (
        {n.name: n.redis_connection for n in client.get_primaries()}
        if is_cluster(client)
        else {"redis": client}
    )
    served = {}
    for name, node in nodes.items():
        stats = node.info("commandstats")
        served[name] = sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")
    return served
