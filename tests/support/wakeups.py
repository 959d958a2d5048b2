"""A slow broker of wake-ups and a runner around it, for the wake-up and chain suites."""

from __future__ import annotations

from collections.abc import Callable

from runner_core import (
    Agent,
    AgentRunner,
    AgentTurnStore,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelRequest,
    ToolCall,
    ToolMessage,
    tool,
)


def three_step_agent() -> Agent:
    @tool
    def look(n: int) -> str:
        """Look something up."""
        return f"found {n}"

    def answer(request: ModelRequest) -> AiMessage:
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        if done < 2:
            return AiMessage(
                tool_calls=[ToolCall(id=f"c{done}", name="look", arguments={"n": done})]
            )
        return AiMessage("done")

    return Agent("looker", FunctionModel(answer), tools=[look])


class Broker:
    """A queue of wake-ups, consumed slowly: a backlog."""

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.sent = 0
        self.refuse = False

    def __call__(self, turn_id: str) -> None:
        if self.refuse:
            raise ConnectionError("broker down")
        self.sent += 1
        self.queue.append(turn_id)


def fleet(make_store: Callable[[], AgentTurnStore], broker: Broker) -> AgentRunner:
    loader = InMemoryAgentLoader([three_step_agent()])
    return AgentRunner(turn_store=make_store(), agent_loader=loader, dispatcher=broker)
