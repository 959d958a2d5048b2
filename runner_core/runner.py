"""``AgentRunner``: create, step, restore, resume and cancel turns."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from runner_core._engine import intake, tracing
from runner_core._engine.children import descendants
from runner_core._engine.kernel import TurnKernel
from runner_core._engine.leases import HeldLease, LeaseKeeper
from runner_core._engine.producers import AsyncProducers, refuse_blocking_call
from runner_core._engine.step import may_step, run_step
from runner_core._engine.unloadable import UnloadableTurns
from runner_core._engine.wakeups import Dispatcher, Waker
from runner_core.agent import Agent, AgentLoader, InMemoryAgentLoader
from runner_core.conversation import ChatMemory, project
from runner_core.errors import (
    AgentNotFoundError,
    ConcurrentModificationError,
    InvalidArgumentTypeError,
    InvalidResumeError,
    SnapshotCorruptedError,
    TurnLeasedError,
    TurnNotFoundError,
    shorten,
)
from runner_core.events import AgentEventListener, AgentEventType, EventBus, make_event
from runner_core.messages import Message, UserMessage
from runner_core.middleware import Middleware
from runner_core.policy import AgentExecutionPolicy, AgentTurnOptions
from runner_core.resume import AgentResumeCommand, ResumeKind, apply_resume, check_resume
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.status import AgentTurnStatus
from runner_core.store import AgentTurnStore, SaveResult, waiting_child_ids
from runner_core.turn import AgentStepResult, AgentTurn

log = logging.getLogger("runner_core.runner")

ChatMemoryProvider = Callable[[str], "ChatMemory"]


class AgentRunner(AsyncProducers):
    """Runs turns; holds no turn state itself, so one runner serves a whole application."""

    def __init__(
        self,
        turn_store: AgentTurnStore | None = None,
        agent_loader: AgentLoader | None = None,
        chat_memory_provider: ChatMemoryProvider | None = None,
        policy: AgentExecutionPolicy | None = None,
        middleware: Sequence[Middleware] = (),
        dispatcher: Dispatcher | None = None,
        step_time_limit: float | None = None,
    ) -> None:
        """Build a runner; every argument has an embedded default.

        ``step_time_limit``: seconds one step may take; model and tool calls that would run
        past it are cut off (a worker sets it; ``None``: steps are unbounded).
        """
        from runner_core.store.memory import InMemoryAgentTurnStore

        self.store: AgentTurnStore = (
            turn_store if turn_store is not None else InMemoryAgentTurnStore()
        )
        self.loader: AgentLoader = (
            agent_loader if agent_loader is not None else InMemoryAgentLoader()
        )
        self.chat_memory_provider = chat_memory_provider
        self.policy = policy or AgentExecutionPolicy()
        self.dispatcher = dispatcher
        self.events = EventBus()
        self.kernel = TurnKernel(
            self.store,
            self.events,
            self.policy,
            middleware,
            self.loader,
            after_save=self._project,
            on_terminal=self._child_ended,
            wakes=lambda: self.dispatcher is not None,
            step_time_limit=step_time_limit,
        )
        self._keeper = LeaseKeeper(step_time_limit)
        self._inline: set[str] = set()
        self.waker = Waker(self.store, lambda: self.dispatcher)
        #: How long a turn may wait for a worker that has its agent version (see _held).
        self.unloadable_grace_seconds = 600.0
        self._unloadable = UnloadableTurns(self.kernel, self.events)

    # -- creating -----------------------------------------------------------------------
    def run(
        self,
        agent: Agent | str,
        input: str | UserMessage,
        *,
        history: Sequence[Message] | None = None,
        conversation_id: str | None = None,
        options: AgentTurnOptions | None = None,
    ) -> AgentTurn:
        """Create a turn and step it until it blocks or ends."""
        refuse_blocking_call("run")
        turn = self._create(agent, input, history, conversation_id, options)
        return self.run_until_blocked(turn)

    def start(
        self,
        agent: Agent | str,
        input: str | UserMessage,
        *,
        history: Sequence[Message] | None = None,
        conversation_id: str | None = None,
        options: AgentTurnOptions | None = None,
        turn_id: str | None = None,
    ) -> AgentTurn:
        """Create a READY turn and hand it to the dispatcher (a worker runs it).

        ``turn_id``: the caller's id for the turn (default: a new uuid). Starting again with
        an id that exists raises ``ConcurrentModificationError`` and creates nothing.
        """
        refuse_blocking_call("start")
        turn = self._create(agent, input, history, conversation_id, options, turn_id)
        self.dispatch(turn.id, marked=True, agent_id=turn.state.agent_id)
        return turn

    def _create(
        self,
        agent_ref: Agent | str,
        input: str | UserMessage,
        history: Sequence[Message] | None,
        conversation_id: str | None,
        options: AgentTurnOptions | None,
        turn_id: str | None = None,
    ) -> AgentTurn:
        turn = self._new_turn(
            agent_ref, input, history, conversation_id, options, turn_id, self.store.now()
        )
        self.kernel.commit(turn)
        self.events.flush()
        return turn

    def _agent(self, ref: Agent | str) -> Agent:
        if isinstance(ref, Agent):
            if isinstance(self.loader, InMemoryAgentLoader):
                try:
                    known = self.loader.load(ref.id, ref.version)
                except AgentNotFoundError:
                    known = None
                if known is not ref:
                    self.loader.register(ref)
            return ref
        if not isinstance(ref, str):
            raise InvalidArgumentTypeError(
                f"agent must be an Agent or an agent id, not {type(ref).__name__}", field="agent"
            )
        return self.loader.load(ref)

    # -- stepping -----------------------------------------------------------------------
    def step(self, turn: AgentTurn, *, release: bool = False) -> AgentStepResult:
        """Advance the turn by one stable step; its status says what happens next.

        ``release`` (worker mode): the step's last save also gives the turn's lease back,
        one round trip instead of two; the lease cannot be used after this step.
        """
        if release and turn.held_lease is not None:
            turn.held_lease.release_on_last_save = True
        try:
            if turn.trace is not tracing.OFF:  # decided at this object's first step
                return tracing.step(turn, lambda: run_step(self.kernel, turn))
            return run_step(self.kernel, turn)
        finally:
            self.events.flush()

    def run_until_blocked(self, turn: AgentTurn) -> AgentTurn:
        """Step until the turn blocks or ends; in-process, children run inline."""
        while True:
            while _wants_step(turn):
                try:
                    self.step(turn)
                except ConcurrentModificationError:
                    if not self._ended_elsewhere(turn):
                        raise
                    return turn
            if turn.status is not AgentTurnStatus.WAITING_FOR_CHILD or turn.held_lease:
                return turn
            if not self._run_children(turn):
                return turn

    def _ended_elsewhere(self, turn: AgentTurn) -> bool:
        """After a refused commit of an unleased turn: adopt the stored turn if it has ended.

        A direct run holds no lease, so while its first step runs the stored turn is still
        READY and another caller's cancel ends it at once; the step's commit is then refused
        and the run returns the turn as that cancel left it.
        """
        if turn.held_lease is not None:
            return False
        stored = self.store.load(turn.id)
        if not stored.status.is_terminal:
            return False
        turn.state = stored
        return True

    def _run_children(self, parent: AgentTurn) -> bool:
        """Run the awaited children one after the other; True if the parent can go on."""
        self._inline.add(parent.id)
        try:
            for child_id in waiting_child_ids(parent.state):
                child = self._restore(child_id)
                if not child.status.is_terminal:
                    self.run_until_blocked(child)
        finally:
            self._inline.discard(parent.id)
        parent.state = self.store.load(parent.id)
        st = parent.state
        return st.status is not AgentTurnStatus.WAITING_FOR_CHILD or st.all_children_reported()

    # -- restoring and resuming -------------------------------------------------------------
    def restore(self, turn_id: str) -> AgentTurn:
        """Load a turn from the store with the exact agent version it was created with."""
        refuse_blocking_call("restore")
        return self._restore(intake.turn_id_of(turn_id))

    def _restore(self, turn_id: str) -> AgentTurn:
        snapshot = self.store.load(turn_id)
        turn = AgentTurn(snapshot, self.loader.load(snapshot.agent_id, snapshot.agent_version))
        self._project_new(turn, restoring=True)
        return turn

    def resume(self, turn_id: str, command: AgentResumeCommand) -> AgentTurn:
        """Apply a resume command, then run until the turn blocks or ends."""
        refuse_blocking_call("resume")
        target = self._apply_resume(turn_id, command)
        self.run_until_blocked(target)
        if target.id != target.root_turn_id and target.status.is_terminal:
            # the tree goes on in this call, as it would had the root been resumed
            self.run_until_blocked(self._restore(target.root_turn_id))
        return target if target.id == turn_id else self._restore(turn_id)

    def submit_resume(self, turn_id: str, command: AgentResumeCommand) -> AgentTurn:
        """Apply a resume command and hand the turn to the dispatcher; do not run it."""
        refuse_blocking_call("submit_resume")
        turn = self._apply_resume(turn_id, command)
        if turn.status is not AgentTurnStatus.WAITING_FOR_APPROVAL:  # else: a partial answer
            self.dispatch(turn.id, marked=True, agent_id=turn.state.agent_id)
        return turn

    def _apply_resume(self, turn_id: str, command: AgentResumeCommand) -> AgentTurn:
        """Check and commit a resume; ``TurnLeasedError`` (nothing changed) under a lease.

        A resume is never applied over another owner's live lease: the commit refuses it
        and the error says when that lease runs out. Try again then (HTTP: 409 with
        Retry-After); the owner usually gives the lease back within one step.
        """
        intake.resume(self.policy.limits, turn_id, command)
        turn = self._restore(turn_id)
        if command.kind is ResumeKind.CHILD_COMPLETED:
            return self._child_completed(turn, command)
        if turn.status is AgentTurnStatus.WAITING_FOR_CHILD:
            turn = self._blocked_descendant(turn, command)
        event, data = apply_resume(turn.state, command, self.store.now())
        self.kernel.emit(turn, event, after_save=True, **data)
        try:
            self.kernel.commit(turn)
        finally:
            self.events.flush()
        return turn

    def _child_completed(self, parent: AgentTurn, command: AgentResumeCommand) -> AgentTurn:
        child_id = command.child_turn_id or ""
        check_resume(parent.state, command, self.store.now())
        if child_id not in waiting_child_ids(parent.state):
            raise InvalidResumeError(parent.id, f"it does not wait for child {shorten(child_id)}")
        if not self.store.load(child_id).status.is_terminal:
            raise InvalidResumeError(parent.id, f"child {shorten(child_id)} has not ended")
        if child_id in parent.state.child_results:
            raise InvalidResumeError(parent.id, f"child {shorten(child_id)} has already reported")
        self.store.report_child(child_id)  # normally done by the child's own last commit
        return self._restore(parent.id)

    def _blocked_descendant(self, root: AgentTurn, command: AgentResumeCommand) -> AgentTurn:
        """The blocked descendant a command is meant for (resuming a root routes there)."""
        for child_id in descendants(self.store, root.id):
            child = self._restore(child_id)
            try:
                check_resume(child.state, command, self.store.now())
            except InvalidResumeError:
                continue
            return child
        raise InvalidResumeError(root.id, f"no blocked descendant accepts {command.kind.value}")

    def repair(self, limit: int = 100) -> int:
        """Deliver ended children's results that never reached their parent (older data)."""
        woken: list[str] = []
        for child_id, parent_id in self.store.find_terminal_children_with_waiting_parent(limit):
            try:
                if self.store.report_child(child_id):
                    woken.append(parent_id)
            except TurnNotFoundError:
                continue  # expired, or its record is gone: nothing to report
            except SnapshotCorruptedError as exc:
                # set aside (and logged) once; the scan goes on with the other parents
                self.store.quarantine(child_id, str(exc))
        self.wake(woken)
        return len(woken)

    def cancel(self, turn_id: str, reason: str | None = None) -> AgentTurn:
        """Request cancellation of a turn and its running children; idle ones end now.

        A turn under another owner's live lease only gets the (monotonic) flag: its owner
        ends it at its next check. Embedded (no dispatcher), the tree then goes on in this
        call, as ``resume`` does, so a parent hears of a cancelled child.
        """
        refuse_blocking_call("cancel")
        intake.cancel(self.policy.limits, turn_id, reason)
        try:
            turn = self._cancel_one(turn_id, reason)
            for child_id in descendants(self.store, turn_id):
                self._cancel_one(child_id, reason)
        finally:
            self.events.flush()
        root_id = turn.root_turn_id
        if self.dispatcher is None and root_id != turn_id and root_id not in self._inline:
            return self._tree_goes_on(root_id, turn_id)
        return turn

    def _tree_goes_on(self, root_id: str, turn_id: str) -> AgentTurn:
        """Embedded: run the tree of an ended turn on, then read that turn again."""
        root = self._restore(root_id)
        if not root.status.is_terminal:
            self.run_until_blocked(root)
        return self._restore(turn_id)

    def _cancel_one(self, turn_id: str, reason: str | None) -> AgentTurn:
        turn = self._restore(turn_id)
        if turn.status.is_terminal:
            return turn
        event = make_event(turn.state, AgentEventType.CANCELLATION_REQUESTED, {"reason": reason})
        asked = self.store.request_cancellation(turn_id, reason, (event,))
        if asked:
            turn.state.cancel_requested, turn.state.cancel_reason = True, reason
            if self.events.active:
                self.events.deliver(event.sequenced(asked.first_sequence))
        idle = turn.status.is_blocked or turn.status is AgentTurnStatus.READY
        if idle and self._finalize_cancel(turn):
            return self._restore(turn_id)
        self.wake([turn_id])  # its owner, or the next claim, ends it
        return turn

    def _finalize_cancel(self, turn: AgentTurn) -> bool:
        """End an idle cancelled turn now; False if an owner holds it (it ends it itself)."""
        turn = self._restore(turn.id)
        if turn.status.is_terminal:
            return True
        reason = self.kernel.cancellation_reason(turn)
        try:
            self.kernel.finish(turn, AgentTurnStatus.CANCELLED, reason)
        except (TurnLeasedError, ConcurrentModificationError):
            return False
        return True

    def save_snapshot(self, turn: AgentTurn) -> int:
        """Save the turn (compare-and-set); the store assigns and returns the new version."""
        return self.kernel.commit(turn).version

    # -- worker mode --------------------------------------------------------------------
    def claim(self, turn_id: str, worker_id: str) -> AgentTurn | None:
        """Lease one turn for ``worker_id``; None if it is not claimable now."""
        since = time.monotonic()  # the lease runs from the clock reading sent, not the reply
        snapshot = self.store.claim(turn_id, worker_id, self.store.now(), self._lease_ms())
        return self._held(snapshot, since) if snapshot is not None else None

    def claim_runnable(self, worker_id: str, limit: int = 10) -> list[AgentTurn]:
        """Lease up to ``limit`` runnable turns."""
        since = time.monotonic()
        snapshots = self.store.claim_runnable(worker_id, self.store.now(), self._lease_ms(), limit)
        return [t for t in (self._held(s, since) for s in snapshots) if t is not None]

    def lease_seconds(self, snapshot: AgentTurnSnapshot) -> float:
        """The one lease length of a turn: the runner's, or longer if its policy asks.

        Claim and heartbeat both use it, so a lease never outlives its renewals.
        """
        seconds = self.policy.lease_seconds
        own = snapshot.policy
        if own is not None and "lease_seconds" in own.model_fields_set:
            seconds = max(seconds, own.lease_seconds)
        return seconds

    @contextmanager
    def holding(self, turn: AgentTurn) -> Iterator[AgentTurn]:
        """Keep the turn's lease alive while the block runs, then release it."""
        try:
            yield turn
        finally:
            self.release(turn)

    def release(self, turn: AgentTurn) -> bool:
        """Stop the heartbeat and give the lease back."""
        held = turn.held_lease
        if held is None:
            return False
        self._keeper.drop(held)
        turn.held_lease = None
        try:
            return held.release()
        except Exception:
            log.warning("releasing lease of turn %s failed", turn.id, exc_info=True)
            return False

    def _held(self, snapshot: AgentTurnSnapshot, since: float) -> AgentTurn | None:
        lease = snapshot.lease
        assert lease is not None, "a claimed snapshot carries its lease"
        held = HeldLease(self.store, snapshot.id, lease, self.policy.lease_seconds, since)
        seconds = self.lease_seconds(snapshot)
        if seconds > held.seconds:  # the turn asks for longer: extend before any work
            held.seconds = seconds
            if not held.renew():
                held.seconds = self.policy.lease_seconds
        try:
            agent = self.loader.load(snapshot.agent_id, snapshot.agent_version)
        except AgentNotFoundError as exc:
            self._unloadable.leave_or_fail(snapshot, held, exc, self.unloadable_grace_seconds)
            return None
        turn = AgentTurn(snapshot, agent)
        turn.held_lease = held
        self._keeper.hold(held, lambda: turn.step_deadline)
        return turn

    def _lease_ms(self) -> int:
        """The policy's lease in whole milliseconds, never shorter than it asks (nor 0)."""
        return max(1, math.ceil(self.policy.lease_seconds * 1000))

    # -- conversations and children ------------------------------------------------------
    def _memory(self, conversation_id: str) -> ChatMemory:
        assert self.chat_memory_provider is not None
        memory: ChatMemory = self.chat_memory_provider(conversation_id)
        return memory

    def _project(self, turn: AgentTurn) -> None:
        """Add the root turn's new messages to its conversation; failures wait for later."""
        self._project_new(turn, restoring=False)

    def _project_new(self, turn: AgentTurn, *, restoring: bool) -> None:
        st = turn.state
        if st.conversation_id is None or st.parent_turn_id is not None:
            return
        if self.chat_memory_provider is not None:
            project(st, lambda: self._memory(st.conversation_id or ""), restoring=restoring)

    def _child_ended(self, turn: AgentTurn, result: SaveResult) -> None:
        """The child's last commit woke its parent: dispatch it (unless run inline here)."""
        parent_id = turn.state.parent_turn_id
        if parent_id is not None and result.parent_woken and parent_id not in self._inline:
            self.dispatch(parent_id, marked=True)

    # -- events and dispatch ------------------------------------------------------------------
    def add_event_listener(self, listener: AgentEventListener) -> None:
        """Listen to every event of every turn this runner touches."""
        self.events.add(listener)

    def remove_event_listener(self, listener: AgentEventListener) -> None:
        """Stop listening."""
        self.events.remove(listener)

    def dispatch(self, turn_id: str, *, marked: bool = False, agent_id: str | None = None) -> bool:
        """Tell the dispatcher a turn is runnable; a failure is logged (the sweeper resends).

        ``marked``: the commit that made it runnable already marked its wake-up queued
        (a failed send then clears the mark). ``agent_id``, when known, is shown with the
        wake-up by dispatchers that can (``DescribingDispatcher``). True if sent.
        """
        return self.waker.dispatch(turn_id, marked=marked, agent_id=agent_id)

    def wake(self, turn_ids: Sequence[str]) -> int:
        """Send a wake-up for each turn and mark the sent ones queued (one store call)."""
        return self.waker.wake(turn_ids)


def _wants_step(turn: AgentTurn) -> bool:
    st = turn.state
    if st.status.is_terminal:
        return False
    if st.status is AgentTurnStatus.RETRY_SCHEDULED:
        return st.cancel_requested
    return st.cancel_requested or may_step(st, 0.0)
