"""The seed's rules of a turn's record (counters, tree, history, events), on every store.

Each test quotes the seed (shared seeds: the AgentTurn and AgentRunner documents) and
glosses it in English. tests/stores/test_seed_conformance.py has the runner's rules.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentConversationBusyException,
    AgentEventType,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurn,
    AgentTurnOptions,
    AgentTurnPhase,
    AgentTurnStatus,
    AgentTurnStore,
    AgentWorker,
    AiMessage,
    ConcurrentModificationError,
    FunctionModel,
    InMemoryAgentLoader,
    InMemoryChatMemory,
    InvalidResumeError,
    Message,
    ModelRequest,
    SuspensionType,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    tool,
)
from tests.support.plans import Scripted, Workers, ask, create, planner, task
from tests.support.scripts import EventLog
from tests.support.seed import (
    CheckingMemory,
    FlakyMemory,
    Ledger,
    Meeting,
    Memories,
    ending,
    policy_options,
    retry_turn,
    together,
)

S = AgentTurnStatus
E = AgentEventType


def test_counters_are_kept_across_resumes_and_restores(runners: Callable[[], AgentRunner]) -> None:
    # 「int iterations = turn.getIterationCount(); int steps = turn.getStepCount(); int toolCalls =
    # turn.getToolCallCount(); long totalTokens = turn.getTotalTokens();」「Turn 包含……预算计数」
    # Gloss: a turn's counts (iterations, steps, tool calls, tokens) are part of its
    # snapshot and go on counting across a suspension, a resume and another process.
    ledger = Ledger()
    turn = runners().run(
        ledger.refund_agent(usage=Usage(input_tokens=3, output_tokens=4)), "refund me"
    )
    waiting = runners().restore(turn.id)
    assert (waiting.iteration_count, waiting.step_count, waiting.total_tokens) == (1, 2, 7)

    runners().resume(turn.id, AgentResumeCommand.approve_tool("r1"))

    done = runners().restore(turn.id)
    assert done.status is S.COMPLETED
    assert (done.iteration_count, done.step_count, done.tool_call_count) == (2, 4, 1)
    assert done.total_tokens == 7


def test_max_steps_counts_every_step_of_the_turn(runners: Callable[[], AgentRunner]) -> None:
    # 「MAX_STEPS_REACHED | Runner 总推进次数达到上限」
    # Gloss: max_steps bounds the turn's total number of steps, a suspension in between:
    # model, approval request, the approved tool, then no further model step.
    ledger = Ledger()
    turn = runners().run(ledger.refund_agent(), "refund me", options=policy_options(max_steps=3))
    assert turn.status is S.WAITING_FOR_APPROVAL and turn.step_count == 2

    ended = runners().resume(turn.id, AgentResumeCommand.approve_tool("r1"))

    assert ended.status is S.MAX_STEPS_REACHED and ended.step_count == 3
    assert ledger.entries == [f"{turn.id}:r1"]


def test_a_form_is_answered_on_the_original_turn(runners: Callable[[], AgentRunner]) -> None:
    # 「WAITING_FOR_USER 和 WAITING_FOR_APPROVAL 不是普通消息可以覆盖的状态，必须使用原 Turn 的
    # resume(...) 提交表单或审批命令。」「重试和审批恢复会回到快照记录的阶段。」
    # Gloss: a form is answered with user_input on the turn that asked, which resumes in
    # the saved phase (TOOLS) and re-runs that tool with the data; continue does not fit.
    @tool
    def address() -> str:
        """Ask for the address."""
        return f"shipping to {AgentToolContext.current().request_user_input('address?')}"

    model = Scripted(ask(ToolCall(id="f1", name="address")), "shipped")
    turn = runners().run(Agent("a", model.model, tools=[address]), "ship it")
    waiting = runners().restore(turn.id)
    assert (waiting.status, waiting.phase) == (S.WAITING_FOR_USER, AgentTurnPhase.TOOLS)
    with pytest.raises(InvalidResumeError):
        runners().resume(turn.id, AgentResumeCommand.continue_turn())

    done = runners().resume(turn.id, AgentResumeCommand.user_input("Main St 1", call_id="f1"))

    assert done.status is S.COMPLETED and model.calls == 2
    answers = [m for m in done.messages if isinstance(m, ToolMessage)]
    assert [(m.call_id, m.content) for m in answers] == [("f1", "shipping to Main St 1")]


def test_every_delegation_is_its_own_turn_in_one_tree(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「父 Agent 每次调用子 Agent 都会创建一个独立 Turn。」「子 Turn 通过 parentTurnId 指向直接父
    # 任务，通过 rootTurnId 关联整棵任务树。根 Turn 的 rootTurnId 等于自身 ID。」
    # Gloss: each delegation creates its own child turn, pointing at its parent and at
    # the root of the tree; the root's root id is its own id.
    loader.register(Workers().agent())
    store = make_store()
    root = AgentRunner(turn_store=store, agent_loader=loader).run(
        planner(Scripted(create(task("t1"), task("t2")), "both done")), "go"
    )

    assert root.status is S.COMPLETED and root.root_turn_id == root.id
    children = [make_store().load(c) for c in store.children_of(root.id)]
    assert len({c.id for c in children}) == 2
    assert {(c.parent_turn_id, c.root_turn_id, c.status) for c in children} == {
        (root.id, root.id, S.COMPLETED)
    }


def test_the_conversation_id_is_restored_with_the_snapshot(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「绑定的 conversationId 会作为 Turn metadata 随 Snapshot 恢复。」
    # Gloss: the conversation a turn is bound to is restored with its snapshot.
    memories = Memories()
    turn = retry_turn(memories.runner(make_store(), loader), "conv-7")

    restored = AgentRunner(turn_store=make_store(), agent_loader=loader).restore(turn.id)

    assert restored.conversation_id == "conv-7"


def test_messages_reach_the_memory_only_after_their_save(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「Snapshot 成功保存后，再把本轮新增消息幂等投影到 ChatMemory」
    # Gloss: new messages are projected to ChatMemory only once the snapshot holding them
    # is saved, and each only once.
    memory = CheckingMemory(make_store())
    runner = AgentRunner(
        turn_store=make_store(), agent_loader=loader, chat_memory_provider=lambda cid: memory
    )

    done = runner.run(Agent("a", Scripted("hello").model), "hi", conversation_id="c")

    assert done.status is S.COMPLETED and memory.turn_id == done.id and memory.unsaved == []
    assert [m.id for m in memory.messages] == [m.id for m in done.messages]


def test_a_failing_memory_never_fails_the_turn_and_restore_projects_again(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「ChatMemory 写入失败不会把已经正确保存的 Turn 改成失败，AgentTurnStore 始终是执行状态的事实
    # 来源。」「恢复 Turn 时也会重试投影。」
    # Gloss: a failing memory write never fails a saved turn (the store is the truth);
    # restoring the turn projects again.
    memory = FlakyMemory()

    def runner() -> AgentRunner:
        return AgentRunner(
            turn_store=make_store(), agent_loader=loader, chat_memory_provider=lambda cid: memory
        )

    turn = runner().run(Agent("a", Scripted("hello").model), "hi", conversation_id="c")
    assert turn.status is S.COMPLETED and memory.messages == []

    memory.down = False
    restored = runner().restore(turn.id)

    assert [m.id for m in memory.messages] == [m.id for m in restored.messages]


def test_the_event_log_keeps_the_original_failure(make_store: Callable[[], AgentTurnStore]) -> None:
    # 「页面历史仍保留原始工具、取消和失败事件；收束消息主要用于保证后续模型请求的协议有效性。」
    # Gloss: the closing messages fix the model's history; the page's history (the event
    # log) still shows the original tool failure and the turn's failure.
    memories = Memories()
    store = make_store()
    turn = ending["FAILED"](memories.runner(store, InMemoryAgentLoader()), "c")

    types = [e.type for e in store.read_events(turn.root_turn_id) if e.turn_id == turn.id]

    assert E.TOOL_FAILED in types and types[-1] is E.TURN_FAILED
    assert types.index(E.TOOL_FAILED) < types.index(E.TURN_FAILED)


def test_a_scheduled_retry_holds_no_thread(runners: Callable[[], AgentRunner]) -> None:
    # 「审批、用户输入、子 Turn 和延迟重试形成阻塞边界，不会占用线程等待。」
    # Gloss: a delayed retry is a blocking boundary: run returns at once with the turn
    # RETRY_SCHEDULED, and no thread sleeps the delay away.
    began = time.monotonic()
    turn = retry_turn(runners(), initial_delay=60.0)

    assert turn.status is S.RETRY_SCHEDULED and time.monotonic() - began < 5.0
    assert turn.next_runnable_at is not None and turn.next_runnable_at > time.time() + 50


def test_streaming_is_kept_when_another_process_runs_the_turn(
    runners: Callable[[], AgentRunner],
) -> None:
    # 「streaming(true) 设置当前 Turn 的模型调用方式，并随 Snapshot 持久化。……从 Snapshot 恢复或由
    # Worker 执行时仍会保持一致。」
    # Gloss: the streaming choice is saved with the turn; a process that restores it
    # calls the model the same way.
    used: list[str] = []

    def generate(request: ModelRequest) -> str:
        used.append("generate")
        return "whole"

    def stream(request: ModelRequest) -> Iterator[str]:
        used.append("stream")
        yield "in parts"

    agent = Agent("a", FunctionModel(generate, stream_fn=stream))
    turn = runners().start(agent, "hi", options=AgentTurnOptions(streaming=True))

    done = runners().run_until_blocked(runners().restore(turn.id))

    assert done.status is S.COMPLETED and done.final_output == "in parts"
    assert used == ["stream"]


def test_the_history_is_read_with_the_agents_message_limit(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「Runner 会从 ChatMemory.getModelMessages(agent.getMaxAttachedMessages()) 分页读取最近的
    # 模型可见历史，不会把完整业务会话复制进 Turn。」
    # Gloss: the runner asks the memory for at most the agent's max_attached_messages and
    # copies only that window into the turn.
    asked: list[int | None] = []

    class Recording(InMemoryChatMemory):
        def get_model_messages(self, max_messages: int | None) -> list[Message]:
            asked.append(max_messages)
            return super().get_model_messages(max_messages)

    old = [m for n in range(5) for m in (UserMessage(f"q{n}"), AiMessage(f"a{n}"))]
    memory = Recording(old)
    runner = AgentRunner(
        turn_store=make_store(), agent_loader=loader, chat_memory_provider=lambda cid: memory
    )
    agent = Agent("a", Scripted("ok").model, max_attached_messages=4)

    turn = runner.run(agent, "q5", conversation_id="c")

    assert asked == [4]
    stored = make_store().load(turn.id).messages
    assert [m.id for m in stored[:4]] == [m.id for m in old[-4:]] and len(stored) == 6


def test_suspensions_and_ends_are_told_to_listeners_with_their_tree(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「TURN_SUSPENDED 不表示执行完毕。」「inbox.markTurnFinished(event.getTurnId(),
    # event.getRootTurnId(), event.getType(), event.getEventId());」
    # Gloss: a wait is told as TURN_SUSPENDED (not an end); every event names its turn,
    # its root and its own id, so a listener can record a tree's ends idempotently.
    log = EventLog()
    runner = AgentRunner(turn_store=make_store(), agent_loader=loader)
    runner.add_event_listener(log)
    loader.register(Ledger().refund_agent())
    plan = planner(Scripted(create(task("t1", agent="refunder")), "done"), subs=("refunder",))
    root = runner.run(plan, "go")
    [child_id] = make_store().children_of(root.id)

    assert root.status is S.WAITING_FOR_CHILD
    suspended = {e.turn_id for e in log.of(E.TURN_SUSPENDED)}
    assert suspended == {root.id, child_id}
    runner.resume(root.id, AgentResumeCommand.approve_tool("r1"))

    ends = [e for e in log.events if e.type is E.TURN_COMPLETED]
    assert {(e.turn_id, e.root_turn_id) for e in ends} == {(child_id, root.id), (root.id, root.id)}
    assert len({e.event_id for e in log.events}) == len(log.events)


def test_two_concurrent_submitted_resumes_exactly_one_wins(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「业务层完成幂等、重试和审计后调用 submitResume」「由 Store 分配版本」
    # Gloss: two callbacks submitting the same approval at once: the store's version lets
    # exactly one through; the other conflicts and nothing is applied twice.
    ledger = Ledger()
    turn = AgentRunner(turn_store=make_store(), agent_loader=loader).run(
        ledger.refund_agent(), "refund me"
    )
    meeting = Meeting()
    submitters = [
        AgentRunner(turn_store=meeting.wrap(make_store()), agent_loader=loader) for _ in "ab"
    ]
    approve = AgentResumeCommand.approve_tool("r1").with_metadata(approver="u-7")

    outcomes = together(
        {
            f"resumer-{i}": partial(r.submit_resume, turn.id, approve)
            for i, r in enumerate(submitters)
        }
    )

    errors = [o for o in outcomes.values() if isinstance(o, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], ConcurrentModificationError), outcomes
    stored = make_store().load(turn.id)
    assert stored.version == turn.version + 1 and len(stored.resume_log) == 1
    done = AgentRunner(turn_store=make_store(), agent_loader=loader).run_until_blocked(
        AgentRunner(turn_store=make_store(), agent_loader=loader).restore(turn.id)
    )
    assert done.status is S.COMPLETED and ledger.entries == [f"{turn.id}:r1"]


def test_a_suspension_is_restored_with_its_call_and_phase(
    runners: Callable[[], AgentRunner],
) -> None:
    # 「Turn 包含消息历史、当前状态与阶段、待执行 ToolCall、暂停信息」「重试和审批恢复会回到快照
    # 记录的阶段。」
    # Gloss: a waiting turn's record holds its pending call and suspension (type, call,
    # phase to resume in); the approval resumes in that phase, with no new model decision.
    ledger = Ledger()
    turn = runners().run(ledger.refund_agent(), "refund me")

    waiting = runners().restore(turn.id)
    suspension = waiting.suspension
    assert suspension is not None and suspension.type is SuspensionType.TOOL_APPROVAL
    assert (suspension.correlation_id, suspension.resume_phase) == ("r1", AgentTurnPhase.TOOLS)
    assert [c.id for c in waiting.pending_tool_calls] == ["r1"]

    done = runners().resume(turn.id, AgentResumeCommand.approve_tool("r1"))
    assert done.status is S.COMPLETED and done.iteration_count == 2
    assert ledger.entries == [f"{turn.id}:r1"]


def test_one_runner_serves_many_turns_at_once(runners: Callable[[], AgentRunner]) -> None:
    # 「Runner 自身不把 Turn 保存在实例字段中，适合作为应用级对象复用；真正的持久状态位于
    # AgentTurnStore。」「应用层共享一个配置完整的 Runner」
    # Gloss: one runner, shared by the application, runs many turns in parallel threads
    # without mixing them: each tool sees its own turn, each turn its own answer.
    shared = runners()
    gate = threading.Barrier(4, timeout=10)

    @tool
    def whoami(label: str) -> str:
        """Say which turn this call belongs to."""
        gate.wait()
        ctx = AgentToolContext.current()
        return f"{label}:{ctx.turn_id}:{ctx.metadata['label']}"

    def run(label: str) -> AgentTurn:
        reply = ask(ToolCall(id="w", name="whoami", arguments={"label": label}))
        model = Scripted(reply, then=lambda request: request.messages[-1].content)
        opts = AgentTurnOptions(metadata={"label": label})
        return shared.run(Agent("a", model.model, tools=[whoami]), label, options=opts)

    outcomes = together({label: partial(run, label) for label in "wxyz"})

    for label, turn in outcomes.items():
        assert isinstance(turn, AgentTurn) and turn.status is S.COMPLETED, turn
        assert turn.final_output == f"{label}:{turn.id}:{label}"


def test_a_worker_runs_the_version_the_turn_was_started_with(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # 「restore(...) 只从 Store 恢复 Snapshot，并按其中的 Agent ID 与版本装配 Agent。恢复后可由
    # 调用方继续执行，也可由 AgentWorker 调度。」
    # Gloss: a worker that picks the turn up assembles the agent of the snapshot's version,
    # not the latest one registered since.
    loader = InMemoryAgentLoader([Agent("a", Scripted("v1").model, version="1")])
    queued = AgentRunner(turn_store=make_store(), agent_loader=loader).start("a", "hi")
    loader.register(Agent("a", Scripted("v2").model, version="2"))
    runner = AgentRunner(turn_store=make_store(), agent_loader=loader, dispatcher=lambda _: None)

    worker = AgentWorker(runner, worker_id="w1")
    while worker.run_once():
        pass

    done = make_store().load(queued.id)
    assert (done.status, done.final_output, done.agent_version) == (S.COMPLETED, "v1", "1")


def test_the_store_assigns_the_version_of_a_save(runners: Callable[[], AgentRunner]) -> None:
    # 「正常业务代码应通过 runner.saveSnapshot(turn) 持久化，由 Store 分配版本，而不是只调用
    # toSnapshot() 后自行覆盖数据。」
    # Gloss: saving goes through the runner and the store numbers it; a copy read before
    # that save cannot overwrite it.
    turn = runners().start(Agent("a", Scripted("ok").model), "hi")
    first, stale = runners().restore(turn.id), runners().restore(turn.id)

    assert runners().save_snapshot(first) == turn.version + 1
    with pytest.raises(ConcurrentModificationError):
        runners().save_snapshot(stale)
    assert runners().restore(turn.id).version == turn.version + 1


@pytest.mark.parametrize("cid", ["会话-1001", "tenant-{a}:c1", "}{ x/y\\z"])
def test_a_conversation_id_is_any_stable_text(
    cid: str, make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「ChatMemoryProvider 只负责根据稳定的 conversationId 定位业务系统维护的 ChatMemory」
    # Gloss: the conversation id is the business system's own stable text; any such text
    # binds a turn, is refused while busy and takes the next turn once this one ended.
    memories = Memories()
    runner = memories.runner(make_store(), loader)
    first = retry_turn(runner, cid)

    with pytest.raises(AgentConversationBusyException) as busy:
        memories.runner(make_store(), loader).start(
            Agent("b", Scripted("x").model), "q", conversation_id=cid
        )
    assert (busy.value.conversation_id, busy.value.active_turn_id) == (cid, first.id)

    assert runner.cancel(first.id).status is S.CANCELLED
    nxt = runner.run(Agent("b", Scripted("next").model), "q2", conversation_id=cid)
    assert nxt.status is S.COMPLETED and make_store().load(nxt.id).conversation_id == cid


def test_a_cancel_during_the_first_model_call_ends_the_run_cancelled(
    runners: Callable[[], AgentRunner],
) -> None:
    # 「取消是协作式的：Store 先保存单调取消标志，Runner 在安全边界转换为 CANCELLED。它不保证
    # 立即中断已经发出的 HTTP 请求或工具函数。」
    # Gloss: a cancel only sets the flag; the runner running the turn ends it CANCELLED at
    # its next safe boundary (here right after the model call), before any tool runs.
    canceller = runners()
    ran: list[str] = []
    started: list[str] = []

    @tool
    def lookup() -> str:
        """Never reached: cancelled first."""
        ran.append("lookup")
        return "found"

    def decide(request: ModelRequest) -> Any:
        canceller.cancel(started[0])
        return ask(ToolCall(id="l1", name="lookup"))

    runner = runners()
    turn = runner.start(Agent("a", Scripted(decide).model, tools=[lookup]), "go")
    started.append(turn.id)

    ended = runner.run_until_blocked(turn)

    assert ended.status is S.CANCELLED and ran == []
    assert runners().restore(turn.id).status is S.CANCELLED
