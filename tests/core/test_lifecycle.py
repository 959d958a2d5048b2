"""A turn from input to answer: statuses, phases, counters, history modes, metadata."""

from __future__ import annotations

from runner_core import (
    AgentEventType,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurnOptions,
    AgentTurnPhase,
    AgentTurnStatus,
    AiMessage,
    ModelResponse,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    tool,
)
from tests.support.scripts import EventLog, Script, agent, ask, call


def test_plain_answer_completes_in_one_step(runner: AgentRunner) -> None:
    script = Script(ModelResponse(AiMessage("Hello!"), Usage(input_tokens=7, output_tokens=3)))

    turn = runner.run(agent(script), "hi")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "Hello!"
    assert turn.phase is AgentTurnPhase.MODEL
    assert (turn.step_count, turn.iteration_count, turn.tool_call_count) == (1, 1, 0)
    assert turn.usage == Usage(input_tokens=7, output_tokens=3)
    assert turn.total_tokens == 10
    assert [type(m) for m in turn.messages] == [UserMessage, AiMessage]
    assert turn.terminal_reason is None and turn.error is None
    # the model saw the agent's instructions first, then the input
    sent = script.requests[0].messages
    assert isinstance(sent[0], SystemMessage) and sent[0].text == "You help."
    assert isinstance(sent[1], UserMessage) and sent[1].text == "hi"


def test_start_creates_a_ready_turn_and_steps_nothing(runner: AgentRunner) -> None:
    script = Script("done")

    turn = runner.start(agent(script), "hi")

    assert turn.status is AgentTurnStatus.READY
    assert turn.version == 0
    assert script.calls == 0
    assert runner.restore(turn.id).status is AgentTurnStatus.READY


def test_tool_turn_takes_model_tools_model_steps(runner: AgentRunner) -> None:
    looked_up: list[str] = []

    @tool
    def lookup_order(order_id: str) -> dict[str, str]:
        """Find an order."""
        looked_up.append(order_id)
        return {"order_id": order_id, "state": "shipped"}

    script = Script(ask(call("lookup_order", order_id="1001")), "It shipped.")
    turn = runner.start(agent(script, lookup_order), "where is 1001?")

    runner.step(turn)
    # the model's decision is saved with phase TOOLS before any tool runs
    assert (turn.status, turn.phase) == (AgentTurnStatus.RUNNING, AgentTurnPhase.TOOLS)
    assert [c.id for c in turn.pending_tool_calls] == ["c1"]
    assert looked_up == []
    assert runner.restore(turn.id).phase is AgentTurnPhase.TOOLS

    result = runner.step(turn)
    assert looked_up == ["1001"]
    assert [m.content for m in result.tool_messages] == ['{"order_id": "1001", "state": "shipped"}']
    assert (turn.phase, turn.pending_tool_calls) == (AgentTurnPhase.MODEL, [])

    runner.step(turn)
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "It shipped."
    assert (turn.step_count, turn.iteration_count, turn.tool_call_count) == (3, 2, 1)
    # the second request carried the tool result back to the model
    assert isinstance(script.requests[1].messages[-1], ToolMessage)


def test_step_on_a_terminal_turn_is_a_no_op(runner: AgentRunner) -> None:
    script = Script("done")
    turn = runner.run(agent(script), "hi")
    version = turn.version

    result = runner.step(turn)

    assert (result.response, result.tool_messages, result.error) == (None, [], None)
    assert turn.version == version and script.calls == 1


def test_step_result_carries_the_response(runner: AgentRunner) -> None:
    response = ModelResponse(AiMessage("ok"), Usage(input_tokens=1, output_tokens=1))
    turn = runner.start(agent(Script(response)), "hi")

    result = runner.step(turn)

    assert result.response == response
    assert result.error is None


def test_explicit_history_drops_system_messages(runner: AgentRunner) -> None:
    # Given a history with a system message, an earlier question and its answer
    earlier_q, earlier_a = UserMessage("earlier?"), AiMessage("earlier!")
    history = [SystemMessage("old instructions"), earlier_q, earlier_a]
    script = Script("now!")

    # When a turn runs on it
    turn = runner.run(agent(script), "q", history=history)

    # Then the system message is gone everywhere, and the new messages start at the input
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.state.history_count == 2
    assert turn.conversation_history[:2] == [earlier_q, earlier_a]
    assert not any(isinstance(m, SystemMessage) for m in turn.conversation_history)
    new = turn.new_messages
    assert [type(m) for m in new] == [UserMessage, AiMessage]
    assert isinstance(new[0], UserMessage) and new[0].text == "q"
    sent = script.requests[0].messages
    assert [getattr(m, "text", None) for m in sent] == ["You help.", "earlier?", "earlier!", "q"]


def test_input_user_message_is_copied(runner: AgentRunner) -> None:
    given = UserMessage("hello")

    turn = runner.run(agent(Script("hi")), given)

    stored = turn.messages[0]
    assert stored == given and stored is not given


def test_metadata_reaches_tools(runner: AgentRunner) -> None:
    seen: list[dict[str, object]] = []

    @tool
    def whoami() -> str:
        """Who is asking."""
        seen.append(dict(AgentToolContext.current().metadata))
        return "ok"

    options = AgentTurnOptions(metadata={"tenant": "acme", "user": {"id": 7}})
    turn = runner.run(agent(Script(ask(call("whoami")), "done"), whoami), "hi", options=options)

    assert turn.status is AgentTurnStatus.COMPLETED
    assert seen == [{"tenant": "acme", "user": {"id": 7}}]
    assert dict(runner.restore(turn.id).metadata) == {"tenant": "acme", "user": {"id": 7}}


def test_tool_context_outside_a_tool_raises() -> None:
    try:
        AgentToolContext.current()
    except RuntimeError as exc:
        assert "outside a tool call" in str(exc)
    else:
        raise AssertionError("expected RuntimeError")


def test_missing_tool_call_ids_are_filled(runner: AgentRunner) -> None:
    seen: list[str] = []

    @tool
    def ping(n: int) -> int:
        """Echo."""
        seen.append(AgentToolContext.current().call_id)
        return n

    calls = [
        ToolCall(id="", name="ping", arguments={"n": 1}),
        ToolCall(id="", name="ping", arguments={"n": 2}),
    ]
    script = Script(AiMessage(tool_calls=calls), "done")

    turn = runner.run(agent(script, ping), "go")

    expected = [f"{turn.id}-1-0", f"{turn.id}-1-1"]
    assert seen == expected
    ai = turn.messages[1]
    assert isinstance(ai, AiMessage) and [c.id for c in ai.tool_calls] == expected
    assert [m.call_id for m in turn.messages if isinstance(m, ToolMessage)] == expected


def test_progress_reports_become_events(runner: AgentRunner) -> None:
    log = EventLog()
    runner.add_event_listener(log)

    @tool
    def slow() -> str:
        """Work in halves."""
        AgentToolContext.current().report_progress("half", 0.5)
        return "ok"

    runner.run(agent(Script(ask(call("slow")), "done"), slow), "go")

    [progress] = log.of(AgentEventType.TOOL_PROGRESS)
    assert (progress.data["message"], progress.data["fraction"]) == ("half", 0.5)
    assert progress.data["call_id"] == "c1"


def test_agent_version_is_fixed_at_creation(runner: AgentRunner) -> None:
    # Given a turn created on version 1 that waits for approval
    @tool(requires_approval=True)
    def refund(amount: float) -> str:
        """Refund."""
        return "refunded"

    v1 = agent(Script(ask(call("refund", amount=5.0)), "v1 answer"), refund, version="1")
    turn = runner.run(v1, "refund me")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL

    # When version 2 becomes the latest
    runner.loader.register(agent(Script(then="v2 answer"), refund, version="2"))  # type: ignore[attr-defined]

    # Then the restored turn still runs version 1
    done = runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
    assert done.agent_version == "1"
    assert done.final_output == "v1 answer"
