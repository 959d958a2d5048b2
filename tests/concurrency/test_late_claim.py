"""A claim that reaches the store late: its lease is measured from the clock reading it sent.

A worker reads the store clock, then its claim waits (a GC pause, a busy thread pool, a
slow network) before the store runs it. The store dates the lease from the reading, so
the lease may be nearly or wholly spent by the time the worker gets the turn, and another
worker may claim it at once. The first worker must count its lease from the same reading,
or both call the model (or run a tool) for the same step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnStore,
    AiMessage,
    ConcurrentModificationError,
    FunctionModel,
    InMemoryAgentLoader,
    LeaseLostError,
    ModelRequest,
    ToolCall,
    ToolMessage,
    tool,
)

LEASE = 0.3


class LateClaims:
    """A store whose claims run ``delay`` s after the caller read the clock and asked."""

    def __init__(self, inner: AgentTurnStore, delay: float) -> None:
        self.inner, self.delay = inner, delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def claim(self, *args: Any) -> Any:
        time.sleep(self.delay)
        return self.inner.claim(*args)

    def claim_runnable(self, *args: Any) -> Any:
        time.sleep(self.delay)
        return self.inner.claim_runnable(*args)


def payer(ran: list[str]) -> Agent:
    @tool
    def charge() -> str:
        """Charge the card."""
        ran.append("charge")
        return "charged"

    def model(request: ModelRequest) -> AiMessage:
        ran.append("model")
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AiMessage("paid")
        return AiMessage(tool_calls=[ToolCall(id="c1", name="charge", arguments={})])

    return Agent("payer", FunctionModel(model), tools=[charge])


@pytest.mark.parametrize("late_steps_first", [True, False])
@pytest.mark.parametrize("how", ["claim", "claim_runnable"])
def test_a_late_claim_never_acts_beside_the_worker_that_took_over(
    make_store: Callable[[], AgentTurnStore], late_steps_first: bool, how: str
) -> None:
    ran: list[str] = []
    loader = InMemoryAgentLoader([payer(ran)])
    policy = AgentExecutionPolicy(lease_seconds=LEASE)
    late = AgentRunner(
        turn_store=LateClaims(make_store(), LEASE * 1.2),  # type: ignore[arg-type]
        agent_loader=loader,
        policy=policy,
    )
    prompt = AgentRunner(turn_store=make_store(), agent_loader=loader, policy=policy)
    turn_id = prompt.start("payer", "pay").id

    # Given worker A's claim reached the store after a lease's length had passed
    if how == "claim":
        a = late.claim(turn_id, "worker-a")
    else:
        claimed = late.claim_runnable("worker-a", limit=1)
        a = claimed[0] if claimed else None
    assert a is not None
    # so its lease has run out in the store, and worker B may claim the turn at once
    b = prompt.claim(turn_id, "worker-b")
    assert b is not None, "the store dates a lease from the clock reading sent with the claim"

    # When both step, in either order
    outcomes: dict[str, str] = {}
    order = [("a", late, a), ("b", prompt, b)]
    for name, runner, turn in order if late_steps_first else order[::-1]:
        try:
            with runner.holding(turn):
                runner.step(turn, release=True)
            outcomes[name] = "stepped"
        except (LeaseLostError, ConcurrentModificationError) as exc:
            outcomes[name] = type(exc).__name__

    # Then only B called the model: A knew its lease was spent before any side effect
    assert ran == ["model"], outcomes
    assert outcomes == {"a": "LeaseLostError", "b": "stepped"}
