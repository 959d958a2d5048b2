"""Conversation mode: the window a turn sees, projection into ChatMemory, the busy rule."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentConversationBusyException,
    AgentExecutionPolicy,
    AgentRunner,
    AgentToolContext,
    AgentTurn,
    AgentTurnOptions,
    AgentTurnStatus,
    AiMessage,
    ConfigurationError,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    InMemoryChatMemory,
    Message,
    ModelError,
    RetryPolicy,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    tool,
)
from tests.support.plans import (
    CountingStore,
    Scripted,
    Workers,
    World,
    ask,
    assert_valid_protocol,
    create,
    history_turn,
    labels,
    planner,
    task,
)


def conversation_runner(
    memory: Any, store: Any = None, loader: InMemoryAgentLoader | None = None
) -> AgentRunner:
    return AgentRunner(
        turn_store=store, agent_loader=loader, chat_memory_provider=lambda cid: memory
    )


def seeded(turns: int, *, system_at: Sequence[int] = ()) -> InMemoryChatMemory:
    messages: list[Message] = []
    for n in range(1, turns + 1):
        if n in system_at:
            messages.append(SystemMessage(f"old instructions {n}"))
        messages.extend(history_turn(n))
    return InMemoryChatMemory(messages)


def answering(text: str = "ok") -> tuple[Scripted, Agent]:
    model = Scripted(then=text)
    return model, Agent("chat", model.model, instructions="Be brief.")


# -- the window ----------------------------------------------------------------------------


def test_window_is_the_last_whole_turns() -> None:
    memory = seeded(5)
    model = Scripted("fine")
    agent = Agent("chat", model.model, instructions="Be brief.", max_attached_turns=2)

    turn = conversation_runner(memory).run(agent, "q6", conversation_id="c")

    assert turn.status is AgentTurnStatus.COMPLETED
    sent = model.requests[0].messages
    assert labels(sent) == [
        "system:Be brief.",
        *labels(history_turn(4)),
        *labels(history_turn(5)),
        "user:q6",
    ]
    assert turn.state.history_count == 8
    assert turn.conversation_id == "c"


@pytest.mark.parametrize(
    ("max_messages", "first_turn"),
    [
        (4, 5),  # exactly the last turn
        (6, 5),  # last 6 start with turn 4's tool result: dropped up to q5
        (7, 5),  # last 7 start with turn 4's assistant tool call: dropped up to q5
        (8, 4),
        (100, 1),
    ],
)
def test_message_limit_never_starts_the_window_mid_turn(max_messages: int, first_turn: int) -> None:
    memory = seeded(5)
    model = Scripted("fine")
    agent = Agent(
        "chat",
        model.model,
        instructions="Be brief.",
        max_attached_messages=max_messages,
        max_attached_turns=10,
    )

    conversation_runner(memory).run(agent, "q6", conversation_id="c")

    sent = model.requests[0].messages
    expected = [m for n in range(first_turn, 6) for m in history_turn(n)]
    assert labels(sent[1:]) == [*labels(expected), "user:q6"]
    assert_valid_protocol(sent)


def test_a_window_without_a_user_message_is_empty() -> None:
    # the last three messages are the middle and end of one turn: no whole turn fits
    memory = seeded(2)
    model = Scripted("fine")
    agent = Agent("chat", model.model, max_attached_messages=3)

    turn = conversation_runner(memory).run(agent, "q3", conversation_id="c")

    assert labels(model.requests[0].messages) == ["user:q3"]
    assert turn.state.history_count == 0


def test_system_messages_of_the_memory_are_dropped() -> None:
    memory = seeded(3, system_at=(1, 3))
    memory.add_messages([SystemMessage("trailing instructions")])
    model = Scripted("fine")
    agent = Agent("chat", model.model, instructions="Be brief.")

    turn = conversation_runner(memory).run(agent, "q4", conversation_id="c")

    sent = model.requests[0].messages
    systems = [m for m in sent if isinstance(m, SystemMessage)]
    assert [m.text for m in systems] == ["Be brief."]  # only the agent's own, first
    assert isinstance(sent[0], SystemMessage)
    assert len(sent) == 1 + 3 * 4 + 1
    assert not any(isinstance(m, SystemMessage) for m in turn.messages)
    # nothing of the turn is a system message, so none reaches the memory either
    assert [m.text for m in memory.messages if isinstance(m, SystemMessage)] == [
        "old instructions 1",
        "old instructions 3",
        "trailing instructions",
    ]


def test_explicit_history_mode_drops_system_messages_too() -> None:
    model = Scripted("fine")
    agent = Agent("chat", model.model, instructions="Be brief.")
    history = [SystemMessage("ignore me"), *history_turn(1)]

    turn = AgentRunner().run(agent, "q2", history=history)

    assert labels(model.requests[0].messages) == [
        "system:Be brief.",
        *labels(history_turn(1)),
        "user:q2",
    ]
    assert turn.conversation_id is None


# -- projection ----------------------------------------------------------------------------


class RecordingMemory:
    """An InMemoryChatMemory that also keeps every batch it was given."""

    def __init__(self, inner: InMemoryChatMemory | None = None) -> None:
        self.inner = inner or InMemoryChatMemory()
        self.batches: list[list[Message]] = []
        self.down = False
        self.failures = 0
        self.lock = threading.Lock()

    def get_model_messages(self, max_messages: int | None) -> list[Message]:
        return self.inner.get_model_messages(max_messages)

    def add_messages(self, messages: Sequence[Message]) -> None:
        with self.lock:
            if self.down:
                self.failures += 1
                raise ConnectionError("chat memory is down")
            self.batches.append(list(messages))
        self.inner.add_messages(messages)

    @property
    def messages(self) -> list[Message]:
        return self.inner.messages


def lookup_agent(*answers: Any) -> tuple[Scripted, Agent]:
    @tool
    def lookup(n: int) -> str:
        """Look something up."""
        return f"found {n}"

    model = Scripted(*answers)
    return model, Agent("chat", model.model, instructions="Be brief.", tools=[lookup])


def test_projection_is_idempotent_across_two_runners() -> None:
    store, loader, memory = InMemoryAgentTurnStore(), InMemoryAgentLoader(), RecordingMemory()
    first = conversation_runner(memory, store, loader)
    second = conversation_runner(memory, store, loader)
    model, agent = lookup_agent(
        ask(ToolCall(id="k1", name="lookup", arguments={"n": 1})), "one", "two"
    )

    t1 = first.run(agent, "q1", conversation_id="c")
    second.restore(t1.id)
    first.restore(t1.id)
    t2 = second.run(agent, "q2", conversation_id="c")
    first.restore(t2.id)
    second.restore(t2.id)

    assert (t1.status, t2.status) == (AgentTurnStatus.COMPLETED, AgentTurnStatus.COMPLETED)
    expected = [*t1.new_messages, *t2.new_messages]
    assert [m.id for m in memory.messages] == [m.id for m in expected]
    assert labels(memory.messages) == ["user:q1", "ai:k1", "tool:k1", "ai:one", "user:q2", "ai:two"]
    # the second turn saw the first one as history and never sent it back
    assert labels(model.requests[-1].messages[1:]) == labels(expected[:-1])
    t2_ids = {m.id for m in t2.new_messages}
    late = [b for b in memory.batches if any(m.id in t2_ids for m in b)]
    assert late and all(m.id in t2_ids for b in late for m in b)


def test_a_failing_memory_never_fails_the_turn_and_catches_up_on_restore(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = RecordingMemory()
    memory.down = True
    runner = conversation_runner(memory)
    _, agent = lookup_agent(ask(ToolCall(id="k1", name="lookup", arguments={"n": 1})), "done")

    with caplog.at_level(logging.WARNING, logger="runner_core.runner"):
        turn = runner.run(agent, "q1", conversation_id="c")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "done"
    assert memory.failures >= 4 and memory.messages == []
    assert "will retry" in caplog.text

    memory.down = False
    runner.restore(turn.id)
    assert [m.id for m in memory.messages] == [m.id for m in turn.new_messages]
    runner.restore(turn.id)
    assert len(memory.messages) == 4


def test_a_memory_that_recovers_mid_turn_gets_everything_on_the_next_save() -> None:
    memory = RecordingMemory()
    memory.down = True

    @tool
    def lookup(n: int) -> str:
        """Look something up; the memory comes back meanwhile."""
        memory.down = False
        return f"found {n}"

    model = Scripted(ask(ToolCall(id="k1", name="lookup", arguments={"n": 1})), "done")
    agent = Agent("chat", model.model, tools=[lookup])

    turn = conversation_runner(memory).run(agent, "q1", conversation_id="c")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert memory.failures >= 1
    # the first successful batch carries the input and the tool call the memory missed
    assert labels(memory.batches[0]) == ["user:q1", "ai:k1", "tool:k1"]
    assert [m.id for m in memory.messages] == [m.id for m in turn.new_messages]


def test_only_the_root_turn_is_projected_not_its_children() -> None:
    world = World()
    memory = InMemoryChatMemory()
    runner = world.runner(chat_memory_provider=lambda cid: memory)
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("t1")), "summary")

    root = runner.run(planner(model), "plan it", conversation_id="c")

    assert root.status is AgentTurnStatus.COMPLETED
    assert labels(memory.messages) == ["user:plan it", "ai:p1", "tool:p1", "ai:summary"]
    assert [m.id for m in memory.messages] == [m.id for m in root.new_messages]
    [child] = world.children(root.id)
    assert child.conversation_id is None
    assert_valid_protocol(memory.messages)


# -- the busy rule ---------------------------------------------------------------------------


def ready_turn(runner: AgentRunner) -> AgentTurn:
    return runner.start(answering()[1], "q", conversation_id="c")


def approval_turn(runner: AgentRunner) -> AgentTurn:
    @tool(requires_approval=True)
    def refund(amount: float) -> str:
        """Refund."""
        raise AssertionError("never approved, never run")

    model = Scripted(ask(ToolCall(id="r1", name="refund", arguments={"amount": 5.0})))
    return runner.run(Agent("chat", model.model, tools=[refund]), "q", conversation_id="c")


def form_turn(runner: AgentRunner) -> AgentTurn:
    @tool
    def address() -> str:
        """Ask for the address."""
        return str(AgentToolContext.current().request_user_input("address?"))

    model = Scripted(ask(ToolCall(id="f1", name="address", arguments={})))
    return runner.run(Agent("chat", model.model, tools=[address]), "q", conversation_id="c")


def retry_turn(runner: AgentRunner) -> AgentTurn:
    model = Scripted(ModelError("flaky", retryable=True))
    policy = AgentExecutionPolicy(retry=RetryPolicy(max_retries=1, initial_delay=60.0))
    return runner.run(
        Agent("chat", model.model),
        "q",
        conversation_id="c",
        options=AgentTurnOptions(policy=policy),
    )


def child_turn(runner: AgentRunner) -> AgentTurn:
    @tool(requires_approval=True)
    def publish() -> str:
        """Publish."""
        return "published"

    worker = Agent(
        "worker", Scripted(ask(ToolCall(id="w1", name="publish"))).model, tools=[publish]
    )
    runner.loader.register(worker)  # type: ignore[attr-defined]
    return runner.run(planner(Scripted(create(task("t1")))), "q", conversation_id="c")


@pytest.mark.parametrize(
    ("setup", "status"),
    [
        (ready_turn, AgentTurnStatus.READY),
        (approval_turn, AgentTurnStatus.WAITING_FOR_APPROVAL),
        (form_turn, AgentTurnStatus.WAITING_FOR_USER),
        (retry_turn, AgentTurnStatus.RETRY_SCHEDULED),
        (child_turn, AgentTurnStatus.WAITING_FOR_CHILD),
    ],
)
def test_busy_exception_names_the_active_turn_and_its_status(
    setup: Callable[[AgentRunner], AgentTurn], status: AgentTurnStatus
) -> None:
    store = CountingStore()
    memories: dict[str, InMemoryChatMemory] = {}
    runner = AgentRunner(
        turn_store=store,
        chat_memory_provider=lambda cid: memories.setdefault(cid, InMemoryChatMemory()),
    )
    active = setup(runner)
    assert active.status is status
    created = len(store.creates)
    other_model, other = answering()

    with pytest.raises(AgentConversationBusyException) as busy:
        runner.run(other, "me too", conversation_id="c")

    assert busy.value.conversation_id == "c"
    assert busy.value.active_turn_id == active.id
    assert busy.value.status is status
    assert active.id in str(busy.value) and status.value in str(busy.value)
    assert len(store.creates) == created and other_model.calls == 0
    # another conversation is not affected
    assert runner.run(other, "elsewhere", conversation_id="c2").status is AgentTurnStatus.COMPLETED

    # once the active turn has ended, the conversation takes a new turn with a valid history
    assert runner.cancel(active.id).status is AgentTurnStatus.CANCELLED
    after = runner.run(other, "now", conversation_id="c")
    assert after.status is AgentTurnStatus.COMPLETED
    assert_valid_protocol(other_model.requests[-1].messages)


def test_busy_while_the_active_turn_is_mid_step() -> None:
    memory = InMemoryChatMemory()
    runner = conversation_runner(memory)
    seen: list[AgentConversationBusyException] = []
    _, other = answering()

    @tool
    def escalate() -> str:
        """Try to open a second turn in the same conversation."""
        try:
            runner.run(other, "second", conversation_id="c")
        except AgentConversationBusyException as exc:
            seen.append(exc)
            return "busy"
        return "not busy"

    model = Scripted(ask(ToolCall(id="e1", name="escalate")), "done")
    turn = runner.run(Agent("chat", model.model, tools=[escalate]), "first", conversation_id="c")

    assert turn.status is AgentTurnStatus.COMPLETED
    [exc] = seen
    assert (exc.conversation_id, exc.active_turn_id, exc.status) == (
        "c",
        turn.id,
        AgentTurnStatus.RUNNING,
    )
    assert [m.content for m in turn.messages if isinstance(m, ToolMessage)] == ["busy"]


def test_a_cancelled_turns_history_is_closed_before_the_next_turn() -> None:
    memory = InMemoryChatMemory()
    runner = conversation_runner(memory)
    first = approval_turn(runner)

    cancelled = runner.cancel(first.id, reason="customer left")

    assert cancelled.status is AgentTurnStatus.CANCELLED
    assert labels(memory.messages) == [
        "user:q",
        "ai:r1",
        "tool:r1",
        "ai:" + ("The previous turn ended before completion: customer left"),
    ]
    closing_tool = memory.messages[2]
    assert isinstance(closing_tool, ToolMessage) and closing_tool.is_error
    assert closing_tool.content == "Tool call was not completed: customer left"

    model, agent = answering("hello again")
    second = runner.run(agent, "are you there?", conversation_id="c")

    assert second.status is AgentTurnStatus.COMPLETED
    sent = model.requests[0].messages
    assert labels(sent[1:5]) == labels(memory.messages[:4])
    assert_valid_protocol(sent)
    assert isinstance(sent[-1], UserMessage) and sent[-1].text == "are you there?"


# -- 50 callers at once ------------------------------------------------------------------------


def test_fifty_threads_one_conversation_exactly_one_turn() -> None:
    n = 50
    store = CountingStore()
    loader = InMemoryAgentLoader()
    memory = InMemoryChatMemory()
    start = threading.Barrier(n, timeout=10)
    everyone_tried = threading.Barrier(n, timeout=10)

    def answer(request: Any) -> AiMessage:
        everyone_tried.wait()  # the winner's model blocks until the 49 others have failed
        return AiMessage("served")

    agent = Agent("chat", Scripted(then=answer).model)
    loader.register(agent)
    turns: list[AgentTurn] = []
    busy: list[AgentConversationBusyException] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def caller(i: int) -> None:
        runner = conversation_runner(memory, store, loader)
        try:
            start.wait()
            try:
                turn = runner.run(agent, f"hello {i}", conversation_id="c1")
            except AgentConversationBusyException as exc:
                with lock:
                    busy.append(exc)
                everyone_tried.wait()
                return
            with lock:
                turns.append(turn)
        except BaseException as exc:  # noqa: BLE001 - reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)

    assert not errors, errors
    assert len(store.creates) == 1
    [winner] = turns
    assert winner.status is AgentTurnStatus.COMPLETED
    assert len(busy) == n - 1
    assert {e.active_turn_id for e in busy} == {winner.id}
    assert {e.conversation_id for e in busy} == {"c1"}
    assert all(not e.status.is_terminal for e in busy)
    assert labels(memory.messages) == [labels(winner.new_messages)[0], "ai:served"]


# -- bad input -------------------------------------------------------------------------------


def test_history_and_conversation_id_exclude_each_other() -> None:
    store = CountingStore()
    model, agent = answering()
    runner = conversation_runner(InMemoryChatMemory(), store)

    with pytest.raises(ValueError, match="not both"):
        runner.run(agent, "q", history=[UserMessage("old")], conversation_id="c")
    with pytest.raises(ValueError, match="not both"):
        runner.start(agent, "q", history=[], conversation_id="c")

    assert store.creates == [] and model.calls == 0


def test_conversation_mode_needs_a_memory_provider() -> None:
    store = CountingStore()
    model, agent = answering()

    with pytest.raises(ConfigurationError, match="chat_memory_provider"):
        AgentRunner(turn_store=store).run(agent, "q", conversation_id="c")

    assert store.creates == [] and model.calls == 0
