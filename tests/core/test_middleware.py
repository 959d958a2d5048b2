"""Middleware: onion order across runner and agent middleware, short-circuits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, field_validator

from runner_core import (
    AgentRunner,
    AgentTurnStatus,
    AiMessage,
    Middleware,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolMessage,
    Usage,
    tool,
)
from tests.support.scripts import Recorder, Script, agent, ask, call, tool_messages


def test_onion_order_runner_outermost_then_agent(
    make_runner: Callable[..., AgentRunner],
) -> None:
    # Given two runner middlewares and one agent middleware that record enter/exit
    log: list[str] = []
    runner = make_runner(middleware=[Recorder("r1", log), Recorder("r2", log)])
    ran: list[str] = []

    @tool
    def noop() -> str:
        """Nothing."""
        ran.append("noop")
        log.append("tool")
        return "ok"

    def model(request: ModelRequest) -> Any:
        log.append("model")
        return ask(call("noop")) if len(log) < 10 else "done"

    a = agent(Script(model, model), noop, middleware=[Recorder("a", log)])

    # When the turn runs its first two steps
    turn = runner.start(a, "go")
    runner.step(turn)
    runner.step(turn)

    # Then each hook nests outer-first, and the agent's sits inside the runner's
    assert log == [
        "r1:step:in", "r2:step:in", "a:step:in",
        "r1:model:in", "r2:model:in", "a:model:in",
        "model",
        "a:model:out", "r2:model:out", "r1:model:out",
        "a:step:out", "r2:step:out", "r1:step:out",
        "r1:step:in", "r2:step:in", "a:step:in",
        "r1:tool:in", "r2:tool:in", "a:tool:in",
        "tool",
        "a:tool:out", "r2:tool:out", "r1:tool:out",
        "a:step:out", "r2:step:out", "r1:step:out",
    ]  # fmt: skip
    assert ran == ["noop"]


def test_model_middleware_can_answer_without_the_model(runner: AgentRunner) -> None:
    class Cache(Middleware):
        def wrap_model(self, turn: Any, request: Any, call_next: Any) -> ModelResponse:
            return ModelResponse(AiMessage("cached"), Usage(input_tokens=0, output_tokens=1))

    script = Script()

    turn = runner.run(agent(script, middleware=[Cache()]), "hi")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.final_output == "cached"
    assert script.calls == 0
    assert turn.usage.output_tokens == 1


def test_model_middleware_can_change_the_request(runner: AgentRunner) -> None:
    class Redact(Middleware):
        def wrap_model(self, turn: Any, request: ModelRequest, call_next: Any) -> Any:
            request.settings["temperature"] = 0
            return call_next(request)

    script = Script("ok")

    runner.run(agent(script, middleware=[Redact()]), "hi")

    assert script.requests[0].settings == {"temperature": 0}


def test_tool_middleware_can_answer_without_the_tool(runner: AgentRunner) -> None:
    ran: list[str] = []

    @tool
    def charge() -> str:
        """Charge."""
        ran.append("charge")
        return "charged"

    class DryRun(Middleware):
        def wrap_tool(self, turn: Any, call: ToolCall, call_next: Any) -> ToolMessage:
            return ToolMessage(call_id=call.id, name=call.name, content="dry run")

    script = Script(ask(call("charge")), "ok")

    turn = runner.run(agent(script, charge, middleware=[DryRun()]), "go")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert ran == []
    assert [m.content for m in tool_messages(turn.messages)] == ["dry run"]


def test_step_middleware_sees_each_step(make_runner: Callable[..., AgentRunner]) -> None:
    seen: list[tuple[str, int]] = []

    class Watch(Middleware):
        def wrap_step(self, turn: Any, call_next: Any) -> Any:
            result = call_next()
            seen.append((turn.status.value, turn.step_count))
            return result

    runner = make_runner(middleware=[Watch()])
    runner.run(agent(Script("hi")), "hi")

    assert seen == [("COMPLETED", 1)]


def test_middleware_error_fails_the_turn_not_the_runner(runner: AgentRunner) -> None:
    class Broken(Middleware):
        def wrap_model(self, turn: Any, request: Any, call_next: Any) -> Any:
            raise RuntimeError("guardrail crashed")

    turn = runner.run(agent(Script(), middleware=[Broken()]), "hi")

    assert turn.status is AgentTurnStatus.FAILED
    assert turn.terminal_reason == "RuntimeError: guardrail crashed"


class _Counted(BaseModel):
    """An argument type whose parsing is counted."""

    n: int
    parsed: ClassVar[list[int]] = []

    @field_validator("n")
    @classmethod
    def _count(cls, value: int) -> int:
        cls.parsed.append(value)
        return value


def test_a_call_s_arguments_are_parsed_once(runner: AgentRunner) -> None:
    _Counted.parsed = []

    @tool
    def take(item: _Counted) -> int:
        """Take."""
        return item.n

    script = Script(ask(call("take", item={"n": 7})), "ok")

    turn = runner.run(agent(script, take), "go")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert _Counted.parsed == [7]  # checked before the run, not again by it


def test_a_call_changed_by_middleware_is_checked_again(runner: AgentRunner) -> None:
    _Counted.parsed = []
    seen: list[int] = []

    @tool
    def take(item: _Counted) -> int:
        """Take."""
        seen.append(item.n)
        return item.n

    class Twice(Middleware):
        def wrap_tool(self, turn: Any, call: ToolCall, call_next: Any) -> ToolMessage:
            call_next(call)
            call_next(call)  # the same call again: its arguments parsed afresh
            return call_next(call.model_copy(update={"arguments": {"item": {"n": 8}}}))

    script = Script(ask(call("take", item={"n": 7})), "ok")

    turn = runner.run(agent(script, take, middleware=[Twice()]), "go")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert seen == [7, 7, 8]
    assert _Counted.parsed == [7, 7, 8]
