"""One step of a turn: the whole state machine, top to bottom.

A step checks the cancel flag, ownership and limits, then (inside the step middleware)
either asks the model once (phase MODEL) or works through the pending tool calls (phase
TOOLS, run by ``toolbatch``, which says how it ended). Each phase returns an ``Outcome``;
``_apply`` turns it into saved state and events.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import assert_never

from runner_core._engine import budget, output
from runner_core._engine.calls import call_model, checked_message, is_retryable, model_call_facts
from runner_core._engine.children import TaskStart, settle_children, start_tasks
from runner_core._engine.fingerprints import record_fingerprints
from runner_core._engine.kernel import EventSpec, TurnKernel
from runner_core._engine.output import Accepted, Refused
from runner_core._engine.toolbatch import (
    AskUser,
    AwaitApproval,
    CallFailed,
    Cancelled,
    OutOfStepTime,
    OverBudget,
    PlanFinished,
    PlanStored,
    ToolBatch,
    ToolsDone,
)
from runner_core.context import UserInputRequested
from runner_core.errors import (
    CancelRequestedError,
    ConcurrentModificationError,
    LeaseLostError,
    OutputValidationError,
)
from runner_core.events import AgentEventType as E
from runner_core.messages import AiMessage, ToolCall
from runner_core.middleware import chain_model, chain_step
from runner_core.models.base import ModelRequest
from runner_core.snapshot import AgentTurnSnapshot, ErrorInfo, Suspension, SuspensionType
from runner_core.status import AgentTurnPhase as Phase
from runner_core.status import AgentTurnStatus as Status
from runner_core.status import move
from runner_core.tools import ToolCallAbortedError
from runner_core.turn import AgentStepResult, AgentTurn


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Save the work so far (``events`` follow the save) in the middle of a step."""

    events: tuple[EventSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Continue:
    """The step's work is saved by ``_apply`` (``events`` follow the save); it may go on."""

    events: tuple[EventSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Suspend:
    """The turn blocks until a resume command (or its children) wakes it."""

    status: Status
    suspension: Suspension
    notice: E


@dataclass(frozen=True, slots=True)
class WaitForChildren:
    """The plan's ready tasks start as child turns, created by the same commit; it waits."""

    start: TaskStart


@dataclass(frozen=True, slots=True)
class Retry:
    """A retryable failure with retries left: schedule it and resume in ``phase``."""

    error: BaseException
    phase: Phase


@dataclass(frozen=True, slots=True)
class Finish:
    """The turn ends with ``status``."""

    status: Status
    reason: str | None = None
    error: BaseException | None = None


Outcome = Checkpoint | Continue | Suspend | WaitForChildren | Retry | Finish

_INFRA_ERRORS = (LeaseLostError, ConcurrentModificationError)


def run_step(kernel: TurnKernel, turn: AgentTurn) -> AgentStepResult:
    """Advance ``turn`` by one stable step (a no-op for a turn that cannot step now)."""
    return _Step(kernel, turn).run()


class _Step:
    def __init__(self, kernel: TurnKernel, turn: AgentTurn) -> None:
        self.k = kernel
        self.turn = turn
        self.st = turn.state
        self.policy = kernel.policy(turn)
        self.result = AgentStepResult()
        self.guarded = False
        limit = kernel.step_time_limit
        turn.step_deadline = None if limit is None else time.monotonic() + limit

    # -- entry --------------------------------------------------------------------------
    def run(self) -> AgentStepResult:
        turn = self.turn
        turn.stepping = True
        try:
            return self._run()
        except CancelRequestedError:
            # a commit met a cancel request this step had not seen, and wrote nothing: the
            # turn ends cancelled from what is stored, the step's unrecorded work dropped
            self._adopt_stored()
            return self._end(Finish(Status.CANCELLED, self.k.cancellation_reason(turn)))
        finally:
            turn.stepping = turn.answer_unsaved = False

    def _adopt_stored(self) -> None:
        turn = self.turn
        turn.state = self.st = self.k.store.load(turn.id)
        turn.answer_unsaved = False
        self.result = AgentStepResult()

    def _run(self) -> AgentStepResult:
        st, k = self.st, self.k
        if st.status.is_terminal:
            return self.result
        k.guard(self.turn)
        self.guarded = True
        now = k.store.now() if st.status is Status.RETRY_SCHEDULED else 0.0
        if not st.cancel_requested and not may_step(st, now):
            return self.result
        if st.cancel_requested:
            return self._end(Finish(Status.CANCELLED, k.cancellation_reason(self.turn)))
        self._enter()
        if st.step_count >= self.policy.max_steps:
            return self._end(
                Finish(Status.MAX_STEPS_REACHED, f"max_steps ({self.policy.max_steps}) reached")
            )
        if reason := budget.at_step_entry(st, self.policy.budget, k.store.now):
            return self._end(Finish(Status.BUDGET_EXCEEDED, reason))
        match start_tasks(k, self.turn):
            case TaskStart(children=()) as start:  # no child could start: record, step on
                self._apply(Checkpoint(start.events), in_step=False)
            case TaskStart() as start:
                return self._end(WaitForChildren(start))
            case None:
                pass
        st.step_count += 1
        return chain_step(k.middleware(self.turn), self.turn, self._body)

    def _enter(self) -> None:
        st = self.st
        if st.status is Status.WAITING_FOR_CHILD:
            settle_children(self.k, self.turn)  # every awaited child has reported
        elif st.status is Status.READY:
            move(st, Status.RUNNING)
            self.k.emit_start(self.turn, E.TURN_STARTED if st.step_count == 0 else E.TURN_RESUMED)
        elif st.status is Status.RETRY_SCHEDULED:
            st.phase = st.suspension.resume_phase if st.suspension else st.phase
            move(st, Status.RUNNING)
            st.suspension, st.next_runnable_at = None, None
            self.k.emit_start(self.turn, E.TURN_RESUMED, retry=st.retry_count)

    def _body(self) -> AgentStepResult:
        self.k.emit_start(self.turn, E.STEP_STARTED)
        outcome = self._model() if self.st.phase is Phase.MODEL else self._tools()
        self._apply(outcome, in_step=True)
        return self.result

    def _end(self, outcome: Outcome) -> AgentStepResult:
        self._apply(outcome, in_step=False)
        return self.result

    # -- phase MODEL --------------------------------------------------------------------
    def _model(self) -> Outcome:
        st, turn, agent = self.st, self.turn, self.turn.agent
        if st.iteration_count >= agent.max_iterations:
            return Finish(
                Status.MAX_ITERATIONS_REACHED, f"max_iterations ({agent.max_iterations}) reached"
            )
        if not self.guarded:
            self.k.guard(turn)
        st.iteration_count += 1
        self.guarded = False
        try:
            request = ModelRequest(
                [*agent.system_messages, *st.messages],
                agent.tool_specs,  # a toolset lists its tools when due: it may be down
                dict(agent.model_settings),
                agent.output_schema,
            )
        except ToolCallAbortedError as exc:
            return self._failure(exc, Phase.MODEL)
        self.k.emit(turn, E.MODEL_STARTED, iteration=st.iteration_count)
        started_at, clock = time.time(), time.monotonic()
        try:
            response = chain_model(
                self.k.middleware(turn), turn, partial(call_model, self.k, turn)
            )(request)
            message = checked_message(response, turn)
        except Exception as exc:
            return self._failure(exc, Phase.MODEL)
        self.result.response = response
        st.usage = st.usage + response.usage
        st.messages.append(message)
        turn.answer_unsaved = True
        st.pending_tool_calls = list(message.tool_calls)
        verdict = output.judge(agent.output, message) if agent.output is not None else None
        record_fingerprints(turn, message.tool_calls)
        if self.k.recording:  # else the event is dropped: its data is not worth building
            self.k.emit(
                turn,
                E.MODEL_COMPLETED,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                **output.event_data(agent.output, message, verdict),
                **model_call_facts(response.usage, started_at, clock, agent.model, request),
            )
        return self._decide(message, verdict)

    def _decide(self, message: AiMessage, verdict: output.Verdict | None) -> Outcome:
        """After an answer: over budget, completed, typed, or on to the tools."""
        st = self.st
        # A cancel request that came during the model call (or since the last commit, whose
        # reply the step trusted) is found by the commit recording the answer, which is then
        # refused: the turn ends cancelled and the answer is never recorded.
        final = isinstance(verdict, Accepted) if verdict is not None else not message.tool_calls
        if reason := budget.after_model(st, self.policy.budget, self.k.store.now):
            return Finish(Status.BUDGET_EXCEEDED, reason)
        if final and verdict is None:
            st.final_output = message.text or ""
            return Finish(Status.COMPLETED)
        if isinstance(verdict, Accepted | Refused):
            return self._answered(message, verdict)
        st.phase = Phase.TOOLS
        return Continue()  # saved by _apply: the calls are recorded before any of them runs

    def _answered(self, message: AiMessage, verdict: Accepted | Refused) -> Outcome:
        """A typed final answer: taken, sent back for a retry, or the turn fails."""
        spec = self.turn.agent.output
        assert spec is not None
        try:
            after = output.settle(self.turn, spec, message, verdict)
        except OutputValidationError as exc:
            return self._failure(exc, Phase.MODEL)
        if after == "completed":
            return Finish(Status.COMPLETED)
        if after == "tools":
            self.st.phase = Phase.TOOLS
        return Continue()  # saved by _apply: the refusal is recorded before the next request

    # -- phase TOOLS --------------------------------------------------------------------
    def _tools(self) -> Outcome:
        batch = ToolBatch(self.k, self.turn, self.policy, self.result, guarded=self.guarded)
        match batch.run():
            case ToolsDone():
                self.st.phase = Phase.MODEL
                return Continue()
            case PlanStored(events=events):
                return Continue(events)  # the plan's tasks start at the next step's entry
            case PlanFinished():
                return Finish(Status.COMPLETED)
            case AskUser(call=call, ask=ask):
                return _ask_user(call, ask)
            case AwaitApproval(calls=calls):
                return _ask_approval(calls)
            case CallFailed(error=error):
                return self._failure(error, Phase.TOOLS)
            case Cancelled():
                return Finish(Status.CANCELLED, self.k.cancellation_reason(self.turn))
            case OverBudget(reason=reason):
                return Finish(Status.BUDGET_EXCEEDED, reason)
            case OutOfStepTime():
                return Continue()  # still in TOOLS: the next step runs what is left
            case end:
                assert_never(end)

    # -- failures and outcomes -----------------------------------------------------------
    def _failure(self, exc: Exception, phase: Phase) -> Outcome:
        if isinstance(exc, _INFRA_ERRORS):
            raise exc
        self.result.error = exc
        self.turn.live_error = exc
        if is_retryable(exc) and self.st.retry_count < self.policy.retry.max_retries:
            return Retry(exc, phase)
        return Finish(Status.FAILED, f"{type(exc).__name__}: {exc}", exc)

    def _apply(self, outcome: Outcome, *, in_step: bool) -> None:
        st, k, turn = self.st, self.k, self.turn
        done: list[EventSpec] = [(E.STEP_COMPLETED, {})] if in_step else []
        match outcome:
            case Checkpoint(events=events):
                self._emit_after_save(events)
                k.commit(turn)
            case Continue(events=events):
                self._emit_after_save([*events, *done])
                saved = k.commit(turn, last=True)
                if saved.cancel_requested and not saved.lease_released:
                    # the commit re-read the cancel flag; a released turn ends at its next step
                    cancel = Finish(Status.CANCELLED, k.cancellation_reason(turn))
                    return self._apply(cancel, in_step=False)
            case Suspend(status=status, suspension=suspension, notice=notice):
                move(st, status)
                st.suspension = suspension
                data = {"correlation_id": suspension.correlation_id, "message": suspension.message}
                after = [(notice, {**data, **suspension.metadata}), (E.TURN_SUSPENDED, data)]
                self._emit_after_save([*done, *after])
                k.commit(turn, last=True)
            case WaitForChildren(start=start):
                move(st, Status.WAITING_FOR_CHILD)
                st.suspension = suspension = start.suspension()
                data = {"correlation_id": suspension.correlation_id, "message": suspension.message}
                ids = [c.id for c in start.children]
                suspended = (E.TURN_SUSPENDED, {**data, "child_turn_ids": ids})
                self._emit_after_save([*done, *start.events, suspended])
                k.commit(turn, start.children, last=True)
            case Retry(error=error, phase=phase):
                ended = self._schedule_retry(error, phase, done)
                if ended is not None:
                    return self._apply(ended, in_step=in_step)
            case Finish(status=status, reason=reason, error=error):
                k.finish(turn, status, reason, error, in_step=in_step)
            case _:
                assert_never(outcome)

    def _schedule_retry(
        self, error: BaseException, phase: Phase, done: list[EventSpec]
    ) -> Finish | None:
        st = self.st
        st.retry_count += 1
        now = self.k.store.now()
        delay = self.policy.retry.delay(
            st.retry_count, at_least=getattr(error, "retry_after", None)
        )
        limit = self.policy.budget.max_duration_seconds
        if limit is not None and now + delay - st.created_at >= limit:
            due = now + delay - st.created_at
            reason = f"max_duration_seconds (retry due at {due:.3f}, limit={limit})"
            return Finish(Status.BUDGET_EXCEEDED, reason, error)
        move(st, Status.RETRY_SCHEDULED)
        st.phase, st.next_runnable_at = phase, now + delay
        st.error = ErrorInfo.of(error)
        st.suspension = Suspension(
            type=SuspensionType.RETRY,
            message=str(error),
            resume_phase=phase,
            metadata={"attempt": st.retry_count, "delay": delay},
        )
        notice = {
            "attempt": st.retry_count,
            "next_runnable_at": st.next_runnable_at,
            "error": ErrorInfo.of(error).model_dump(),
        }
        self._emit_after_save([*done, (E.RETRY_SCHEDULED, notice)])
        self.k.commit(self.turn, last=True)
        return None

    def _emit_after_save(self, events: Iterable[EventSpec]) -> None:
        """An outcome's events, emitted last before its commit: they follow its save."""
        for kind, data in events:
            self.k.emit(self.turn, kind, after_save=True, **data)


def may_step(st: AgentTurnSnapshot, now: float) -> bool:
    """Whether a step would advance the turn now (cancel requests aside)."""
    if st.status in (Status.READY, Status.RUNNING):
        return True
    if st.status is Status.WAITING_FOR_CHILD:
        return st.all_children_reported()
    return st.status is Status.RETRY_SCHEDULED and (st.next_runnable_at or 0.0) <= now


def _ask_approval(calls: tuple[ToolCall, ...]) -> Suspend:
    """Calls need approval: the turn waits once for all of them, to resume in TOOLS.

    The first call's tool and arguments stay where a single approval kept them; ``calls``
    lists every waiting call.
    """
    first = calls[0]
    listed = [{"call_id": c.id, "tool": c.name, "arguments": c.arguments} for c in calls]
    return Suspend(
        Status.WAITING_FOR_APPROVAL,
        Suspension(
            type=SuspensionType.TOOL_APPROVAL,
            correlation_id=first.id,
            message=f"approve {first.name}?",
            resume_phase=Phase.TOOLS,
            metadata={"tool": first.name, "arguments": first.arguments, "calls": listed},
        ),
        E.TOOL_APPROVAL_REQUESTED,
    )


def _ask_user(call: ToolCall, ask: UserInputRequested) -> Suspend:
    """A tool asked the person for input: the turn waits for it, to resume in TOOLS."""
    return Suspend(
        Status.WAITING_FOR_USER,
        Suspension(
            type=SuspensionType.USER_INPUT,
            correlation_id=call.id,
            message=ask.prompt,
            resume_phase=Phase.TOOLS,
            metadata={"tool": call.name, "schema": ask.schema},
        ),
        E.TOOL_INPUT_REQUESTED,
    )
