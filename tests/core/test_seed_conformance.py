"""The seed's rules of the state machine itself, one test each, on the in-memory store.

Each test quotes the seed (shared seeds: the AgentRunner and AgentTurn documents) and
glosses it in English. Rules that touch the store run on every store in
tests/stores/test_seed_conformance.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runner_core import (
    Agent,
    AgentEventType,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnPhase,
    AgentTurnStatus,
    AgentWorker,
    AiMessage,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    InMemoryChatMemory,
    InvalidResumeError,
    SystemMessage,
    ToolCall,
    ToolError,
    ToolErrorStrategy,
    UserMessage,
    tool,
)
from tests.support.plans import Scripted, Workers, World, ask, create, planner, task
from tests.support.scripts import EventLog, content, tool_messages
from tests.support.seed import Ledger, closed, forget_child_results, policy_options

S = AgentTurnStatus
E = AgentEventType


# -- step results ---------------------------------------------------------------------------------


def test_a_step_result_holds_what_that_step_produced(runner: AgentRunner) -> None:
    # 「getResponse()：本步骤调用模型得到的响应；未调用模型时为 null。」
    # 「getToolMessages()：本步骤执行工具后写入的结果消息；没有工具结果时为空列表。」
    # Gloss: the response is the model's answer of this step (None without a model call);
    # the tool messages are this step's tool results (empty without any).
    @tool
    def lookup(n: int) -> int:
        """Echo."""
        return n

    calls = [
        ToolCall(id="a", name="lookup", arguments={"n": 1}),
        ToolCall(id="b", name="lookup", arguments={"n": 2}),
    ]
    turn = runner.start(Agent("a", Scripted(ask(*calls), "done").model, tools=[lookup]), "go")

    model_step = runner.step(turn)
    assert model_step.response is not None and model_step.tool_messages == []
    assert [c.id for c in model_step.response.message.tool_calls] == ["a", "b"]

    tool_step = runner.step(turn)
    assert tool_step.response is None and tool_step.error is None
    assert [(m.call_id, m.content) for m in tool_step.tool_messages] == [("a", "1"), ("b", "2")]
    assert tool_step.tool_messages == tool_messages(turn.messages)

    runner.run_until_blocked(turn)
    assert turn.status is S.COMPLETED


def test_a_failing_step_carries_its_error(runner: AgentRunner) -> None:
    # 「getError()：本步骤触发重试或失败时关联的异常；正常步骤通常为 null。」「运行是否继续、阻塞或
    # 终止……统一读取 AgentTurn.getStatus()。」
    # Gloss: the error is the exception that made this step retry or fail; whether the
    # turn goes on is read from the turn's status, not the step result.
    @tool
    def charge(card: str) -> str:
        """Charge a card; the second one fails."""
        if card == "bad":
            raise RuntimeError("card declined")
        return "charged"

    calls = [
        ToolCall(id="ok", name="charge", arguments={"card": "good"}),
        ToolCall(id="no", name="charge", arguments={"card": "bad"}),
    ]
    turn = runner.start(Agent("a", Scripted(ask(*calls)).model, tools=[charge]), "go")
    assert runner.step(turn).error is None

    failing = runner.step(turn)

    assert isinstance(failing.error, RuntimeError) and str(failing.error) == "card declined"
    assert turn.status is S.FAILED and turn.error is failing.error
    assert [(m.call_id, m.content) for m in failing.tool_messages] == [("ok", "charged")]


# -- the MODEL and TOOLS phases -------------------------------------------------------------------


def test_one_model_step_calls_the_model_once_and_tools_run_in_order(runner: AgentRunner) -> None:
    # 「MODEL 阶段一次 Step 最多调用模型一次。最终回答会结束 Turn；ToolCall 会被记录并在 TOOLS
    # 阶段按顺序处理。」
    # Gloss: a MODEL step calls the model at most once; a final answer ends the turn;
    # tool calls are recorded and handled in order in the TOOLS phase.
    order: list[str] = []

    @tool
    def note(x: str) -> str:
        """Note ``x``."""
        order.append(x)
        return x

    calls = [ToolCall(id=i, name="note", arguments={"x": i}) for i in ("z", "a", "m")]
    model = Scripted(ask(*calls), "final")
    turn = runner.start(Agent("a", model.model, tools=[note]), "go")

    runner.step(turn)
    assert (model.calls, turn.phase, order) == (1, AgentTurnPhase.TOOLS, [])
    runner.step(turn)
    assert (model.calls, turn.phase, order) == (1, AgentTurnPhase.MODEL, ["z", "a", "m"])
    runner.step(turn)
    assert (model.calls, turn.status, turn.final_output) == (2, S.COMPLETED, "final")


def test_missing_tool_call_ids_are_filled_per_iteration(runner: AgentRunner) -> None:
    # 「工具副作用使用 AgentToolContext.current().getIdempotencyKey() 返回的稳定调用 ID
    # 实现业务幂等。」
    # Gloss: every call has a stable id, also when the model sent none: it is filled as
    # {turn_id}-{iteration}-{index}, so the idempotency key is stable too.
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    blank = [ToolCall(id="", name="ping"), ToolCall(id="", name="ping")]
    model = Scripted(ask(*blank), ask(ToolCall(id="", name="ping")), "done")

    turn = runner.run(Agent("a", model.model, tools=[ping]), "go")

    ids = [m.call_id for m in tool_messages(turn.messages)]
    assert ids == [f"{turn.id}-1-0", f"{turn.id}-1-1", f"{turn.id}-2-0"]
    sent = [c.id for m in turn.messages if isinstance(m, AiMessage) for c in m.tool_calls]
    assert sent == ids


# -- tool errors ----------------------------------------------------------------------------------


def test_a_tool_error_goes_back_to_the_model_even_under_fail_turn(runner: AgentRunner) -> None:
    # 「模型或工具异常统一进入失败处理……确定性错误进入 FAILED。」 — except a ToolError, which is
    # the tool's answer to the model.
    # Gloss: failures end the turn, but a ToolError is an answer the model gets, with the
    # same call id, even with the default FAIL_TURN strategy.
    @tool
    def lookup() -> str:
        """Fail as an answer."""
        raise ToolError("no such order")

    turn = runner.run(
        Agent("a", Scripted(ask(ToolCall(id="l", name="lookup")), "sorry").model, tools=[lookup]),
        "go",
    )

    assert turn.status is S.COMPLETED and turn.final_output == "sorry"
    [answer] = tool_messages(turn.messages)
    assert answer.is_error and answer.call_id == "l"
    assert content(answer)["message"] == "no such order"


def test_return_error_to_model_turns_an_exception_into_an_answer(runner: AgentRunner) -> None:
    # 「模型或工具异常统一进入失败处理」, with the policy's tool-error strategy choosing where.
    # Gloss: with RETURN_ERROR_TO_MODEL a plain exception becomes an error ToolMessage of
    # the same call id and the model answers; the turn does not fail.
    @tool
    def explode() -> str:
        """Fail."""
        raise ValueError("disk on fire")

    opts = policy_options(tool_error_strategy=ToolErrorStrategy.RETURN_ERROR_TO_MODEL)
    model = Scripted(ask(ToolCall(id="x", name="explode")), "the disk is on fire")

    turn = runner.run(Agent("a", model.model, tools=[explode]), "go", options=opts)

    assert turn.status is S.COMPLETED and turn.error is None
    [answer] = tool_messages(turn.messages)
    assert (answer.call_id, answer.is_error, content(answer)["exception"]) == (
        "x",
        True,
        "ValueError",
    )
    assert model.requests[1].messages[-1] == answer


# -- approvals and ends ---------------------------------------------------------------------------


def test_a_rejection_is_an_ordinary_tool_message_then_the_model_answers(
    runner: AgentRunner,
) -> None:
    # 「人工审批拒绝也会先生成正常 ToolMessage，再让模型生成最终回答。」
    # Gloss: a rejection first becomes an ordinary ToolMessage, then the model answers;
    # no closing message is added.
    ledger = Ledger()
    turn = runner.run(ledger.refund_agent(then="not refunded"), "refund me")

    done = runner.resume(turn.id, AgentResumeCommand.reject_tool("r1", "too much"))

    assert done.status is S.COMPLETED and done.final_output == "not refunded"
    assert ledger.entries == [] and not closed(done)
    [answer] = tool_messages(done.messages)
    assert answer.call_id == "r1" and content(answer)["type"] == "tool_rejected"


@pytest.mark.parametrize(
    ("make", "status", "event"),
    [
        ("cancel", S.CANCELLED, E.TURN_CANCELLED),
        ("fail", S.FAILED, E.TURN_FAILED),
        ("steps", S.MAX_STEPS_REACHED, E.MAX_STEPS_REACHED),
        ("iterations", S.MAX_ITERATIONS_REACHED, E.MAX_ITERATIONS_REACHED),
        ("budget", S.BUDGET_EXCEEDED, E.BUDGET_EXCEEDED),
    ],
)
def test_each_end_has_its_own_status_and_event(
    make: str, status: AgentTurnStatus, event: AgentEventType, runner: AgentRunner
) -> None:
    # 「取消、预算、最大模型迭代和最大 Runner step 分别使用独立终态，调用方不需要从通用
    # 异常消息推断原因。」
    # Gloss: cancellation, budget, max iterations and max steps each have their own
    # terminal state (and event); callers never parse a message to tell them apart.
    from runner_core import AgentBudget, Usage

    log = EventLog()
    runner.add_event_listener(log)

    @tool(requires_approval=make == "cancel")
    def work() -> str:
        """Work, or fail."""
        if make == "fail":
            raise RuntimeError("broken")
        return "worked"

    reply = ask(ToolCall(id="w", name="work"), usage=Usage(input_tokens=9))
    agent = Agent("a", Scripted(then=reply).model, tools=[work], max_iterations=1)
    opts = {
        "steps": policy_options(max_steps=1),
        "budget": policy_options(budget=AgentBudget(max_total_tokens=5)),
    }.get(make)
    turn = runner.run(agent, "go", options=opts)
    if make == "cancel":
        turn = runner.cancel(turn.id)

    assert turn.status is status and turn.status.is_terminal
    assert log.types()[-1] is event and closed(turn)


def test_status_categories_match_the_seed_table() -> None:
    # 「使用 status.isBlocked() 和 status.isTerminal() 判断状态类别，不要自行维护不完整的
    # 枚举集合。」
    # with the table: WAITING_FOR_USER, WAITING_FOR_APPROVAL, WAITING_FOR_CHILD, RETRY_SCHEDULED
    # wait; COMPLETED, FAILED, CANCELLED, MAX_ITERATIONS_REACHED, MAX_STEPS_REACHED,
    # BUDGET_EXCEEDED end.
    # Gloss: the two predicates sort every status of the seed's table.
    blocked = {S.WAITING_FOR_USER, S.WAITING_FOR_APPROVAL, S.WAITING_FOR_CHILD, S.RETRY_SCHEDULED}
    terminal = {
        S.COMPLETED,
        S.FAILED,
        S.CANCELLED,
        S.MAX_ITERATIONS_REACHED,
        S.MAX_STEPS_REACHED,
        S.BUDGET_EXCEEDED,
    }
    assert {s for s in S if s.is_blocked} == blocked
    assert {s for s in S if s.is_terminal} == terminal
    assert set(S) - blocked - terminal == {S.READY, S.RUNNING}


def test_the_cancellation_reason_of_the_policy_fills_the_templates(runner: AgentRunner) -> None:
    # 「工具消息模板支持 {reason}、{turnId}、{toolCallId} 和 {toolName}；Turn 消息模板支持 {reason}
    # 和 {turnId}。cancellationReason 会作为主动取消时的 {reason}」
    # Gloss: both templates take their placeholders; the policy's cancellation reason is
    # the {reason} of a cancel without one.
    opts = policy_options(
        interrupted_tool_message_template="工具 {toolName} 未完成：{reason}"
        " ({toolCallId}, {turnId})",
        interrupted_turn_message_template="本轮任务已结束：{reason} ({turnId})",
        cancellation_reason="用户主动停止",
    )
    ledger = Ledger()
    turn = runner.run(ledger.refund_agent(), "refund me", options=opts)

    cancelled = runner.cancel(turn.id)

    [answer] = tool_messages(cancelled.messages)
    assert answer.content == f"工具 refund 未完成：用户主动停止 (r1, {turn.id})"
    last = cancelled.messages[-1]
    assert isinstance(last, AiMessage) and last.text == f"本轮任务已结束：用户主动停止 ({turn.id})"


# -- resume commands ------------------------------------------------------------------------------


def test_child_completed_hands_an_ended_childs_result_to_its_parent() -> None:
    # 「Worker 模式下父 Turn 返回等待，由其他 Worker 推进子 Turn，完成后再把结果写回父 Turn。」
    # Gloss: in worker mode the parent waits while another worker runs the child; the
    # child's result is written back to the parent, also by a child_completed resume when
    # the child's own fan-in was lost; a second one is refused.
    world = World()
    world.register(Workers().agent())
    runner = world.runner()
    root = runner.start(planner(Scripted(create(task("t1")), "all done")), "go")
    worker = AgentWorker(runner, worker_id="w1")
    while worker.run_once():
        if world.store.load(root.id).all_children_reported():
            break
    [child_id] = world.store.children_of(root.id)
    assert world.store.load(child_id).status is S.COMPLETED
    forget_child_results(world.store, root.id)

    done = runner.resume(root.id, AgentResumeCommand.child_completed(child_id))

    assert done.status is S.COMPLETED and done.final_output == "all done"
    with pytest.raises(InvalidResumeError):
        runner.resume(root.id, AgentResumeCommand.child_completed(child_id))


def test_continue_is_refused_where_nothing_waits_for_it(runner: AgentRunner) -> None:
    # 「WAITING_FOR_USER 和 WAITING_FOR_APPROVAL 不是普通消息可以覆盖的状态，必须使用原 Turn 的
    # resume(...) 提交表单或审批命令。」
    # Gloss: an approval (or a form) needs its own command: continue_turn does not
    # override it, and nothing changes.
    ledger = Ledger()
    turn = runner.run(ledger.refund_agent(), "refund me")

    with pytest.raises(InvalidResumeError):
        runner.resume(turn.id, AgentResumeCommand.continue_turn())

    again = runner.restore(turn.id)
    assert (again.status, again.version, ledger.entries) == (
        S.WAITING_FOR_APPROVAL,
        turn.version,
        [],
    )


# -- messages and history -------------------------------------------------------------------------


def test_the_user_message_is_copied_and_the_history_excludes_system_messages(
    runner: AgentRunner,
) -> None:
    # 「创建 Turn 时会复制用户消息，避免调用方后续修改影响 Snapshot。」「getConversationHistory()
    # 返回排除系统消息后的模型协议消息副本」
    # Gloss: the user's message is copied at creation; the conversation history leaves
    # out system messages and is a copy.
    message = UserMessage("hello")
    turn = runner.run(Agent("a", Scripted("hi").model, instructions="Be brief."), message)

    history = turn.conversation_history
    assert not any(isinstance(m, SystemMessage) for m in history)
    assert [type(m) for m in history] == [UserMessage, AiMessage]
    history.clear()
    assert len(turn.conversation_history) == 2
    assert turn.messages[0] is not message


def test_explicit_history_is_copied_and_binds_no_conversation(
    make_runner: Callable[..., AgentRunner],
) -> None:
    # 「该入口只复制传入的历史，不会修改外部 ChatMemory。显式历史模式不绑定 conversationId」
    # Gloss: explicit history is only copied, the caller's memory is left alone, and the
    # turn has no conversation id.
    memory = InMemoryChatMemory([UserMessage("q0"), AiMessage("a0")])
    before = list(memory.messages)
    runner = make_runner(chat_memory_provider=lambda cid: memory)

    turn = runner.run(Agent("a", Scripted("a1").model), "q1", history=memory.messages)

    assert turn.status is S.COMPLETED and turn.conversation_id is None
    assert memory.messages == before
    assert [m.id for m in turn.messages[:2]] == [m.id for m in before]


def test_a_raising_listener_never_breaks_the_runner(runner: AgentRunner) -> None:
    # 「监听器应快速返回，不能把业务主流程依赖在“监听一定成功”上。」
    # Gloss: listeners may fail; the turn goes on regardless.
    def broken(_: object) -> None:
        raise RuntimeError("listener down")

    runner.add_event_listener(broken)
    turn = runner.run(Agent("a", Scripted("fine").model), "hi")

    assert turn.status is S.COMPLETED and turn.final_output == "fine"


def test_sync_mode_runs_the_child_inline(
    store: InMemoryAgentTurnStore, loader: InMemoryAgentLoader
) -> None:
    # 「同步执行时 Runner 会递归推进子 Turn」
    # Gloss: without workers, the runner advances the child itself, within the same call.
    workers = Workers()
    loader.register(workers.agent())
    runner = AgentRunner(turn_store=store, agent_loader=loader)

    root = runner.run(planner(Scripted(create(task("t1")), "summary")), "go")

    assert root.status is S.COMPLETED and root.final_output == "summary"
    [child_id] = store.children_of(root.id)
    child = store.load(child_id)
    assert child.status is S.COMPLETED and child.root_turn_id == root.id


def test_the_reason_is_quoted_verbatim_in_the_closing_messages(runner: AgentRunner) -> None:
    # 「工具消息模板支持 {reason}、{turnId}、{toolCallId} 和 {toolName}；Turn 消息模板支持 {reason}
    # 和 {turnId}。」
    # Gloss: the placeholders belong to the templates; the reason fills {reason} as it is,
    # braces and all.
    @tool
    def render() -> str:
        """Fail with braces in the message."""
        raise RuntimeError("template {turnId} has no {toolName}")

    turn = runner.run(
        Agent("a", Scripted(ask(ToolCall(id="t", name="render"))).model, tools=[render]), "go"
    )

    reason = "RuntimeError: template {turnId} has no {toolName}"
    assert turn.terminal_reason == reason
    [answer] = tool_messages(turn.messages)
    assert answer.content == f"Tool call was not completed: {reason}"
    last = turn.messages[-1]
    assert isinstance(last, AiMessage)
    assert last.text == f"The previous turn ended before completion: {reason}"


def test_to_snapshot_is_an_isolated_copy(runner: AgentRunner) -> None:
    # 「快照是隔离副本，包含恢复所需状态（包括 streaming 设置），但不包含模型、工具等进程内对象。」
    # Gloss: a snapshot is an isolated copy; changing it changes nothing else.
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    model = Scripted(ask(ToolCall(id="p", name="ping")), "done")
    turn = runner.run(Agent("a", model.model, tools=[ping]), "go")
    snapshot = turn.to_snapshot()
    message = snapshot.messages[1]
    assert isinstance(message, AiMessage)

    try:
        message.tool_calls.append(ToolCall(id="evil", name="ping"))
    except (TypeError, AttributeError):
        pass  # an immutable list is isolated too

    for other in (
        turn.messages[1],
        turn.to_snapshot().messages[1],
        runner.store.load(turn.id).messages[1],
    ):
        assert isinstance(other, AiMessage) and [c.id for c in other.tool_calls] == ["p"]
