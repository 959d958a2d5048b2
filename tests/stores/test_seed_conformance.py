"""The seed's rules that touch the store, one test each, on every store.

Each test quotes the seed (shared seeds: the AgentRunner and AgentTurn documents) and
glosses it in English. The rules of the pure state machine are in
tests/core/test_seed_conformance.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial

import pytest

from runner_core import (
    Agent,
    AgentBudget,
    AgentConversationBusyException,
    AgentNotFoundError,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurn,
    AgentTurnOptions,
    AgentTurnPhase,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    ConcurrentModificationError,
    InMemoryAgentLoader,
    InvalidResumeError,
    ModelError,
    RestoredError,
    RetryPolicy,
    SuspensionType,
    ToolCall,
    ToolMessage,
    tool,
)
from tests.support.plans import Scripted, ask, assert_valid_protocol, labels
from tests.support.seed import (
    Ledger,
    Meeting,
    Memories,
    child_waiting_turn,
    closed,
    ending,
    policy_options,
    retry_turn,
    running_turn,
    together,
)

S = AgentTurnStatus


# -- closing an abnormal end -----------------------------------------------------------------


@pytest.mark.parametrize("end", sorted(ending))
def test_closing_messages_reach_memory_and_the_next_turn_is_valid(
    end: str, make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「当 Turn 因取消、不可恢复错误、最大迭代次数、最大 Step 或预算耗尽而终止时，Runner 会在
    # 保存终态 Snapshot 前收束模型消息协议」「清除待执行 ToolCall 后保存 Snapshot，并将收束后的
    # 消息投影到 ChatMemory。」「因此，同一 conversationId 在收到 TURN_CANCELLED 或
    # TURN_FAILED 后可以开始新的普通 Turn，其模型历史仍保持完整的
    # assistant -> tool -> assistant -> user 边界。」
    # Gloss: every abnormal end closes the history (a ToolMessage per pending call, one
    # AiMessage) before the terminal save, projects it to ChatMemory, and the next turn of
    # the conversation starts from a valid history.
    memories = Memories()
    ended = ending[end](memories.runner(make_store(), loader), "c")
    assert ended.status.value == end

    stored = memories.runner(make_store(), loader).restore(ended.id)
    assert closed(stored) and stored.final_output is None
    memory = memories.by_id["c"].messages
    assert [m.id for m in memory] == [m.id for m in stored.messages]
    assert_valid_protocol(memory)

    model = Scripted("hello again")
    nxt = memories.runner(make_store(), loader).run(
        Agent("b", model.model, instructions="Be brief."), "next", conversation_id="c"
    )
    assert nxt.status is S.COMPLETED
    sent = model.requests[0].messages
    assert labels(sent[1:-1]) == labels(memory)
    assert_valid_protocol(sent)


def test_a_retry_schedule_does_not_close_the_history(runners: Callable[[], AgentRunner]) -> None:
    # 「RETRY_SCHEDULED 不会触发收束，因为它还会从原 Phase 继续恢复」
    # Gloss: a scheduled retry adds no closing messages; it resumes from the saved phase.
    turn = retry_turn(runners())
    stored = runners().restore(turn.id)
    assert stored.status is S.RETRY_SCHEDULED
    assert labels(stored.messages) == ["user:q"]
    assert stored.phase is AgentTurnPhase.MODEL


# -- the busy check ----------------------------------------------------------------------------


def test_busy_while_running(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「RUNNING、WAITING_FOR_CHILD 和 RETRY_SCHEDULED 也会阻止新的普通 Turn。」
    # Gloss: RUNNING (as WAITING_FOR_CHILD and RETRY_SCHEDULED) also refuses a new turn.
    memories = Memories()
    seen: list[AgentConversationBusyException] = []
    other = memories.runner(make_store(), loader)
    model = Scripted(then="never")

    def probe() -> None:
        with pytest.raises(AgentConversationBusyException) as busy:
            other.run(Agent("b", model.model), "me too", conversation_id="c")
        seen.append(busy.value)

    turn = running_turn(memories.runner(make_store(), loader), "c", probe)

    assert turn.status is S.COMPLETED and model.calls == 0
    [busy] = seen
    assert (busy.conversation_id, busy.active_turn_id, busy.status) == ("c", turn.id, S.RUNNING)


@pytest.mark.parametrize("status", [S.WAITING_FOR_CHILD, S.RETRY_SCHEDULED])
def test_busy_while_waiting_for_a_child_or_a_retry(
    status: AgentTurnStatus, make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「RUNNING、WAITING_FOR_CHILD 和 RETRY_SCHEDULED 也会阻止新的普通 Turn。Turn 进入终态后，
    # 会话可以开始下一轮。」
    # Gloss: these states refuse a new plain turn; once the turn is terminal the
    # conversation may start its next turn.
    memories = Memories()
    first = memories.runner(make_store(), loader)
    if status is S.WAITING_FOR_CHILD:
        active = child_waiting_turn(first, loader, "c")
    else:
        active = retry_turn(first, "c")
    assert active.status is status
    model = Scripted("fine")
    other = memories.runner(make_store(), loader)
    before = [m.id for m in memories.by_id["c"].messages]

    with pytest.raises(AgentConversationBusyException) as busy:
        other.run(Agent("b", model.model), "me too", conversation_id="c")

    assert (busy.value.active_turn_id, busy.value.status) == (active.id, status)
    # 「排队消息在真正创建新 Turn 前不要写入 ChatMemory」: a refused message is not in memory
    assert model.calls == 0 and [m.id for m in memories.by_id["c"].messages] == before
    assert other.cancel(active.id).status is S.CANCELLED
    assert other.run(Agent("b", model.model), "now", conversation_id="c").status is S.COMPLETED
    assert_valid_protocol(model.requests[0].messages)


# -- restore ------------------------------------------------------------------------------------


def test_restore_assembles_the_agent_by_id_and_version(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # 「restore(...) 只从 Store 恢复 Snapshot，并按其中的 Agent ID 与版本装配 Agent。」
    # Gloss: restore reads the snapshot and builds the agent of the id and version in it.
    v1, v2 = Scripted("from v1"), Scripted("from v2")
    loader = InMemoryAgentLoader([Agent("a", v1.model, version="1")])
    queued = AgentRunner(turn_store=make_store(), agent_loader=loader).start("a", "hi")
    loader.register(Agent("a", v2.model, version="2"))  # now the latest

    restored = AgentRunner(turn_store=make_store(), agent_loader=loader).restore(queued.id)
    assert (restored.agent.id, restored.agent.version) == ("a", "1")
    done = AgentRunner(turn_store=make_store(), agent_loader=loader).run_until_blocked(restored)
    assert done.final_output == "from v1" and v2.calls == 0

    only_v2 = InMemoryAgentLoader([Agent("a", v2.model, version="2")])
    with pytest.raises(AgentNotFoundError):
        AgentRunner(turn_store=make_store(), agent_loader=only_v2).restore(queued.id)


def test_a_restored_error_keeps_the_type_name_and_message(
    runners: Callable[[], AgentRunner],
) -> None:
    # 「失败恢复自 Snapshot 后，异常会以恢复异常表示，类型名与消息保存在快照中，不能依赖原异常
    # 对象仍然存在。」「只有正常完成时 getFinalOutput() 才是最终答案。」
    # Gloss: a failure restored from a snapshot is a restored error carrying the type name
    # and message; only a completed turn has a final output.
    class LedgerDownError(Exception):
        pass

    def fail(_: object) -> str:
        raise LedgerDownError("ledger is down")

    failed = runners().run(Agent("a", Scripted(fail).model), "hi")
    assert failed.status is S.FAILED and isinstance(failed.error, LedgerDownError)

    restored = runners().restore(failed.id)
    error = restored.error
    assert isinstance(error, RestoredError)
    assert (error.type_name, error.message) == ("LedgerDownError", "ledger is down")
    assert restored.final_output is None


# -- iterations, retries and budgets ------------------------------------------------------------


def test_failed_model_calls_count_as_iterations(runners: Callable[[], AgentRunner]) -> None:
    # 「MAX_ITERATIONS_REACHED | 模型调用达到上限」「int iterations = turn.getIterationCount();」
    # Gloss: the iteration count counts model calls, failed ones included, and the limit
    # on model calls is its own terminal state.
    model = Scripted(then=ModelError("busy", retryable=True))
    opts = policy_options(retry=RetryPolicy(max_retries=5, initial_delay=60.0))
    turn = runners().run(Agent("a", model.model, max_iterations=2), "hi", options=opts)
    assert runners().restore(turn.id).iteration_count == 1

    turn = runners().resume(turn.id, AgentResumeCommand.continue_turn())
    assert turn.status is S.RETRY_SCHEDULED and turn.iteration_count == 2
    turn = runners().resume(turn.id, AgentResumeCommand.continue_turn())

    assert turn.status is S.MAX_ITERATIONS_REACHED and model.calls == 2
    assert runners().restore(turn.id).iteration_count == 2


def test_the_retry_delay_follows_the_policy(runners: Callable[[], AgentRunner]) -> None:
    # 「可恢复异常保存为 RETRY_SCHEDULED」「RETRY_SCHEDULED | 等待 nextRunnableAt 到期」
    # Gloss: a recoverable error saves RETRY_SCHEDULED, due at next_runnable_at; the delay
    # of retry n is min(max_delay, initial_delay * multiplier ** (n - 1)).
    policy = RetryPolicy(max_retries=4, initial_delay=10.0, multiplier=3.0, max_delay=50.0)
    model = Scripted(*[ModelError("busy", retryable=True)] * 3, "done")
    turn = runners().run(Agent("a", model.model), "hi", options=policy_options(retry=policy))
    delays = []
    while turn.status is S.RETRY_SCHEDULED:
        runner = runners()
        # Due this long after the save, not after a test on a loaded machine got to look
        # (the wait counts from the failure, just before the save; the save is stamped by
        # the local clock, the due time by the store's, so a few ms either way).
        state = turn.state
        assert state.next_runnable_at is not None and state.suspension is not None
        lag = state.suspension.metadata["delay"] - (state.next_runnable_at - state.updated_at)
        assert -0.25 < lag < 2.0, lag
        delays.append(state.suspension.metadata["delay"])
        turn = runner.resume(turn.id, AgentResumeCommand.continue_turn())

    assert turn.status is S.COMPLETED
    assert [policy.delay(n) for n in (1, 2, 3)] == [10.0, 30.0, 50.0]
    assert delays == [10.0, 30.0, 50.0]


def test_continue_forces_an_early_retry(runners: Callable[[], AgentRunner]) -> None:
    # 「resume(...) 恢复后立即执行」 with the resume commands of the runner
    # Gloss: retry() waits for next_runnable_at; continue_turn() resumes a scheduled retry
    # at once, and resume runs it immediately.
    turn = retry_turn(runners())
    with pytest.raises(InvalidResumeError, match="not due"):
        runners().resume(turn.id, AgentResumeCommand.retry())

    done = runners().resume(turn.id, AgentResumeCommand.continue_turn())
    assert done.status is S.COMPLETED and done.final_output == "done"


def test_a_wall_clock_budget_counts_waiting_time(runners: Callable[[], AgentRunner]) -> None:
    # 「审批、用户输入、子 Turn 和延迟重试形成阻塞边界，不会占用线程等待。」 and the budget
    # checked at each step: 「step 处理取消、Lease、预算、规划、上下文和 Middleware。」
    # Gloss: waiting costs no thread but it is time: a duration budget counts it, so an
    # approval given after the budget ran out ends the turn before the tool runs.
    ledger = Ledger()
    opts = policy_options(budget=AgentBudget(max_duration_seconds=0.3))
    turn = runners().run(ledger.refund_agent(), "refund me", options=opts)
    assert turn.status is S.WAITING_FOR_APPROVAL

    time.sleep(0.4)
    ended = runners().resume(turn.id, AgentResumeCommand.approve_tool("r1"))

    assert ended.status is S.BUDGET_EXCEEDED and ledger.entries == []
    assert (ended.terminal_reason or "").startswith("max_duration_seconds")
    assert closed(ended)


# -- resumes ------------------------------------------------------------------------------------


def test_two_concurrent_resumes_exactly_one_wins(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「同一个 AgentTurn 对象不应由两个线程同时直接推进。」 and the version the store assigns:
    # 「由 Store 分配版本，而不是只调用 toSnapshot() 后自行覆盖数据。」
    # Gloss: one turn is never advanced by two at once; the store's versions make exactly
    # one of two concurrent resumes win, the other conflicts, the tool runs once.
    ledger = Ledger()
    turn = AgentRunner(turn_store=make_store(), agent_loader=loader).run(
        ledger.refund_agent(), "refund me"
    )
    meeting = Meeting()
    runners = [
        AgentRunner(turn_store=meeting.wrap(make_store()), agent_loader=loader) for _ in "ab"
    ]
    approve = AgentResumeCommand.approve_tool("r1")
    outcomes = together(
        {f"resumer-{i}": partial(r.resume, turn.id, approve) for i, r in enumerate(runners)}
    )

    results = list(outcomes.values())
    assert [getattr(r, "status", None) for r in results].count(S.COMPLETED) == 1, results
    [loser] = [r for r in results if isinstance(r, BaseException)]
    assert isinstance(loser, ConcurrentModificationError), loser
    assert ledger.entries == [f"{turn.id}:r1"]
    assert make_store().load(turn.id).status is S.COMPLETED


def test_submit_resume_only_makes_the_turn_runnable(runners: Callable[[], AgentRunner]) -> None:
    # 「resume(...) 恢复后立即执行，submitResume(...) 只将 Turn 恢复为可运行状态。」
    # Gloss: resume runs at once; submit_resume only makes the turn runnable.
    ledger = Ledger()
    turn = runners().run(ledger.refund_agent(), "refund me")

    submitted = runners().submit_resume(turn.id, AgentResumeCommand.approve_tool("r1"))

    assert not submitted.status.is_blocked and not submitted.status.is_terminal
    assert ledger.entries == []
    done = runners().run_until_blocked(runners().restore(turn.id))
    assert done.status is S.COMPLETED and ledger.entries == [f"{turn.id}:r1"]


# -- save points ----------------------------------------------------------------------------------


def test_start_saves_a_ready_snapshot_and_runs_nothing(runners: Callable[[], AgentRunner]) -> None:
    # 「run(...) 和 start(...) 都先创建 READY Turn 并保存初始 Snapshot。」「start(...) 只返回
    # Turn，不会自行创建后台线程。」「根 Turn 的 rootTurnId 等于自身 ID。」
    # Gloss: start saves a READY turn and runs nothing; a root's root id is its own id.
    model = Scripted(then="never")
    threads = threading.active_count()
    turn = runners().start(Agent("a", model.model), "hi")
    assert threading.active_count() == threads

    stored = runners().restore(turn.id)
    assert (stored.status, stored.version, stored.step_count) == (S.READY, 0, 0)
    assert stored.root_turn_id == stored.id and stored.parent_turn_id is None
    assert model.calls == 0


def test_pending_calls_are_saved_before_any_tool_runs(runners: Callable[[], AgentRunner]) -> None:
    # 「模型返回 ToolCall 时，Runner 先记录 pendingToolCalls 并保存 Snapshot，随后才审批和执行。
    # 这个顺序是恢复一致性的关键。」
    # Gloss: the model's tool calls are saved as pending (phase TOOLS) before any runs.
    reader = runners()
    seen: list[tuple[AgentTurnPhase, list[str]]] = []

    @tool
    def lookup() -> str:
        """Look at the stored turn from another process."""
        stored = reader.store.load(AgentToolContext.current().turn_id)
        seen.append((stored.phase, [c.id for c in stored.pending_tool_calls]))
        return "found"

    calls = [ToolCall(id="l1", name="lookup"), ToolCall(id="l2", name="lookup")]
    turn = runners().run(Agent("a", Scripted(ask(*calls), "done").model, tools=[lookup]), "go")

    assert turn.status is S.COMPLETED
    assert seen == [(AgentTurnPhase.TOOLS, ["l1", "l2"]), (AgentTurnPhase.TOOLS, ["l2"])]


def test_cancellation_is_a_flag_honoured_at_a_safe_boundary(
    runners: Callable[[], AgentRunner],
) -> None:
    # 「取消是协作式的：Store 先保存单调取消标志，Runner 在安全边界转换为 CANCELLED。」
    # 「cancellationReason 会作为主动取消时的 {reason}；未配置时默认使用
    # turn cancelled by caller。」
    # Gloss: cancelling stores a monotonic flag; the runner ends the turn CANCELLED at a
    # safe boundary (here: after the running tool), the default reason filling the template.
    canceller = runners()
    ran: list[str] = []

    @tool
    def slow() -> str:
        """Get cancelled while running."""
        ran.append(AgentToolContext.current().call_id)
        canceller.cancel(AgentToolContext.current().turn_id)
        return "finished anyway"

    calls = [ToolCall(id="s1", name="slow"), ToolCall(id="s2", name="slow")]
    turn = runners().run(Agent("a", Scripted(ask(*calls)).model, tools=[slow]), "go")

    assert turn.status is S.CANCELLED and ran == ["s1"]
    tools = [m for m in turn.messages if isinstance(m, ToolMessage)]
    assert [(m.call_id, m.content) for m in tools] == [
        ("s1", "finished anyway"),
        ("s2", "Tool call was not completed: turn cancelled by caller"),
    ]
    assert closed(runners().restore(turn.id))


def test_metadata_and_streaming_survive_the_snapshot(runners: Callable[[], AgentRunner]) -> None:
    # 「metadata 用于业务订单号、租户 ID、用户 ID 等恢复后仍需使用的信息。值必须可序列化，并会
    # 进入 Snapshot。」「streaming(true) 设置当前 Turn 的模型调用方式，并随 Snapshot 持久化。」
    # 「快照是隔离副本」
    # Gloss: metadata and the streaming choice are saved in the snapshot and restored; a
    # change to a loaded copy's metadata reaches neither the store nor a reload.
    opts = AgentTurnOptions(metadata={"businessOrderId": "O-1001"}, streaming=True)
    runner = runners()
    turn = runner.start(Agent("a", Scripted("ok").model), "hi", options=opts)
    runner.store.load(turn.id).metadata["businessOrderId"] = "evil"

    for restored in (runner.restore(turn.id), runners().restore(turn.id)):
        assert restored.metadata == {"businessOrderId": "O-1001"} and restored.streaming is True


# -- planning -------------------------------------------------------------------------------------


def test_task_progress_shows_the_suspension(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「开启规划时，可用 getTaskPlan() 或 getTaskProgress() 查询不可变进度视图。」 and the
    # suspension a blocked turn keeps: 「Turn 包含……暂停信息……以及任务计划」
    # Gloss: the progress view of a planning turn shows its plan and what it waits for.
    memories = Memories()
    root = child_waiting_turn(memories.runner(make_store(), loader), loader, "c")
    assert root.status is S.WAITING_FOR_CHILD

    progress = (
        AgentRunner(turn_store=make_store(), agent_loader=loader).restore(root.id).task_progress
    )
    assert progress is not None
    assert (progress.completed, progress.total) == (0, 1)
    assert [t["status"] for t in progress.tasks] == ["RUNNING"]
    suspension = progress.suspension
    assert suspension is not None and suspension.type is SuspensionType.CHILD
    assert suspension.correlation_id == progress.tasks[0]["child_turn_id"]


# -- atomic creation and isolated copies ----------------------------------------------------------


def test_one_conversation_many_processes_exactly_one_turn(
    make_store: Callable[[], AgentTurnStore], loader: InMemoryAgentLoader
) -> None:
    # 「JDBC、Redis 或其他生产 Store 应实现 AgentTurnStore.findActiveTurn，并在 save(snapshot, -1)
    # 创建新 Turn 时使用数据库事务、唯一约束或 Redis 脚本实现跨进程原子保护」
    # Gloss: the busy check and the creation are one atomic store operation, across
    # processes: of many callers at once, exactly one creates a turn.
    n = 6
    memories = Memories()
    runners = [memories.runner(make_store(), loader) for _ in range(n)]
    gate = threading.Barrier(n, timeout=10)

    def start(runner: AgentRunner) -> AgentTurn:
        gate.wait()
        return runner.start(Agent("a", Scripted("ok").model), "hi", conversation_id="c")

    outcomes = list(together({f"p{i}": partial(start, r) for i, r in enumerate(runners)}).values())

    started = [o for o in outcomes if isinstance(o, AgentTurn)]
    assert len(outcomes) == n and len(started) == 1, outcomes
    [turn] = started
    busy = [o for o in outcomes if isinstance(o, AgentConversationBusyException)]
    assert {b.active_turn_id for b in busy} == {turn.id}


def test_a_loaded_snapshot_is_an_isolated_copy(runners: Callable[[], AgentRunner]) -> None:
    # 「快照是隔离副本，包含恢复所需状态」「不要绕过 Runner 直接修改快照」
    # Gloss: a snapshot is an isolated copy: changing one (its messages' lists included)
    # changes neither the stored turn nor the next load.
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    model = Scripted(ask(ToolCall(id="p", name="ping")), "done")
    runner = runners()
    turn = runner.run(Agent("a", model.model, tools=[ping]), "go")

    loaded = runner.store.load(turn.id)
    call = loaded.messages[1]
    assert isinstance(call, AiMessage)
    try:
        call.tool_calls.append(ToolCall(id="evil", name="ping"))
    except (TypeError, AttributeError):
        pass  # an immutable list is isolated too

    for again in (runner.store.load(turn.id), runners().store.load(turn.id)):
        message = again.messages[1]
        assert isinstance(message, AiMessage) and [c.id for c in message.tool_calls] == ["p"]
