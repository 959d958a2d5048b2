"""The async producer API keeps the caller's loop free; the sync one says when it would not."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    ConcurrentModificationError,
    ConfigurationError,
    InMemoryAgentTurnStore,
    InvalidResumeError,
    TurnNotFoundError,
)
from runner_core._engine import aio
from runner_core._engine.aio import LoopReentryError
from runner_core.testing import EventLog
from tests.support.agents import approval_agent
from tests.support.loop_watch import (
    MAX_STALL_SECONDS,
    Ticker,
    calmest_workout,
    napping_agent,
)
from tests.support.scripts import stored_ids

S = AgentTurnStatus
APPROVE = AgentResumeCommand.approve_tool("c1")


def test_the_loop_keeps_ticking_while_turns_start_resume_and_cancel(runner: AgentRunner) -> None:
    # Given a listener, so events are delivered too
    log = EventLog()
    runner.add_event_listener(log)

    # When a producer on a running loop works turns through the async API
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no sync call is made on the loop's thread
        done = calmest_workout(runner)

    # Then the ticker never waited over 20 ms, and every turn ended where it should
    assert done.max_gap < MAX_STALL_SECONDS, done.max_gap
    assert done.statuses == {
        "napped": S.COMPLETED,
        "resumed": S.COMPLETED,
        "submitted": S.RUNNING,  # runnable, for a worker
        "cancelled": S.CANCELLED,
        "restored": S.COMPLETED,
    }
    assert runner.store.load(done.ids["napped"]).final_output == "rested"
    assert runner.store.load(done.ids["cancelled"]).terminal_reason == "changed my mind"
    assert {done.ids["napped"], done.ids["cancelled"]} <= {e.turn_id for e in log.events}


def test_the_ticker_sees_a_sync_run_freeze_the_loop(runner: AgentRunner) -> None:
    # The gauge of the test above: the same 0.5 s tool, run by the sync method on the loop
    async def blocked() -> float:
        async with Ticker() as ticker:
            with pytest.warns(RuntimeWarning):
                runner.run(napping_agent(), "take a nap")
            await asyncio.sleep(0.01)
        return ticker.max_gap

    assert asyncio.run(blocked()) >= 0.45


def test_async_twins_return_what_the_sync_methods_return(runner: AgentRunner) -> None:
    async def both() -> tuple[Any, ...]:
        waiting = await runner.arun(approval_agent(), "pay 5")
        started = await runner.astart(approval_agent(), "pay", turn_id="mine")
        restored = await runner.arestore("mine")
        return waiting, started, restored

    waiting, started, restored = asyncio.run(both())
    assert waiting.status is S.WAITING_FOR_APPROVAL and waiting.suspension is not None
    assert started.id == restored.id == "mine" and restored.status is S.READY
    assert restored.state.version == started.state.version == runner.store.load("mine").version


SYNC_CALLS: dict[str, Callable[[AgentRunner, str], Any]] = {
    "run": lambda r, _: r.run(approval_agent(), "pay"),
    "start": lambda r, _: r.start(approval_agent(), "pay"),
    "resume": lambda r, tid: r.resume(tid, APPROVE),
    "submit_resume": lambda r, tid: r.submit_resume(tid, APPROVE),
    "cancel": lambda r, tid: r.cancel(tid),
    "restore": lambda r, tid: r.restore(tid),
}


@pytest.mark.parametrize("name", sorted(SYNC_CALLS))
def test_a_sync_call_on_a_running_loop_warns_at_its_caller(runner: AgentRunner, name: str) -> None:
    waiting = runner.run(approval_agent(), "pay")  # no loop here: no warning
    call = SYNC_CALLS[name]

    async def on_the_loop() -> Any:
        return call(runner, waiting.id)

    with pytest.warns(
        RuntimeWarning, match=rf"AgentRunner\.{name}\(\) blocks .*\.a{name}\(\)"
    ) as seen:
        asyncio.run(on_the_loop())

    assert seen[0].filename == __file__  # stacklevel: the caller's line, not the runner's


def test_no_warning_without_a_running_loop(runner: AgentRunner) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        waiting = runner.run(approval_agent(), "pay")
        assert runner.resume(waiting.id, APPROVE).status is S.COMPLETED


@pytest.mark.parametrize("name", sorted(SYNC_CALLS))
def test_a_sync_call_on_the_process_loop_raises_instead_of_deadlocking(
    runner: AgentRunner, store: InMemoryAgentTurnStore, name: str
) -> None:
    waiting = runner.run(approval_agent(), "pay")
    before = {tid: store.load(tid).version for tid in stored_ids(store)}
    call = SYNC_CALLS[name]

    async def on_the_process_loop() -> Any:
        assert aio.on_loop_thread()
        return call(runner, waiting.id)

    with pytest.raises(LoopReentryError, match=rf"AgentRunner\.{name}\(\).*a{name}\(\)"):
        aio.run(on_the_process_loop(), timeout=10)

    assert {tid: store.load(tid).version for tid in stored_ids(store)} == before


def test_the_async_api_works_on_the_process_loop_itself(runner: AgentRunner) -> None:
    async def on_the_process_loop() -> AgentTurnStatus:
        waiting = await runner.arun(approval_agent(), "pay")
        return (await runner.aresume(waiting.id, APPROVE)).status

    assert aio.run(on_the_process_loop(), timeout=10) is S.COMPLETED


BAD_STARTS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("agent", {"agent": 42}, TypeError, "agent must be an Agent"),
    ("both", {"history": [], "conversation_id": "c"}, ValueError, "not both"),
    ("memory", {"conversation_id": "c"}, ConfigurationError, "chat_memory_provider"),
    ("metadata", {"options": "model_construct"}, ValueError, "metadata key 'x'"),
    ("input", {"input": 3}, TypeError, "input must be str or UserMessage"),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "error", "match"), BAD_STARTS, ids=[c[0] for c in BAD_STARTS]
)
@pytest.mark.parametrize("method", ["arun", "astart"])
def test_bad_input_to_the_async_api_is_refused_and_nothing_stored(
    runner: AgentRunner,
    store: InMemoryAgentTurnStore,
    method: str,
    case: str,
    kwargs: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    kwargs = {"agent": approval_agent(), "input": "pay", **kwargs}
    if kwargs.get("options") == "model_construct":
        kwargs["options"] = AgentTurnOptions.model_construct(metadata={"x": object()})
    agent, text = kwargs.pop("agent"), kwargs.pop("input")

    with pytest.raises(error, match=match):
        asyncio.run(getattr(runner, method)(agent, text, **kwargs))
    with pytest.raises(error, match=match):  # the sync twin says the same
        getattr(runner, method.removeprefix("a"))(agent, text, **kwargs)

    assert stored_ids(store) == []


def test_bad_resumes_and_cancels_are_refused_like_the_sync_ones(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    waiting = runner.run(approval_agent(), "pay")
    version = store.load(waiting.id).version

    async def refused() -> None:
        with pytest.raises(TurnNotFoundError):
            await runner.asubmit_resume("nope", APPROVE)
        with pytest.raises(TurnNotFoundError):
            await runner.acancel("nope")
        with pytest.raises(TurnNotFoundError):
            await runner.arestore("nope")
        with pytest.raises(InvalidResumeError, match="c9"):
            await runner.asubmit_resume(waiting.id, AgentResumeCommand.approve_tool("c9"))
        with pytest.raises(InvalidResumeError):
            await runner.aresume(waiting.id, AgentResumeCommand.approve_tool("c9"))
        with pytest.raises(ConcurrentModificationError):
            await runner.astart(approval_agent(), "again", turn_id=waiting.id)

    asyncio.run(refused())
    assert stored_ids(store) == [waiting.id]
    assert store.load(waiting.id).version == version
