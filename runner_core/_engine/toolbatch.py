"""The TOOLS phase: plan the pending calls, run the allowed ones, answer each as it ends.

Every pending call is classified first, in order: a built-in plan call, a call answered at
once (unknown tool, invalid arguments, rejected, denied), a call to run (allowed or
approved) or a call awaiting approval. Calls to run go on a bounded thread pool, up to the
policy's ``max_tool_concurrency`` at once (1: one after another on the step thread, as
always); plan calls and ``sequential`` tools are barriers that run alone. The step thread
is the only writer: it waits for results and commits each one as it arrives, so a crash
re-runs at most the calls that were in flight. The phase ends with a ``BatchEnd`` that the
step machine turns into its outcome.
"""

from __future__ import annotations

import contextvars
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from functools import partial
from typing import Any

from runner_core._engine import budget
from runner_core._engine.calls import call_timing, invoke_tool
from runner_core._engine.children import is_plan_call, planning_policy, store_plan
from runner_core._engine.fingerprints import schema_changed
from runner_core._engine.kernel import EventSpec, TurnKernel
from runner_core._engine.toolthreads import TOOL_THREADS
from runner_core.context import UserInputRequested
from runner_core.errors import (
    ConcurrentModificationError,
    LeaseLostError,
    ToolSchemaChangedError,
)
from runner_core.events import AgentEventType as E
from runner_core.messages import ToolCall, ToolMessage
from runner_core.middleware import chain_tool
from runner_core.models.function import INVALID_ARGUMENTS_KEY
from runner_core.planning import UPDATE_PLAN, TaskStatus, plan_result
from runner_core.policy import AgentExecutionPolicy
from runner_core.snapshot import ErrorInfo
from runner_core.status import AgentTurnPhase as Phase
from runner_core.tools import (
    ApprovalDecision,
    InvalidToolArguments,
    Tool,
    ToolCallAbortedError,
    error_content,
)
from runner_core.turn import AgentStepResult, AgentTurn

_INFRA_ERRORS = (LeaseLostError, ConcurrentModificationError)
#: Errors that end a call for the runner (retry or fail), never for the model.
_ABORTS = (ToolCallAbortedError, ToolSchemaChangedError)

#: Calls of one step that run at once at most (``max_tool_concurrency=0`` included).
MAX_AT_ONCE = 32


# -- how the phase ends ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ToolsDone:
    """Every call is answered: the turn asks the model next."""


@dataclass(frozen=True, slots=True)
class PlanStored:
    """A plan call's plan was taken (the call stays pending while its tasks run)."""

    events: tuple[EventSpec, ...]


@dataclass(frozen=True, slots=True)
class PlanFinished:
    """The plan's tasks are all done and it wants no final summary: the turn completes."""


@dataclass(frozen=True, slots=True)
class AskUser:
    """A tool asked the person for input (the call stays pending)."""

    call: ToolCall
    ask: UserInputRequested


@dataclass(frozen=True, slots=True)
class AwaitApproval:
    """These calls need a person's approval (they stay pending), in call order."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class CallFailed:
    """A tool raised and the policy does not send the error to the model."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The cancel flag was seen: no new call starts."""


@dataclass(frozen=True, slots=True)
class OverBudget:
    """A budget limit stops the next call (``reason`` says which)."""

    reason: str


@dataclass(frozen=True, slots=True)
class OutOfStepTime:
    """The step's time limit leaves too little for the next call: the next step runs it."""


BatchEnd = (
    (ToolsDone | PlanStored | PlanFinished | AskUser | AwaitApproval | CallFailed | Cancelled)
    | OverBudget
    | OutOfStepTime
)


# -- the plan ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Plan:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class _Refuse:
    call: ToolCall
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class _Run:
    tool: Tool
    call: ToolCall
    #: The call's arguments as the plan validated them (the run takes them unless a
    #: middleware hands it another call).
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Await:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class _Abort:
    call: ToolCall
    error: Exception


_Item = _Plan | _Refuse | _Run | _Await | _Abort


def plan_calls(turn: AgentTurn) -> list[_Item]:
    """What to do with each pending call, in order (approval policies are asked here)."""
    return [_classify(turn, call) for call in turn.state.pending_tool_calls]


def _classify(turn: AgentTurn, call: ToolCall) -> _Item:
    st = turn.state
    if is_plan_call(turn, call):
        return _Plan(call)
    try:
        tool = turn.agent.tools.get(call.name)  # a toolset lists its tools when due
    except ToolCallAbortedError as exc:
        return _Abort(call, exc)
    if changed := schema_changed(turn, tool, call):
        return _Abort(call, changed)
    if tool is None:
        known = ", ".join(sorted(turn.agent.tools)) or "none"
        return _Refuse(call, "unknown_tool", f"unknown tool {call.name!r} (available: {known})")
    if INVALID_ARGUMENTS_KEY in call.arguments:
        raw = str(call.arguments[INVALID_ARGUMENTS_KEY])[:200]
        return _Refuse(call, "invalid_arguments", f"arguments are not a JSON object: {raw}")
    try:
        kwargs = tool.validate(call.arguments)
    except InvalidToolArguments as exc:
        return _Refuse(call, "invalid_arguments", str(exc))
    if call.id in st.rejected_calls:
        return _Refuse(call, "tool_rejected", st.rejected_calls[call.id])
    approved = call.id in st.approved_call_ids
    decision = ApprovalDecision.ALLOW if approved else tool.approval(turn, call)
    if decision is ApprovalDecision.DENY:
        return _Refuse(call, "tool_denied", f"tool {call.name!r} is not allowed here")
    if decision is ApprovalDecision.REQUIRE:
        return _Await(call)
    return _Run(tool, call, kwargs)


def _concurrent_runs(plan: list[_Item]) -> int:
    return sum(1 for i in plan if isinstance(i, _Run) and not i.tool.sequential)


class ToolBatch:
    """One run of the TOOLS phase over a turn's pending calls."""

    def __init__(
        self,
        kernel: TurnKernel,
        turn: AgentTurn,
        policy: AgentExecutionPolicy,
        result: AgentStepResult,
        *,
        guarded: bool,
    ) -> None:
        self.k, self.turn, self.st = kernel, turn, turn.state
        self.policy, self.result = policy, result
        #: Whether the lease was checked since the last wait (no side effect since).
        self.fresh = guarded
        self.plan = plan_calls(turn)
        limit = policy.max_tool_concurrency
        #: One call at a time on the step thread: today's exact behaviour, no thread hop.
        self.inline = limit == 1 or _concurrent_runs(self.plan) <= 1
        self.limit = min(limit or len(self.plan), MAX_AT_ONCE)
        self.queue: deque[_Run] = deque()
        self.inflight: dict[Future[ToolMessage], _Run] = {}
        self.awaiting: list[ToolCall] = []
        self.end: BatchEnd | None = None
        #: Calls started in this step (the first always starts, whatever time is left).
        self.started = 0
        #: When each call started: Unix seconds and the monotonic clock, for its event.
        self.clocks: dict[str, tuple[float, float]] = {}

    def run(self) -> BatchEnd:
        """Work through the plan; answer, run or set aside each call; say how it ended."""
        try:
            for item in self.plan:
                if self.end is not None:
                    break
                self._take(item)
                self._see_cancel()
            self._drain()
        except BaseException:
            self._abandon()
            raise
        if self.end is not None:
            return self.end
        if self.awaiting:
            return AwaitApproval(tuple(self.awaiting))
        return ToolsDone()

    def _take(self, item: _Item) -> None:
        match item:
            case _Refuse(call=call, kind=kind, message=message):
                self._refuse(call, kind, message)
            case _Await(call=call):
                self.awaiting.append(call)
            case _Abort(call=call, error=error):
                self._failed(call, error)
            case _Plan(call=call):
                self._drain()
                if self.end is None:
                    self._plan_call(call)
            case _Run() if self.inline or item.tool.sequential:
                self._drain()
                if self.end is None:
                    self._run_here(item)
            case _Run():
                self.queue.append(item)
                self._fill()

    # -- running ------------------------------------------------------------------------------
    def _may_start(self, run: _Run) -> bool:
        """Time left in the step, budget, then the lease and the cancel flag."""
        if self.started and not self._time_for(run.tool):
            self._stop(OutOfStepTime())
            return False
        reason = budget.before_tool(
            self.st, self.policy.budget, self.k.store.now, in_flight=len(self.inflight)
        )
        if reason:
            self._stop(OverBudget(reason))
            return False
        if not self.fresh:
            self.k.guard(self.turn)
            self.fresh = True
            if self.st.cancel_requested:
                self._stop(Cancelled())
                return False
        return True

    def _time_for(self, tool: Tool) -> bool:
        """Whether the step has time left for a call of ``tool``.

        That is its own timeout, or (a call without one) half the step time limit. A later
        call never starts with less, only to be cut off by the deadline: it waits for the
        next step, with a fresh deadline.
        """
        deadline, limit = self.turn.step_deadline, self.k.step_time_limit
        if deadline is None or limit is None:
            return True
        bound = tool.timeout or self.policy.tool_timeout_seconds or limit / 2
        return deadline - time.monotonic() >= min(bound, limit / 2)

    def _started(self, call: ToolCall) -> None:
        self.started += 1
        self.clocks[call.id] = (time.time(), time.monotonic())
        self.k.emit(
            self.turn, E.TOOL_STARTED, call_id=call.id, tool=call.name, arguments=call.arguments
        )

    def _invoke(self, run: _Run) -> ToolMessage:
        k, turn = self.k, self.turn
        invoke = partial(invoke_tool, k, turn, run.tool, validated=[(run.call, run.kwargs)])
        return chain_tool(k.middleware(turn), turn, invoke)(run.call)

    def _run_here(self, run: _Run) -> None:
        """Run one call on the step thread and answer it before anything else starts."""
        if not self._may_start(run):
            return
        self.fresh = False
        self._started(run.call)
        self._settle(run, partial(self._invoke, run))

    def _fill(self) -> None:
        """Start queued calls on the pool while the concurrency limit allows."""
        while self.queue and self.end is None and len(self.inflight) < self.limit:
            if not self._may_start(self.queue[0]):
                return
            run = self.queue.popleft()
            self._started(run.call)
            call = partial(contextvars.copy_context().run, self._invoke, run)
            future = TOOL_THREADS.submit(call, name=run.tool.name)
            self.inflight[future] = run

    def _drain(self) -> None:
        """Start what may start and answer each result as it arrives, until none is left."""
        while True:
            self._fill()
            if not self.inflight:
                return
            done, _ = wait(self.inflight, return_when=FIRST_COMPLETED)
            self.fresh = False
            for future in [f for f in self.inflight if f in done]:  # in start order
                run = self.inflight.pop(future)
                self._settle(run, future.result)
                self._see_cancel()

    def _abandon(self) -> None:
        """Leaving on an error: nothing more starts; nothing reads the running calls' results.

        They are not waited for: a step cut short (a lost lease, a time limit) must not
        hang on a call that never returns.
        """
        for future in self.inflight:
            future.cancel()
        self.inflight.clear()

    # -- answering ------------------------------------------------------------------------------
    def _settle(self, run: _Run, outcome: Callable[[], ToolMessage]) -> None:
        """Answer a call from its outcome (the result, or what it raised)."""
        call = run.call
        try:
            message = outcome()
        except UserInputRequested as ask:
            self._stop(AskUser(call, ask))
            return
        except InvalidToolArguments as exc:
            self._refuse(call, "invalid_arguments", str(exc))
            return
        except Exception as exc:
            if isinstance(exc, _INFRA_ERRORS):
                raise
            self._failed(call, exc)
            return
        self.st.tool_call_count += 1
        if self.k.recording:  # else the event is dropped: its data is not worth building
            self.k.emit(
                self.turn,
                E.TOOL_FAILED if message.is_error else E.TOOL_COMPLETED,
                call_id=call.id,
                tool=call.name,
                is_error=message.is_error,
                content=message.content[:500],
                **self._timing(call),
            )
        self._answer(call, message)

    def _timing(self, call: ToolCall) -> dict[str, Any]:
        """``started_at`` and ``duration_ms`` of a call started in this step (else none)."""
        clock = self.clocks.get(call.id)
        return call_timing(*clock) if clock is not None else {}

    def _failed(self, call: ToolCall, exc: Exception) -> None:
        """A tool raised: its error goes back to the model, or stops the phase, by policy.

        A ``ToolCallAbortedError`` (a timeout with behaviour retry or fail, an awaitable
        returned by a sync tool, dependencies that failed to build) never goes back.
        """
        self.k.emit(
            self.turn,
            E.TOOL_FAILED,
            call_id=call.id,
            tool=call.name,
            error=ErrorInfo.of(exc).model_dump(),
            **self._timing(call),
        )
        to_model = self.policy.tool_error_strategy.value == "RETURN_ERROR_TO_MODEL"
        if to_model and not isinstance(exc, _ABORTS):
            content = error_content("tool_error", str(exc), exception=type(exc).__name__)
            message = ToolMessage(call_id=call.id, name=call.name, content=content, is_error=True)
            self._answer(call, message)
            return
        self.result.error = exc
        self._stop(CallFailed(exc))

    def _refuse(self, call: ToolCall, kind: str, message: str) -> None:
        self.k.emit(
            self.turn,
            E.TOOL_FAILED,
            call_id=call.id,
            tool=call.name,
            error={"type": kind, "message": message},
            **self._timing(call),
        )
        content = error_content(kind, message, tool=call.name)
        self._answer(
            call, ToolMessage(call_id=call.id, name=call.name, content=content, is_error=True)
        )

    def _answer(self, call: ToolCall, message: ToolMessage) -> None:
        """Record the call's answer; saved at once while other calls are pending."""
        st = self.st
        st.messages.append(message)
        index = next(i for i, c in enumerate(st.pending_tool_calls) if c.id == call.id)
        del st.pending_tool_calls[index]
        if call.id in st.approved_call_ids:
            st.approved_call_ids.remove(call.id)
        st.rejected_calls.pop(call.id, None)
        st.submitted_inputs.pop(call.id, None)
        self.result.tool_messages.append(message)
        if st.pending_tool_calls:
            self.k.commit(self.turn)  # saved before the next call runs or the phase ends
        else:
            st.phase = Phase.MODEL  # saved by the step's last save, right after

    def _plan_call(self, call: ToolCall) -> None:
        st, turn = self.st, self.turn
        plan = st.task_plan
        if plan is None or plan.call_id != call.id:
            reason = store_plan(turn, call)
            if reason:
                self._refuse(call, "invalid_plan", reason)
                return
            kind = E.PLAN_UPDATED if call.name == UPDATE_PLAN else E.PLAN_CREATED
            assert st.task_plan is not None
            self._stop(PlanStored(((kind, {"plan": st.task_plan.model_dump(mode="json")}),)))
            return
        content = plan_result(plan)
        self.k.emit(
            turn,
            E.TOOL_COMPLETED,
            call_id=call.id,
            tool=call.name,
            is_error=False,
            content=content[:500],
        )
        self._answer(call, ToolMessage(call_id=call.id, name=call.name, content=content))
        policy = planning_policy(turn)
        done = all(t.status is TaskStatus.COMPLETED for t in plan.tasks)
        if policy and not policy.final_summary and done and not st.pending_tool_calls:
            st.final_output = "\n\n".join(t.result or "" for t in plan.tasks)
            self._stop(PlanFinished())

    # -- stopping ---------------------------------------------------------------------------------
    def _stop(self, end: BatchEnd) -> None:
        """The first reason to stop wins; calls in flight still end and are answered."""
        if self.end is None:
            self.end = end

    def _see_cancel(self) -> None:
        if self.st.cancel_requested:
            self._stop(Cancelled())
