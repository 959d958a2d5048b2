"""The process event loop: driven by the caller while idle, on its own thread once not."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time

import pytest

from runner_core._engine.aio import DeadlineExceeded, LoopReentryError, ProcessLoop

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


@pytest.fixture
def loop() -> ProcessLoop:
    return ProcessLoop()  # a fresh one: the process's own may already have moved to a thread


async def whoami() -> str:
    await asyncio.sleep(0)
    return WHO.get()


def test_a_coroutine_runs_in_a_copy_of_the_callers_context(loop: ProcessLoop) -> None:
    token = WHO.set("step thread")
    try:
        assert loop.run(whoami()) == "step thread"
    finally:
        WHO.reset(token)


def test_an_idle_loop_is_driven_by_the_caller_and_keeps_its_objects(loop: ProcessLoop) -> None:
    box: list[asyncio.Queue[int]] = []

    async def make() -> None:
        box.append(asyncio.Queue())
        await box[0].put(1)

    async def take() -> int:
        return await box[0].get()

    loop.run(make())
    assert loop.run(take()) == 1
    assert not loop.threaded


def test_something_left_on_the_loop_moves_it_to_its_thread_where_it_goes_on(
    loop: ProcessLoop,
) -> None:
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    async def start() -> None:
        asyncio.get_running_loop().create_task(ticker())

    loop.run(start())
    time.sleep(0.2)

    assert loop.threaded
    assert len(ticks) > 5  # it ran while no call was waiting


def test_many_threads_at_once_all_get_their_own_results(loop: ProcessLoop) -> None:
    results: dict[int, list[int]] = {}

    async def echo(n: int) -> int:
        await asyncio.sleep(0.001)
        return n

    def caller(i: int) -> None:
        results[i] = [loop.run(echo(i * 1000 + j)) for j in range(30)]

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert not any(t.is_alive() for t in threads)
    assert results == {i: [i * 1000 + j for j in range(30)] for i in range(8)}


@pytest.mark.parametrize("threaded", [False, True])
def test_a_timeout_cancels_the_coroutine(loop: ProcessLoop, threaded: bool) -> None:
    if threaded:
        loop.loop()
    cleaned = threading.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.set()

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        loop.run(slow(), timeout=0.1)

    assert time.monotonic() - started < 2.0
    assert cleaned.wait(2.0)


def test_a_coroutine_that_ignores_cancellation_is_given_up_after_a_grace(
    loop: ProcessLoop,
) -> None:
    async def stubborn() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(1)

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        loop.run(stubborn(), timeout=0.1)

    assert time.monotonic() - started < 0.6
    assert loop.threaded  # the stubborn task finishes there


def test_a_timeout_raised_by_the_coroutine_is_its_own(loop: ProcessLoop) -> None:
    async def fails() -> None:
        raise TimeoutError("upstream timed out")

    with pytest.raises(TimeoutError, match="upstream") as info:
        loop.run(fails(), timeout=5)

    assert not isinstance(info.value, DeadlineExceeded)


@pytest.mark.parametrize("threaded", [False, True])
def test_a_blocking_call_from_the_loop_thread_raises(loop: ProcessLoop, threaded: bool) -> None:
    if threaded:
        loop.loop()

    async def nested() -> str:
        return loop.run(whoami())

    with pytest.raises(LoopReentryError):
        loop.run(nested())


def test_a_forked_child_gets_a_loop_of_its_own(loop: ProcessLoop) -> None:
    loop.loop().parent = True  # type: ignore[attr-defined]  # runs on a thread the child lacks
    os.register_at_fork(after_in_child=loop._forget)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's teardown
        try:
            child = loop.run(_is_parents(), timeout=5)
            os.write(write, f"{child} {int(loop.threaded)}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    inherited, child_threaded = os.read(read, 100).decode().split()
    os.close(read)

    assert (inherited, child_threaded) == ("False", "0")


async def _is_parents() -> bool:
    return getattr(asyncio.get_running_loop(), "parent", False)
