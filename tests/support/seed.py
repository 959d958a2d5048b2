"""Turns the seed-conformance modules set up: one per blocking or ending state the seed names."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentBudget,
    AgentExecutionPolicy,
    AgentRunner,
    AgentToolContext,
    AgentTurn,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentTurnStore,
    ChatMemory,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    InMemoryChatMemory,
    Message,
    ModelError,
    RetryPolicy,
    ToolCall,
    Usage,
    tool,
)
from tests.support.plans import Scripted, ask, create, planner, task

__all__ = [
    "CheckingMemory",
    "FlakyMemory",
    "Ledger",
    "Meeting",
    "Memories",
    "child_waiting_turn",
    "closed",
    "ending",
    "forget_child_results",
    "policy_options",
    "retry_turn",
    "running_turn",
    "together",
]


def policy_options(**policy: Any) -> AgentTurnOptions:
    """Options carrying a per-turn policy."""
    return AgentTurnOptions(policy=AgentExecutionPolicy(**policy))


@dataclass
class Memories:
    """A chat memory per conversation id, handed out by ``provider``."""

    by_id: dict[str, InMemoryChatMemory] = field(default_factory=dict)

    def provider(self, conversation_id: str) -> ChatMemory:
        """The memory of ``conversation_id`` (made empty on first use)."""
        return self.by_id.setdefault(conversation_id, InMemoryChatMemory())

    def runner(self, store: AgentTurnStore, loader: InMemoryAgentLoader) -> AgentRunner:
        """A conversation-mode runner on ``store``."""
        return AgentRunner(
            turn_store=store, agent_loader=loader, chat_memory_provider=self.provider
        )


@dataclass
class Ledger:
    """Side effects of tools, as a business system would record them."""

    entries: list[str] = field(default_factory=list)

    def refund_agent(self, *, then: str = "refunded", usage: Usage | None = None) -> Agent:
        """An agent whose one tool call (``r1``, using ``usage``) needs approval, then answers."""
        entries = self.entries

        @tool(requires_approval=True)
        def refund(amount: float) -> str:
            """Refund the customer."""
            entries.append(AgentToolContext.current().idempotency_key)
            return "ok"

        call = ToolCall(id="r1", name="refund", arguments={"amount": 5.0})
        model = Scripted(ask(call, usage=usage), then)
        return Agent("refunder", model.model, tools=[refund])


def _two_calls(name: str) -> list[ToolCall]:
    return [ToolCall(id=f"{name}1", name=name), ToolCall(id=f"{name}2", name=name)]


def _failing(runner: AgentRunner, cid: str) -> AgentTurn:
    @tool
    def charge() -> str:
        """Charge the card."""
        raise RuntimeError("card declined")

    model = Scripted(ask(*_two_calls("charge")))
    return runner.run(Agent("a", model.model, tools=[charge]), "q", conversation_id=cid)


def _over_budget(runner: AgentRunner, cid: str) -> AgentTurn:
    @tool
    def lookup() -> str:
        """Never reached: the budget stops first."""
        raise AssertionError("ran over budget")

    model = Scripted(ask(*_two_calls("lookup"), usage=Usage(input_tokens=50)))
    opts = policy_options(budget=AgentBudget(max_total_tokens=10))
    return runner.run(
        Agent("a", model.model, tools=[lookup]), "q", conversation_id=cid, options=opts
    )


def _out_of_steps(runner: AgentRunner, cid: str) -> AgentTurn:
    @tool
    def lookup() -> str:
        """Never reached: one step only."""
        raise AssertionError("ran past max_steps")

    model = Scripted(ask(*_two_calls("lookup")))
    opts = policy_options(max_steps=1)
    return runner.run(
        Agent("a", model.model, tools=[lookup]), "q", conversation_id=cid, options=opts
    )


def _out_of_iterations(runner: AgentRunner, cid: str) -> AgentTurn:
    @tool
    def lookup() -> str:
        """Look again."""
        return "again"

    model = Scripted(then=ask(ToolCall(id="", name="lookup")))
    agent = Agent("a", model.model, tools=[lookup], max_iterations=1)
    return runner.run(agent, "q", conversation_id=cid)


def _cancelled(runner: AgentRunner, cid: str) -> AgentTurn:
    @tool(requires_approval=True)
    def refund() -> str:
        """Never approved."""
        raise AssertionError("never approved")

    model = Scripted(ask(*_two_calls("refund")))
    waiting = runner.run(Agent("a", model.model, tools=[refund]), "q", conversation_id=cid)
    return runner.cancel(waiting.id)


#: The abnormal ends of the seed, each made in conversation ``cid`` by one function.
ending: dict[str, Callable[[AgentRunner, str], AgentTurn]] = {
    "FAILED": _failing,
    "BUDGET_EXCEEDED": _over_budget,
    "MAX_STEPS_REACHED": _out_of_steps,
    "MAX_ITERATIONS_REACHED": _out_of_iterations,
    "CANCELLED": _cancelled,
}


def closed(turn: AgentTurn) -> bool:
    """True when no call is pending and the last message is the turn's closing AiMessage."""
    from runner_core import AiMessage

    last = turn.messages[-1]
    return (
        not turn.pending_tool_calls
        and isinstance(last, AiMessage)
        and not last.tool_calls
        and (last.text or "").startswith("The previous turn ended before completion")
    )


def running_turn(runner: AgentRunner, cid: str, probe: Callable[[], None]) -> AgentTurn:
    """A turn whose only tool runs ``probe`` while the turn is RUNNING."""

    @tool
    def check() -> str:
        """Run the probe mid-step."""
        probe()
        return "checked"

    model = Scripted(ask(ToolCall(id="k1", name="check")), "done")
    return runner.run(Agent("a", model.model, tools=[check]), "q", conversation_id=cid)


def retry_turn(runner: AgentRunner, cid: str | None = None, **retry: Any) -> AgentTurn:
    """A turn whose model failed retryably once (then answers "done"): RETRY_SCHEDULED."""
    model = Scripted(ModelError("flaky", retryable=True), then="done")
    opts = policy_options(retry=RetryPolicy(**{"max_retries": 1, "initial_delay": 60.0, **retry}))
    return runner.run(Agent("a", model.model), "q", conversation_id=cid, options=opts)


def child_waiting_turn(runner: AgentRunner, loader: InMemoryAgentLoader, cid: str) -> AgentTurn:
    """A planning root whose one child waits for an approval: WAITING_FOR_CHILD."""

    @tool(requires_approval=True)
    def publish() -> str:
        """Publish."""
        return "published"

    worker = Agent(
        "worker", Scripted(ask(ToolCall(id="w1", name="publish"))).model, tools=[publish]
    )
    loader.register(worker)
    return runner.run(planner(Scripted(create(task("t1")))), "q", conversation_id=cid)


class Meeting:
    """Stores whose loads wait until ``n`` threads named ``resumer…`` have each loaded once.

    Two resumers then both hold the same waiting version before either commits: the race
    the seed's "exactly one wins" is about, made certain instead of left to timing.
    """

    def __init__(self, n: int = 2) -> None:
        self.barrier = threading.Barrier(n, timeout=10)
        self.met: set[str] = set()

    def wrap(self, store: AgentTurnStore) -> AgentTurnStore:
        """``store``, its loads joining the meeting."""
        return _Meeting(store, self)

    def arrive(self) -> None:
        """Wait for the others, once per resumer thread."""
        name = threading.current_thread().name
        if name.startswith("resumer") and name not in self.met:
            self.met.add(name)
            self.barrier.wait()


class _Meeting:
    def __init__(self, store: AgentTurnStore, meeting: Meeting) -> None:
        self._store = store
        self._meeting = meeting

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def load(self, turn_id: str) -> AgentTurnSnapshot:
        snapshot = self._store.load(turn_id)
        self._meeting.arrive()
        return snapshot


def forget_child_results(store: InMemoryAgentTurnStore, parent_id: str) -> None:
    """Drop the results a waiting parent got, as a record written before fan-in would lack."""
    with store._lock:
        store._records[parent_id].header.child_results = {}


def together(calls: dict[str, Callable[[], object]]) -> dict[str, object]:
    """Run each call in its own thread named by its key; each one's result or exception."""
    outcomes: dict[str, object] = {}

    def run(name: str, call: Callable[[], object]) -> None:
        try:
            outcomes[name] = call()
        except Exception as exc:  # noqa: BLE001 - a loser's error is its outcome
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=item, name=item[0]) for item in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return outcomes


class CheckingMemory(InMemoryChatMemory):
    """A memory of conversation ``c`` that records each added message not yet stored."""

    def __init__(self, store: AgentTurnStore) -> None:
        self.store = store
        self.turn_id = ""
        self.unsaved: list[str] = []
        super().__init__()

    def add_messages(self, messages: Sequence[Message]) -> None:
        """Note what is not stored yet, then add."""
        if messages:
            active = self.store.find_active_turn("c")
            self.turn_id = active[0] if active is not None else self.turn_id
            stored = {m.id for m in self.store.load(self.turn_id).messages}
            self.unsaved += [m.id for m in messages if m.id not in stored]
        super().add_messages(messages)


class FlakyMemory(InMemoryChatMemory):
    """A memory whose writes fail while ``down``."""

    def __init__(self) -> None:
        self.down = False
        super().__init__()
        self.down = True

    def add_messages(self, messages: Sequence[Message]) -> None:
        """Add, or fail while down."""
        if self.down:
            raise ConnectionError("memory is down")
        super().add_messages(messages)


# -- the fixtures of the store suites --------------------------------------------------------
@pytest.fixture
def loader() -> InMemoryAgentLoader:
    return InMemoryAgentLoader()


@pytest.fixture
def runners(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> Callable[[], AgentRunner]:
    """Runners on separate clients of one store, like separate processes."""
    return lambda: AgentRunner(turn_store=make_store(), agent_loader=loader)
