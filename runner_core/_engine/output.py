"""The final-answer path of a step for an agent with an ``output_type``.

``judge`` reads a model answer (pure); ``settle`` records what it means: the validated
value and the answers to the final-answer call, or a retry prompt (counted in
``output_retry_count``), or ``OutputValidationError`` once the retries are used up.
The final-answer tool never runs as a tool: no TOOL_* event, no tool budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runner_core.errors import OutputValidationError
from runner_core.messages import AiMessage, ToolCall, ToolMessage, UserMessage
from runner_core.output import FINAL_TOOL, OutputProblem, OutputSpec, Valid
from runner_core.tools import error_content
from runner_core.turn import AgentTurn

#: What the final-answer call is answered with once its value is taken.
ACCEPTED = "Final answer accepted."


@dataclass(frozen=True, slots=True)
class Accepted:
    """The answer is valid (``call``: the final-answer call; None for a native answer)."""

    value: Any
    call: ToolCall | None


@dataclass(frozen=True, slots=True)
class Refused:
    """The answer is invalid (``call`` None: a native or plain-text answer)."""

    problem: OutputProblem
    call: ToolCall | None


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """Only ordinary tool calls: the loop goes on as without an output type."""


Verdict = Accepted | Refused | NoAnswer
Next = Literal["completed", "model", "tools"]


def judge(spec: OutputSpec, message: AiMessage) -> Verdict:
    """What the model's message says about the final answer (nothing is changed)."""
    if spec.mode == "native":
        if message.tool_calls:
            return NoAnswer()
        return _verdict(spec.from_text(message.text), None)
    final = next((c for c in message.tool_calls if c.name == FINAL_TOOL), None)
    if final is not None:
        return _verdict(spec.from_arguments(dict(final.arguments)), final)
    if message.tool_calls:
        return NoAnswer()
    return Refused(spec.missing_call(), None)


def _verdict(checked: Valid | OutputProblem, call: ToolCall | None) -> Verdict:
    if isinstance(checked, Valid):
        return Accepted(checked.value, call)
    return Refused(checked, call)


def event_data(
    spec: OutputSpec | None, message: AiMessage, verdict: Verdict | None
) -> dict[str, Any]:
    """MODEL_COMPLETED's ``tool_calls`` (real tools only) and ``output``: valid or invalid."""
    calls = message.tool_calls
    if spec is not None and spec.mode == "tool":
        calls = tuple(c for c in calls if c.name != FINAL_TOOL)
    data: dict[str, Any] = {"tool_calls": [c.name for c in calls]}
    match verdict:
        case Accepted():
            data["output"] = "valid"
        case Refused(problem=problem):
            data.update(output="invalid", output_error=problem.summary())
        case NoAnswer() | None:
            pass
    return data


def settle(
    turn: AgentTurn, spec: OutputSpec, message: AiMessage, verdict: Accepted | Refused
) -> Next:
    """Record the verdict on ``message`` (the turn's newest); where the turn goes next.

    Raises ``OutputValidationError`` (naming the field) when the answer is refused and
    ``output_retries`` are used up; the state is then left for the failure to close.
    """
    st = turn.state
    if isinstance(verdict, Accepted):
        st.output = spec.dump(verdict.value)
        st.final_output = spec.text(verdict.value)
        st.messages.extend(_answers(message.tool_calls, verdict.call))
        st.pending_tool_calls = []
        return "completed"
    problem = verdict.problem
    if st.output_retry_count >= spec.retries:
        attempts = st.output_retry_count + 1
        raise OutputValidationError(st.id, problem.field, problem.detail, attempts)
    st.output_retry_count += 1
    call = verdict.call
    if call is None:
        st.messages.append(UserMessage(spec.refusal(problem)))
        return "model"
    content = spec.refusal(problem)
    st.messages.append(ToolMessage(call_id=call.id, name=call.name, content=content, is_error=True))
    others = [c for c in message.tool_calls if c.id != call.id]
    st.messages.extend(
        _not_run(c, "only the first final answer of a response counts")
        for c in others
        if c.name == FINAL_TOOL
    )
    st.pending_tool_calls = [c for c in others if c.name != FINAL_TOOL]
    return "tools" if st.pending_tool_calls else "model"


def _answers(calls: tuple[ToolCall, ...], final: ToolCall | None) -> list[ToolMessage]:
    """The final-answer call is accepted; the response's other calls are never run."""
    answers: list[ToolMessage] = []
    for call in calls:
        if final is not None and call.id == final.id:
            answers.append(ToolMessage(call_id=call.id, name=call.name, content=ACCEPTED))
        else:
            answers.append(_not_run(call, "the final answer was given in the same response"))
    return answers


def _not_run(call: ToolCall, why: str) -> ToolMessage:
    content = error_content("tool_not_run", f"not run: {why}", tool=call.name)
    return ToolMessage(call_id=call.id, name=call.name, content=content, is_error=True)
