"""The producer API on an event loop: ``arun``, ``astart``, ``aresume``, ... of AgentRunner.

Nothing here steps a turn on the caller's loop: the step loop stays synchronous (DESIGN.md,
invariant 11), so ``arun`` and ``aresume`` run it in a worker thread. ``astart``,
``asubmit_resume``, ``acancel`` and ``arestore`` make their store calls on the caller's loop
when the store is an ``AsyncTurnStore`` (the Redis store over ``redis.asyncio``), else in a
worker thread; sending a wake-up (a dispatcher, Celery) and anything that touches a
conversation's chat memory go to a thread too. Each method checks its input as its sync
twin does and raises the same errors, before anything is stored.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

from runner_core._engine import aio, intake, tracing
from runner_core.agent import Agent
from runner_core.conversation import attach_window
from runner_core.errors import (
    ConcurrentModificationError,
    ConfigurationError,
    TurnLeasedError,
    shorten,
)
from runner_core.events import AgentEventType, make_event
from runner_core.messages import Message, SystemMessage, UserMessage
from runner_core.policy import AgentTurnOptions
from runner_core.resume import AgentResumeCommand, ResumeKind, apply_resume
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.status import AgentTurnStatus
from runner_core.store import AsyncTurnStore
from runner_core.turn import AgentTurn

if TYPE_CHECKING:
    from runner_core.runner import AgentRunner

T = TypeVar("T")
P = ParamSpec("P")


def refuse_blocking_call(name: str) -> None:
    """Before a blocking runner call: raise on the process loop's thread, warn on any loop.

    On the process loop's own thread the call would wait on that loop and never return
    (``LoopReentryError``). On a thread with another running loop it would freeze that loop
    for the whole call: a ``RuntimeWarning`` names the async twin to await instead.
    """
    if aio.on_loop_thread():
        raise aio.LoopReentryError(
            f"AgentRunner.{name}() was called on the process event loop's own thread, where "
            f"it would wait on itself; await AgentRunner.a{name}() there instead"
        )
    # get_running_loop() raises without a loop; a sync call without one is the common case
    if asyncio._get_running_loop() is not None:
        warnings.warn(
            f"AgentRunner.{name}() blocks the running event loop until it returns; "
            f"await AgentRunner.a{name}() in async code",
            RuntimeWarning,
            stacklevel=3,
        )


async def off_loop(call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``call(*args, **kwargs)`` in a worker thread (the loop's default executor)."""
    return await asyncio.to_thread(call, *args, **kwargs)


class AsyncProducers:
    """The async twins of AgentRunner's producer methods; AgentRunner inherits them."""

    def _runner(self) -> AgentRunner:
        return cast("AgentRunner", self)

    def _async_store(self) -> AsyncTurnStore | None:
        store = self._runner().store
        return store if isinstance(store, AsyncTurnStore) else None

    # -- the public twins ---------------------------------------------------------------
    async def arun(
        self,
        agent: Agent | str,
        input: str | UserMessage,
        *,
        history: Sequence[Message] | None = None,
        conversation_id: str | None = None,
        options: AgentTurnOptions | None = None,
    ) -> AgentTurn:
        """``run`` without blocking the caller's loop: the turn steps in a worker thread."""
        runner = self._runner()
        return await off_loop(
            runner.run,
            agent,
            input,
            history=history,
            conversation_id=conversation_id,
            options=options,
        )

    async def astart(
        self,
        agent: Agent | str,
        input: str | UserMessage,
        *,
        history: Sequence[Message] | None = None,
        conversation_id: str | None = None,
        options: AgentTurnOptions | None = None,
        turn_id: str | None = None,
    ) -> AgentTurn:
        """``start`` on the caller's loop: one asyncio store call, then the wake-up."""
        runner = self._runner()
        store = self._async_store()
        if store is None or conversation_id is not None:
            return await off_loop(
                runner.start,
                agent,
                input,
                history=history,
                conversation_id=conversation_id,
                options=options,
                turn_id=turn_id,
            )
        turn = self._new_turn(agent, input, history, None, options, turn_id, await store.anow())
        await self._acommit_and_hand_on(turn, store)
        return turn

    async def aresume(self, turn_id: str, command: AgentResumeCommand) -> AgentTurn:
        """``resume`` without blocking the caller's loop: the turn steps in a worker thread."""
        return await off_loop(self._runner().resume, turn_id, command)

    async def asubmit_resume(self, turn_id: str, command: AgentResumeCommand) -> AgentTurn:
        """``submit_resume`` on the caller's loop: load, commit, then the wake-up.

        A resume routed through a turn tree (a parent waiting on children, a child's result)
        or of a turn in a conversation is applied in a worker thread instead.
        """
        runner = self._runner()
        intake.resume(runner.policy.limits, turn_id, command)
        store = self._async_store()
        if store is None:
            return await off_loop(runner.submit_resume, turn_id, command)
        snapshot = await store.aload(turn_id)
        tree = snapshot.status is AgentTurnStatus.WAITING_FOR_CHILD
        if (
            tree
            or snapshot.conversation_id is not None
            or command.kind is ResumeKind.CHILD_COMPLETED
        ):
            return await off_loop(runner.submit_resume, turn_id, command)
        turn = self._turn_of(snapshot)
        event, data = apply_resume(turn.state, command, await store.anow())
        runner.kernel.emit(turn, event, after_save=True, **data)
        # a partial answer to several approvals leaves the turn waiting: nothing to wake
        wake = turn.status is not AgentTurnStatus.WAITING_FOR_APPROVAL
        await self._acommit_and_hand_on(turn, store, wake=wake)
        return turn

    async def acancel(self, turn_id: str, reason: str | None = None) -> AgentTurn:
        """``cancel`` on the caller's loop (a turn in a conversation: in a worker thread).

        Embedded (no dispatcher), a cancelled child's tree goes on in a worker thread, as
        ``cancel`` runs it on.
        """
        runner = self._runner()
        intake.cancel(runner.policy.limits, turn_id, reason)
        store = self._async_store()
        if store is None:
            return await off_loop(runner.cancel, turn_id, reason)
        first = await store.aload(turn_id)
        if first.conversation_id is not None and first.parent_turn_id is None:
            return await off_loop(runner.cancel, turn_id, reason)
        try:
            turn = await self._acancel_one(store, turn_id, reason, first)
            for child_id in await _descendants(store, turn_id):
                await self._acancel_one(store, child_id, reason)
        finally:
            await self._aflush()
        root_id = turn.root_turn_id
        if runner.dispatcher is None and root_id != turn_id and root_id not in runner._inline:
            return await off_loop(runner._tree_goes_on, root_id, turn_id)
        return turn

    async def arestore(self, turn_id: str) -> AgentTurn:
        """``restore`` on the caller's loop (a turn in a conversation: in a worker thread)."""
        runner = self._runner()
        intake.turn_id_of(turn_id)
        store = self._async_store()
        if store is None:
            return await off_loop(runner.restore, turn_id)
        snapshot = await store.aload(turn_id)
        if snapshot.conversation_id is not None and snapshot.parent_turn_id is None:
            return await off_loop(runner.restore, turn_id)  # it catches the memory up
        return self._turn_of(snapshot)

    # -- shared with the sync methods ---------------------------------------------------
    def _new_turn(
        self,
        agent_ref: Agent | str,
        input: str | UserMessage,
        history: Sequence[Message] | None,
        conversation_id: str | None,
        options: AgentTurnOptions | None,
        turn_id: str | None,
        now: float,
    ) -> AgentTurn:
        """A new turn, checked and not stored yet (``start`` and ``astart`` commit it)."""
        runner = self._runner()
        checked = intake.new_turn(
            runner.policy.limits, input, history, conversation_id, options, turn_id
        )
        if conversation_id is not None and runner.chat_memory_provider is None:
            raise ConfigurationError(
                f"conversation {shorten(conversation_id)}: no chat_memory_provider is configured"
            )
        options, metadata, user = checked.options, checked.metadata, checked.user
        agent = runner._agent(agent_ref)
        if conversation_id is not None:
            memory = runner._memory(conversation_id)
            recent = memory.get_model_messages(agent.max_attached_messages)
            attached = attach_window(recent, agent.max_attached_turns)
        else:
            attached = [m for m in (history or ()) if not isinstance(m, SystemMessage)]
        turn_id = turn_id or uuid.uuid4().hex
        state = AgentTurnSnapshot(
            id=turn_id,
            agent_id=agent.id,
            agent_version=agent.version,
            root_turn_id=turn_id,
            messages=[*attached, user],
            history_count=len(attached),
            metadata=metadata,
            streaming=options.streaming,
            policy=options.policy,
            created_at=now,
            updated_at=now,
            conversation_id=conversation_id,
        )
        tracing.turn_created(state)
        return AgentTurn(state, agent)

    # -- internals ----------------------------------------------------------------------
    def _turn_of(self, snapshot: AgentTurnSnapshot) -> AgentTurn:
        loader = self._runner().loader
        return AgentTurn(snapshot, loader.load(snapshot.agent_id, snapshot.agent_version))

    async def _acancel_one(
        self,
        store: AsyncTurnStore,
        turn_id: str,
        reason: str | None,
        snapshot: AgentTurnSnapshot | None = None,
    ) -> AgentTurn:
        runner = self._runner()
        turn = self._turn_of(snapshot if snapshot is not None else await store.aload(turn_id))
        if turn.status.is_terminal:
            return turn
        event = make_event(turn.state, AgentEventType.CANCELLATION_REQUESTED, {"reason": reason})
        asked = await store.arequest_cancellation(turn_id, reason, (event,))
        if asked:
            turn.state.cancel_requested, turn.state.cancel_reason = True, reason
            if runner.events.active:
                await off_loop(runner.events.deliver, event.sequenced(asked.first_sequence))
        idle = turn.status.is_blocked or turn.status is AgentTurnStatus.READY
        if idle and await self._afinalize_cancel(store, turn_id):
            return self._turn_of(await store.aload(turn_id))
        if runner.dispatcher is not None:
            await off_loop(runner.wake, [turn_id])  # its owner, or the next claim, ends it
        return turn

    async def _afinalize_cancel(self, store: AsyncTurnStore, turn_id: str) -> bool:
        """End an idle cancelled turn now; False if an owner holds it (it ends it itself)."""
        kernel = self._runner().kernel
        turn = self._turn_of(await store.aload(turn_id))
        if turn.status.is_terminal:
            return True
        reason = turn.state.cancel_reason or kernel.policy(turn).cancellation_reason
        try:
            await kernel.afinish(turn, AgentTurnStatus.CANCELLED, reason, store.acommit)
        except (TurnLeasedError, ConcurrentModificationError):
            return False
        return True

    async def _acommit_and_hand_on(
        self, turn: AgentTurn, store: AsyncTurnStore, *, wake: bool = True
    ) -> None:
        """Commit a producer's change, then flush listeners and send the wake-up.

        What ``start`` and ``submit_resume`` do after their commit, in that order, in one
        worker-thread hop (none when nobody listens and there is no dispatcher).
        """
        runner = self._runner()
        try:
            await runner.kernel.acommit(turn, store.acommit)
        except BaseException:
            await self._aflush()
            raise
        if runner.events.active or (wake and runner.dispatcher is not None):
            await off_loop(self._hand_on, turn, wake)

    def _hand_on(self, turn: AgentTurn, wake: bool) -> None:
        runner = self._runner()
        runner.events.flush()
        if wake and runner.dispatcher is not None:
            runner.dispatch(turn.id, marked=True, agent_id=turn.state.agent_id)

    async def _aflush(self) -> None:
        events = self._runner().events
        if events.active:
            await off_loop(events.flush)


async def _descendants(store: AsyncTurnStore, turn_id: str) -> list[str]:
    """Every descendant id, breadth first (``children.descendants`` over an asyncio store)."""
    found: list[str] = []
    frontier = [turn_id]
    while frontier:
        nxt: list[str] = []
        for tid in frontier:
            nxt.extend(await store.achildren_of(tid))
        found.extend(nxt)
        frontier = nxt
    return found
