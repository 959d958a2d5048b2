"""Helpers of the conversation, planning and child-turn tests (self-contained on purpose)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner_core import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentPlanningPolicy,
    AgentRunner,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AiMessage,
    Commit,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    SaveResult,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from tests.support.scripts import Script

# the scripted model of the core unit tests, under the name these tests use
Scripted = Script


def last_tool_message(request: ModelRequest) -> ToolMessage:
    """The newest ToolMessage a model request carries."""
    found = [m for m in request.messages if isinstance(m, ToolMessage)]
    assert found, "the request carries no tool message"
    return found[-1]


def tool_json(message: ToolMessage) -> dict[str, Any]:
    value = json.loads(message.content)
    assert isinstance(value, dict)
    return value


# -- plans -----------------------------------------------------------------------------------


def task(
    id: str, agent: str | None = "worker", *, deps: Sequence[str] = (), expected: str = ""
) -> dict[str, Any]:
    """One task argument of ``create_task_plan`` / ``update_task_plan``."""
    out: dict[str, Any] = {"id": id, "description": f"do {id}", "depends_on": list(deps)}
    if agent is not None:
        out["agent"] = agent
    if expected:
        out["expected_output"] = expected
    return out


def create(*tasks: dict[str, Any], call_id: str = "p1", goal: str = "the goal") -> AiMessage:
    """A model reply asking for a plan."""
    return AiMessage(
        tool_calls=[
            ToolCall(
                id=call_id, name="create_task_plan", arguments={"goal": goal, "tasks": list(tasks)}
            )
        ]
    )


def update(*tasks: dict[str, Any], call_id: str = "u1", reason: str = "more") -> AiMessage:
    """A model reply asking to change the plan."""
    return AiMessage(
        tool_calls=[
            ToolCall(
                id=call_id,
                name="update_task_plan",
                arguments={"reason": reason, "tasks": list(tasks)},
            )
        ]
    )


def ask(*calls: ToolCall, usage: Usage | None = None) -> AiMessage | ModelResponse:
    message = AiMessage(tool_calls=list(calls))
    return ModelResponse(message, usage) if usage is not None else message


def planner(
    model: Scripted,
    *,
    subs: Sequence[str] = ("worker",),
    id: str = "planner",
    **policy: Any,
) -> Agent:
    """A planning agent delegating to ``subs``."""
    return Agent(
        id,
        model.model,
        instructions="Plan the work.",
        sub_agents=subs,
        planning=AgentPlanningPolicy(**policy),
    )


_TASK = re.compile(r"Your task \(([^)]+)\)")


@dataclass
class Workers:
    """Child agents whose models record what they were asked and answer ``result-<task>``."""

    inputs: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    requests: list[ModelRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    fail: set[str] = field(default_factory=set)
    hook: Callable[[str], None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def model(self) -> FunctionModel:
        return FunctionModel(self._answer)

    def agent(self, id: str = "worker", **kwargs: Any) -> Agent:
        return Agent(id, self.model(), instructions=f"You are {id}.", **kwargs)

    def _answer(self, request: ModelRequest) -> ModelResponse:
        user = next(m for m in request.messages if isinstance(m, UserMessage))
        match = _TASK.search(user.text)
        assert match, f"not a task input: {user.text!r}"
        task_id = match.group(1)
        with self.lock:
            self.requests.append(request)
            self.inputs[task_id] = user.text
            self.order.append(task_id)
        if self.hook is not None:
            self.hook(task_id)
        if task_id in self.fail:
            raise ModelError(f"{task_id} broke", retryable=False)
        return ModelResponse(AiMessage(f"result-{task_id}"), self.usage)


# -- stores, runners, events ---------------------------------------------------------------


class CountingStore(InMemoryAgentTurnStore):
    """Records every successful write: (turn id, status, parent id) per save."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, AgentTurnStatus]] = []
        self.creates: list[str] = []
        self.before_save: Callable[[AgentTurnSnapshot, int], None] | None = None

    def commit(self, commit: Commit) -> SaveResult:
        snapshot, expected_version = commit.snapshot, commit.expected_version
        if self.before_save is not None:
            self.before_save(snapshot, expected_version)
        result = super().commit(commit)
        with self._lock:
            self.writes.append((snapshot.id, snapshot.status))
            if expected_version == -1:
                self.creates.append(snapshot.id)
            for child in commit.children:
                self.writes.append((child.id, child.status))
                self.creates.append(child.id)
        return result

    def statuses(self, turn_id: str) -> list[AgentTurnStatus]:
        """The statuses a turn was saved with, in order (repeats collapsed)."""
        out: list[AgentTurnStatus] = []
        for tid, status in self.writes:
            if tid == turn_id and (not out or out[-1] is not status):
                out.append(status)
        return out


@dataclass
class EventLog:
    """A listener keeping every event (thread-safe)."""

    events: list[AgentEvent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: AgentEvent) -> None:
        with self.lock:
            self.events.append(event)

    def types(self, turn_id: str | None = None) -> list[AgentEventType]:
        return [e.type for e in self.events if turn_id is None or e.turn_id == turn_id]

    def of(self, type: AgentEventType, turn_id: str | None = None) -> list[AgentEvent]:
        return [
            e for e in self.events if e.type is type and (turn_id is None or e.turn_id == turn_id)
        ]

    def index(self, type: AgentEventType, turn_id: str, nth: int = 0) -> int:
        hits = [i for i, e in enumerate(self.events) if e.type is type and e.turn_id == turn_id]
        return hits[nth]


@dataclass
class World:
    """One store and loader, runners sharing them (like processes sharing Redis)."""

    store: CountingStore = field(default_factory=CountingStore)
    loader: InMemoryAgentLoader = field(default_factory=InMemoryAgentLoader)
    log: EventLog = field(default_factory=EventLog)
    dispatched: list[str] = field(default_factory=list)

    def runner(self, **kwargs: Any) -> AgentRunner:
        runner = AgentRunner(
            turn_store=self.store,
            agent_loader=self.loader,
            dispatcher=self.dispatched.append,
            **kwargs,
        )
        runner.add_event_listener(self.log)
        return runner

    def register(self, *agents: Agent) -> None:
        for agent in agents:
            self.loader.register(agent)

    def children(self, turn_id: str) -> list[AgentTurnSnapshot]:
        return [self.store.load(c) for c in self.store.children_of(turn_id)]


# -- conversations ---------------------------------------------------------------------------


def history_turn(n: int) -> list[Message]:
    """One earlier turn as a memory keeps it: question, tool call, tool result, answer."""
    call = ToolCall(id=f"k{n}", name="lookup", arguments={"n": n})
    return [
        UserMessage(f"q{n}"),
        AiMessage(tool_calls=[call]),
        ToolMessage(call_id=f"k{n}", name="lookup", content=f"r{n}"),
        AiMessage(f"a{n}"),
    ]


def label(message: Message) -> str:
    """A short readable form of a message, for comparing histories."""
    if isinstance(message, UserMessage):
        return f"user:{message.text}"
    if isinstance(message, SystemMessage):
        return f"system:{message.text}"
    if isinstance(message, ToolMessage):
        return f"tool:{message.call_id}"
    if message.tool_calls:
        return "ai:" + ",".join(c.id for c in message.tool_calls)
    return f"ai:{message.text}"


def labels(messages: Iterable[Message]) -> list[str]:
    return [label(m) for m in messages]


def assert_valid_protocol(messages: Sequence[Message]) -> None:
    """System first (optional), then turns opening with a user message; every tool call is
    answered right after its assistant message, and no tool message is an orphan."""
    visible = [m for m in messages if not isinstance(m, SystemMessage)]
    assert len(visible) == len(messages) - sum(
        1 for m in messages[:1] if isinstance(m, SystemMessage)
    ), "a system message in the middle of the history"
    assert visible and isinstance(visible[0], UserMessage), labels(visible[:1])
    open_calls: list[str] = []
    for m in visible:
        if isinstance(m, ToolMessage):
            assert m.call_id in open_calls, f"orphan tool message {m.call_id}"
            open_calls.remove(m.call_id)
            continue
        assert not open_calls, f"unanswered tool calls {open_calls} before {label(m)}"
        if isinstance(m, AiMessage):
            open_calls = [c.id for c in m.tool_calls]
    assert not open_calls, f"unanswered tool calls {open_calls} at the end"
