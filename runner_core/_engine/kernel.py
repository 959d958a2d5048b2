"""What every runner operation shares: the one commit, ownership checks, events, closing.

``TurnKernel.commit`` is the one place where a turn is written (DESIGN.md, invariant 8).
Every event of the engine goes through ``TurnKernel.emit``. Events about a change wait on
the turn until the commit that makes the change: the store writes them with it and numbers
them, and only then do listeners get them (invariant 9). Provisional progress events
(model/tool started, deltas) go out at once.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from runner_core._engine import tracing
from runner_core._engine.leases import FRESH_SECONDS
from runner_core.agent import AgentLoader
from runner_core.errors import (
    ConcurrentModificationError,
    InvalidArgumentError,
    LeaseLostError,
    StoreUnavailableError,
)
from runner_core.events import (
    PROVISIONAL,
    TERMINAL_EVENT,
    AgentEvent,
    AgentEventType,
    EventBus,
    make_event,
)
from runner_core.messages import AiMessage, ToolMessage
from runner_core.middleware import Middleware
from runner_core.planning import TaskStatus
from runner_core.policy import AgentExecutionPolicy
from runner_core.snapshot import AgentTurnSnapshot, ErrorInfo
from runner_core.status import AgentTurnStatus, move
from runner_core.store import AgentTurnStore, Commit, SaveResult, TurnControl
from runner_core.turn import AgentTurn

T = TypeVar("T")
AfterSave = Callable[[AgentTurn], None]
OnTerminal = Callable[[AgentTurn, SaveResult], None]
#: An event as a value (type and data) that a step outcome carries until ``emit``.
EventSpec = tuple[AgentEventType, dict[str, Any]]

#: A writer without a lease retries an unavailable store this often (a blip), then raises.
UNLEASED_TRIES = 3
_BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.5)


class TurnKernel:
    """The runner's services as the step machine sees them."""

    def __init__(
        self,
        store: AgentTurnStore,
        bus: EventBus,
        policy: AgentExecutionPolicy,
        middleware: Sequence[Middleware],
        loader: AgentLoader,
        after_save: AfterSave | None = None,
        on_terminal: OnTerminal | None = None,
        wakes: Callable[[], bool] = lambda: False,
        step_time_limit: float | None = None,
    ) -> None:
        if step_time_limit is not None and not step_time_limit > 0:
            raise InvalidArgumentError(
                f"step_time_limit must be a positive number of seconds, not {step_time_limit!r}",
                field="step_time_limit",
            )
        self.store = store
        #: Seconds one step may take (its model and tool calls are cut off at the deadline).
        self.step_time_limit = step_time_limit
        #: Whether a wake-up follows a commit that leaves a turn runnable (a dispatcher).
        self.wakes = wakes
        self.loader = loader
        self.on_terminal = on_terminal
        self.bus = bus
        self.default_policy = policy
        self.runner_middleware = tuple(middleware)
        self.after_save = after_save
        self._chains: dict[int, tuple[Middleware, ...]] = {}
        #: Merged policies by the turn policy they were built from (the object is kept, so
        #: its id is not reused while the entry lives).
        self._merged: dict[int, tuple[AgentExecutionPolicy, AgentExecutionPolicy]] = {}
        self._rid_prefix = uuid.uuid4().hex[:16]
        self._rids = itertools.count()
        #: Listeners hear one event at a time: concurrent tool calls emit from their threads.
        self._deliver_lock = threading.RLock()
        #: Whether the store keeps committed events (then they are built even unheard).
        self.store_records_events = bool(getattr(store, "records_events", True))

    def policy(self, turn: AgentTurn) -> AgentExecutionPolicy:
        """The runner's policy with the fields the turn's own policy sets (they win)."""
        own = turn.state.policy
        if own is None:
            return self.default_policy
        cached = self._merged.get(id(own))
        if cached is not None and cached[0] is own:
            return cached[1]
        merged = self.default_policy.model_copy(
            update={name: getattr(own, name) for name in own.model_fields_set}
        )
        if len(self._merged) > 1024:
            self._merged.clear()
        self._merged[id(own)] = (own, merged)
        return merged

    def middleware(self, turn: AgentTurn) -> tuple[Middleware, ...]:
        """Runner middleware (outermost first), then the agent's."""
        agent_mw = turn.agent.middleware
        if not agent_mw:
            return self.runner_middleware
        key = id(agent_mw)
        chain = self._chains.get(key)
        if chain is None:
            chain = self._chains[key] = self.runner_middleware + agent_mw
        return chain

    # -- events ---------------------------------------------------------------------------
    def emit(
        self, turn: AgentTurn, type: AgentEventType, /, *, after_save: bool = False, **data: Any
    ) -> None:
        """A provisional event goes out now; any other waits for the turn's next commit.

        The commit writes the waiting events before its SNAPSHOT_SAVED (what led to the
        save), or after it with ``after_save`` (its consequences). The caller decides, not
        the type: the same type falls on either side depending on the path. Safe to call
        from a tool's thread for provisional events (the step thread queues the others).
        """
        if type in PROVISIONAL:
            self._deliver_now(turn, type, data)
        elif self.recording:
            queue = turn.pending_after_save if after_save else turn.pending_events
            queue.append(make_event(turn.state, type, data))

    @property
    def recording(self) -> bool:
        """Whether a committed event is heard or kept (else ``emit`` drops it unbuilt)."""
        return self.bus.active or self.store_records_events

    def emit_start(self, turn: AgentTurn, type: AgentEventType, /, **data: Any) -> None:
        """The start of a step (or of the turn, or its resumption by the step): at once.

        Provisional, with the attempt, like the model and tool calls that follow it, so
        every consumer sees it before them; the step's commit records the state change.
        """
        self._deliver_now(turn, type, data)

    def _deliver_now(self, turn: AgentTurn, type: AgentEventType, data: dict[str, Any]) -> None:
        if not self.bus.active:
            return
        with self._deliver_lock:
            event = make_event(turn.state, type, data, attempt=attempt_of(turn), provisional=True)
            self.bus.deliver(event)
        turn.unflushed = True

    def _events(self, turn: AgentTurn, version: int) -> tuple[AgentEvent, ...]:
        """What the commit writes: the waiting events around its SNAPSHOT_SAVED."""
        if not (self.bus.active or self.store_records_events):
            return ()
        saved = make_event(turn.state, AgentEventType.SNAPSHOT_SAVED, {"version": version})
        return (*turn.pending_events, saved, *turn.pending_after_save)

    # -- ownership --------------------------------------------------------------------------
    def control(self, turn: AgentTurn) -> TurnControl:
        """Re-read the stored control fields; the cancel flag is merged into the turn.

        Ridden out like a commit while the store is unavailable: a peek follows a model
        call whose answer is not saved yet, and giving up would throw that answer away.
        """
        turn_id = turn.state.id
        control = self._patiently(turn, lambda: self.store.peek(turn_id))
        if control.cancel_requested:
            turn.state.cancel_requested = True
        return control

    def guard(self, turn: AgentTurn) -> None:
        """Before a side effect: hold the lease (worker mode) or see nobody else does.

        Right after a commit (or a claim) its reply stands in for the store's answer: the
        next commit checks version, lease and the cancel flag again, and refuses a step's
        work over a cancel request it has not seen, so a step following a commit asks the
        store nothing before it works.
        """
        held = turn.held_lease
        if held is not None:
            held.check()
            if not held.take_fresh():
                self.control(turn)  # the cancel flag is re-read before side effects here too
            return
        if time.monotonic() < turn.checked_until:
            turn.checked_until = 0.0
            return

        st = turn.state
        control = self.control(turn)
        if control.version != st.version:
            raise ConcurrentModificationError(st.id, st.version, control.version)
        lease = control.live_lease
        if lease is not None:
            raise LeaseLostError(st.id, f"turn is leased by worker {lease.owner!r}")

    # -- the one door -------------------------------------------------------------------------
    def commit(
        self,
        turn: AgentTurn,
        children: Sequence[AgentTurnSnapshot] = (),
        *,
        last: bool = False,
    ) -> SaveResult:
        """Write the turn (and create ``children``) with its events: the one door.

        The events ``emit`` queued, before and after SNAPSHOT_SAVED, ride in the same
        atomic write and reach listeners only once it landed. ``last``: nothing follows in
        this step; a worker that asked for it gives its lease back in the same write (after
        which any further write raises ``LeaseLostError``). A refused commit changes
        nothing stored and drops the waiting events: the work they describe never happened.
        """
        if turn.unflushed:
            # buffered provisional events reach the stream before the commit's own
            turn.unflushed = False
            self.bus.flush()
        try:
            commit = self._prepare(turn, children, last)
            result = self._write(turn, commit)
        finally:
            turn.pending_events, turn.pending_after_save = [], []
        turn.answer_unsaved = False
        self._settle(turn, commit, result)
        if self.bus.active:
            self._announce(commit, result)
        return result

    async def acommit(
        self, turn: AgentTurn, write: Callable[[Commit], Awaitable[SaveResult]]
    ) -> SaveResult:
        """``commit`` for a producer on an event loop, through an asyncio store's ``write``.

        The same commit as ``commit`` (a writer without a lease: ``write`` is tried again
        a few times while the store is unavailable); listeners hear its events from a
        worker thread, so a slow listener does not stall the loop.
        """
        assert turn.held_lease is None, "only producers commit from an event loop"
        try:
            commit = self._prepare(turn, (), False)
            for attempt in range(UNLEASED_TRIES):
                try:
                    result = await write(commit)
                    break
                except StoreUnavailableError:
                    if attempt + 1 >= UNLEASED_TRIES:
                        raise
                    await asyncio.sleep(_BACKOFF[attempt])
        finally:
            turn.pending_events, turn.pending_after_save = [], []
        self._settle(turn, commit, result)
        if self.bus.active:
            await asyncio.to_thread(self._announce, commit, result)
        return result

    def _prepare(
        self, turn: AgentTurn, children: Sequence[AgentTurnSnapshot], last: bool
    ) -> Commit:
        held = turn.held_lease
        st = turn.state
        if held is not None:
            held.check()
            held.sent_at = time.monotonic()
        st.updated_at = time.time()
        release = last and held is not None and held.release_on_last_save
        # only a step's last save renews: the step is over, so no backstop is passed
        renew = held.seconds if release and held is not None and held.keeps() else None
        return Commit(
            snapshot=st,
            expected_version=st.version,
            request_id=f"{self._rid_prefix}-{next(self._rids)}",
            lease=held.ref() if held is not None else None,
            release=release,
            children=tuple(children),
            events=self._events(turn, st.version + 1),
            wake=(held is None or release) and self.wakes(),
            renew_seconds=renew,
            unless_cancelled=turn.answer_unsaved and not st.cancel_requested,
        )

    def _settle(self, turn: AgentTurn, commit: Commit, result: SaveResult) -> None:
        """What a landed commit changes in the turn object (before listeners hear of it)."""
        held, st = turn.held_lease, turn.state
        st.version = result.version
        if commit.events:
            st.event_sequence = result.first_sequence + len(commit.events) - 1
        if held is not None:
            held.saved(result, commit.renew_seconds is not None)
        elif turn.stepping:  # a step's commit: the next step may follow on its reply
            turn.checked_until = time.monotonic() + FRESH_SECONDS
        if result.cancel_requested:
            st.cancel_requested = True
        if turn.trace is tracing.ON:
            tracing.committed(result.version, len(commit.events))
        if self.after_save is not None:
            self.after_save(turn)

    def _announce(self, commit: Commit, result: SaveResult) -> None:
        self._deliver(commit.events, result.first_sequence)

    def _deliver(self, events: Sequence[AgentEvent], first_sequence: int) -> None:
        """Committed events to listeners, numbered as the store numbered them."""
        with self._deliver_lock:
            for i, event in enumerate(events):
                self.bus.deliver(event.sequenced(first_sequence + i))

    def _write(self, turn: AgentTurn, commit: Commit) -> SaveResult:
        """``store.commit``, again with the same request id while the store is unavailable.

        The write is idempotent by request id: a reply lost in a blip is answered by the
        replay.
        """
        return self._patiently(turn, lambda: self.store.commit(commit))

    def _patiently(self, turn: AgentTurn, call: Callable[[], T]) -> T:
        """``call()``, again while the store is unavailable.

        A lease holder tries until its lease runs out, others a few times.
        """
        held = turn.held_lease
        for attempt in range(10_000):
            try:
                return call()
            except StoreUnavailableError:
                if held is None and attempt + 1 >= UNLEASED_TRIES:
                    raise
                time.sleep(_BACKOFF[min(attempt, len(_BACKOFF) - 1)])
                if held is not None:
                    held.check()  # LeaseLostError once the lease may have run out
        raise AssertionError("unreachable")

    def finish(
        self,
        turn: AgentTurn,
        status: AgentTurnStatus,
        reason: str | None = None,
        error: BaseException | None = None,
        *,
        in_step: bool = False,
    ) -> SaveResult:
        """End the turn: close an abnormal history, commit with its terminal events."""
        self._close(turn, status, reason, error, in_step)
        result = self.commit(turn, last=True)
        if self.on_terminal is not None:
            self.on_terminal(turn, result)
        return result

    async def afinish(
        self,
        turn: AgentTurn,
        status: AgentTurnStatus,
        reason: str | None,
        write: Callable[[Commit], Awaitable[SaveResult]],
    ) -> SaveResult:
        """``finish`` for a producer on an event loop (see ``acommit``)."""
        self._close(turn, status, reason, None, False)
        result = await self.acommit(turn, write)
        if self.on_terminal is not None:
            await asyncio.to_thread(self.on_terminal, turn, result)
        return result

    def _close(
        self,
        turn: AgentTurn,
        status: AgentTurnStatus,
        reason: str | None,
        error: BaseException | None,
        in_step: bool,
    ) -> None:
        """Move the turn to ``status`` and queue its terminal events (nothing written)."""
        st = turn.state
        if status is not AgentTurnStatus.COMPLETED:
            reason = reason or status.value.lower()
            close_history(st, self.policy(turn), reason)
            close_plan(st, reason)
            st.terminal_reason = reason
            if error is not None:
                st.error = ErrorInfo.of(error)
                turn.live_error = error
        move(st, status)
        st.suspension = None
        st.next_runnable_at = None
        st.child_results = {}
        if in_step:
            self.emit(turn, AgentEventType.STEP_COMPLETED, after_save=True)
        terminal = {"reason": st.terminal_reason, "final_output": st.final_output}
        self.emit(turn, TERMINAL_EVENT[status], after_save=True, **terminal)

    def cancellation_reason(self, turn: AgentTurn) -> str:
        """The caller's reason (stored by whichever runner asked), else the policy's."""
        st = turn.state
        if st.cancel_requested and st.cancel_reason is None:
            st.cancel_reason = self.store.load(st.id).cancel_reason
        return st.cancel_reason or self.policy(turn).cancellation_reason


def attempt_of(turn: AgentTurn) -> str:
    """What marks this attempt's provisional events: the lease id, or a random step id."""
    if turn.held_lease is not None:
        return turn.held_lease.lease_id
    if turn.attempt_id is None:
        turn.attempt_id = uuid.uuid4().hex[:16]
    return turn.attempt_id


def close_history(st: AgentTurnSnapshot, policy: AgentExecutionPolicy, reason: str) -> None:
    """Answer every pending call and add one closing AiMessage (abnormal ends only)."""
    for call in st.pending_tool_calls:
        text = _fill(
            policy.interrupted_tool_message_template,
            reason=reason,
            turnId=st.id,
            toolCallId=call.id,
            toolName=call.name,
        )
        st.messages.append(
            ToolMessage(call_id=call.id, name=call.name, content=text, is_error=True)
        )
    st.pending_tool_calls = []
    text = _fill(policy.interrupted_turn_message_template, reason=reason, turnId=st.id)
    st.messages.append(AiMessage(text))


def close_plan(st: AgentTurnSnapshot, reason: str) -> None:
    """An abnormal end also ends the plan: running tasks are cancelled, pending skipped."""
    if st.task_plan is None:
        return
    for task in st.task_plan.tasks:
        if task.status is TaskStatus.RUNNING:
            task.status, task.error = TaskStatus.CANCELLED, reason
        elif task.status is TaskStatus.PENDING:
            task.status, task.error = TaskStatus.SKIPPED, reason


def _fill(template: str, **values: str) -> str:
    """``template`` with each ``{name}`` of ``values`` replaced, in one pass.

    A value's own text (an exception message with braces) is quoted as it is, never filled
    in again.
    """
    pattern = "|".join(re.escape("{" + key + "}") for key in values)
    return re.sub(pattern, lambda m: values[m.group(0)[1:-1]], template) if values else template
