"""Tests of the seeded interleaving scheduler itself."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.support.scheduler import (
    Crash,
    Crashed,
    Delay,
    FailAfter,
    FailBefore,
    Fault,
    Scheduler,
    Stopped,
)


class Counter:
    """A plain counter that notices when two callers are inside it at once."""

    def __init__(self) -> None:
        self.value = 0
        self.calls: list[str] = []
        self.inside = 0
        self.max_inside = 0

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        time.sleep(0)  # give a truly parallel thread a chance to show up

    def get(self) -> int:
        self._enter("get")
        self.inside -= 1
        return self.value

    def set(self, value: int) -> None:
        self._enter("set")
        self.value = value
        self.inside -= 1

    def incr(self) -> int:
        self._enter("incr")
        self.value += 1
        self.inside -= 1
        return self.value

    def release(self) -> None:
        self.calls.append("release")


def incrementing_run(seed: int, actors: int = 3, n: int = 4) -> list[tuple[str, str]]:
    sched = Scheduler(seed)
    counter = sched.wrap(Counter(), name="counter")

    def work() -> None:
        for _ in range(n):
            counter.incr()
            counter.get()

    for i in range(actors):
        sched.spawn(f"a{i}", work)
    report = sched.run()
    assert report.steps == actors * n * 2
    return report.trace


def test_same_seed_same_trace_and_seeds_differ() -> None:
    assert incrementing_run(7) == incrementing_run(7)
    traces = {tuple(incrementing_run(seed)) for seed in range(20)}
    assert len(traces) >= 2


def lost_update_run(seed: int, n: int = 5) -> tuple[int, int]:
    sched = Scheduler(seed)
    raw = Counter()
    counter = sched.wrap(raw, name="counter")
    inside = 0
    max_inside = 0

    def work() -> None:
        nonlocal inside, max_inside
        for _ in range(n):
            value = counter.get()
            inside += 1  # between two yield points only this actor runs
            max_inside = max(max_inside, inside)
            time.sleep(0)
            inside -= 1
            counter.set(value + 1)  # the yield point before set lets the other actor in

    sched.spawn("a", work)
    sched.spawn("b", work)
    sched.run()
    return raw.value, max(max_inside, raw.max_inside)


def test_interleaving_loses_updates_but_never_runs_two_at_once() -> None:
    results = [lost_update_run(seed) for seed in range(20)]
    assert all(max_inside == 1 for _, max_inside in results)
    finals = {value for value, _ in results}
    assert min(finals) < 10, finals  # some seed interleaves get/set and loses an update
    assert all(value <= 10 for value in finals)


def test_crash_kills_actor_and_its_finally_cannot_call() -> None:
    seen: list[str] = []

    def policy(name: str, label: str, rng: random.Random) -> Fault | None:
        return Crash() if (name, label) == ("a", "store.incr") else None

    sched = Scheduler(3, faults=policy)
    raw = Counter()
    store = sched.wrap(raw)

    def a() -> None:
        try:
            try:
                store.incr()
            except Exception:  # pragma: no cover - Crashed is not an Exception
                seen.append("swallowed")
        finally:
            try:
                store.release()
            except Crashed:
                seen.append("release crashed")
                raise

    def b() -> None:
        store.get()
        store.incr()

    sched.spawn("a", a)
    sched.spawn("b", b)
    report = sched.run()
    assert seen == ["release crashed"], report.describe()
    assert report.crashed == {"a"} == sched.crashed
    assert "release" not in raw.calls and raw.calls.count("incr") == 1  # only b's
    assert report.errors == []
    assert "crashed: a" in report.describe()


def test_fail_before_does_not_call_and_fail_after_does() -> None:
    def policy(name: str, label: str, rng: random.Random) -> Fault | None:
        if label == "store.incr":
            return FailBefore(ConnectionError("before")) if name == "a" else None
        if label == "store.set":
            return FailAfter(TimeoutError("after"))
        if label == "plain":
            return FailBefore(KeyError("plain"))
        return None

    sched = Scheduler(1, faults=policy)
    raw = Counter()
    store = sched.wrap(raw)
    caught: dict[str, BaseException] = {}

    def a() -> None:
        with pytest.raises(ConnectionError) as before:
            store.incr()
        caught["before"] = before.value
        with pytest.raises(TimeoutError) as after:
            store.set(41)
        caught["after"] = after.value
        with pytest.raises(KeyError):
            sched.point("plain")

    sched.spawn("a", a)
    sched.run()
    assert "incr" not in raw.calls
    assert raw.calls == ["set"] and raw.value == 41
    assert set(caught) == {"before", "after"}


def test_delay_makes_the_call_late_while_nobody_else_runs() -> None:
    def policy(name: str, label: str, rng: random.Random) -> Fault | None:
        return Delay(0.2) if (name, label) == ("a", "counter.set") else None

    class Timed(Counter):
        def __init__(self) -> None:
            super().__init__()
            self.at: list[tuple[str, float]] = []

        def _enter(self, name: str) -> None:
            self.at.append((name, time.monotonic()))
            super()._enter(name)

    sched = Scheduler(3, faults=policy)
    raw = Timed()
    counter = sched.wrap(raw, name="counter")
    asked: list[float] = []

    def a() -> None:
        asked.append(time.monotonic())
        counter.set(7)

    def b() -> None:
        for _ in range(5):
            counter.incr()

    sched.spawn("a", a)
    sched.spawn("b", b)
    sched.run()
    set_at = next(t for name, t in raw.at if name == "set")
    assert set_at - asked[0] >= 0.2  # the call reached its target late
    assert raw.calls.count("incr") == 5
    # a kept its turn while it waited: no call of b's landed in those 0.2 s
    assert not [t for name, t in raw.at if name == "incr" and set_at - 0.2 < t < set_at]


def test_uncaught_actor_error_is_reported_with_actor_and_seed() -> None:
    def boom() -> None:
        sched.point("x")
        raise ValueError("boom")

    sched = Scheduler(11)
    sched.spawn("bad", boom)
    with pytest.raises(AssertionError, match=r"'bad'.*boom.*seed 11"):
        sched.run()

    sched = Scheduler(11)
    sched.spawn("bad", boom)
    report = sched.run(raise_errors=False)
    assert [(name, type(exc)) for name, exc, _ in report.errors] == [("bad", ValueError)]
    assert "raise ValueError" in report.errors[0][2]


def test_non_actor_threads_pass_through() -> None:
    sched = Scheduler(5)
    raw = Counter()
    store = sched.wrap(raw)
    store.incr()  # the main thread, before run()
    sched.point("main")

    def actor() -> None:
        store.incr()

        def helper() -> None:
            for _ in range(50):
                store.incr()
                sched.point("helper")
            sched.sleep(0.001)

        thread = threading.Thread(target=helper, daemon=True)
        thread.start()
        thread.join()  # would deadlock if the helper's calls tried to take a turn
        store.incr()

    sched.spawn("a", actor)
    report = sched.run(stall_timeout=2)
    assert raw.value == 53
    assert report.trace == [("a", "store.incr"), ("a", "store.incr")]


def test_proxy_forwards_attributes_and_assignment() -> None:
    sched = Scheduler(0)
    raw = Counter()
    store = sched.wrap(raw, name="c")
    store.value = 5
    assert raw.value == 5 and store.value == 5
    assert store._enter == raw._enter  # private methods are not wrapped
    assert "Counter" in repr(store)


def test_sleep_lets_others_run_and_wakes() -> None:
    sched = Scheduler(2)
    log: list[str] = []

    def sleeper() -> None:
        sched.sleep(0.05)
        log.append("woke")

    def busy() -> None:
        for i in range(5):
            sched.point(f"busy{i}")
            log.append(f"busy{i}")

    sched.spawn("sleeper", sleeper)
    sched.spawn("busy", busy)
    start = time.monotonic()
    sched.run()
    assert log[0] == "busy0" and "woke" in log and len(log) == 6  # busy ran while it slept
    assert time.monotonic() - start >= 0.05


def test_all_sleeping_really_sleeps() -> None:
    sched = Scheduler(4)
    woke: list[float] = []

    def sleeper(seconds: float) -> None:
        sched.sleep(seconds)
        woke.append(time.monotonic())

    sched.spawn("x", lambda: sleeper(0.05))
    sched.spawn("y", lambda: sleeper(0.03))
    start = time.monotonic()
    report = sched.run()
    assert len(woke) == 2
    assert 0.05 <= max(woke) - start < 1.0
    assert report.trace.count(("x", "sleep")) == 1


def test_max_steps_stops_an_endless_actor() -> None:
    sched = Scheduler(9)
    stopped: list[str] = []

    def forever() -> None:
        try:
            while True:
                sched.point("loop")
        except Exception:  # pragma: no cover - Stopped is not an Exception
            stopped.append("swallowed")
        except Stopped:
            stopped.append("stopped")
            raise

    sched.spawn("loop", forever)
    sched.spawn("short", lambda: sched.point("once"))
    report = sched.run(max_steps=50)
    assert report.stopped and report.steps == 50
    assert stopped == ["stopped"] and report.errors == []


def test_idle_ends_the_run_without_marking_it_stopped() -> None:
    sched = Scheduler(6)
    counter = Counter()
    store = sched.wrap(counter)

    def poller() -> None:
        while True:
            store.incr()
            sched.sleep(0.001)

    sched.spawn("p", poller)
    report = sched.run(idle=lambda: counter.value >= 3)
    assert counter.value == 3 and not report.stopped


def test_stall_watchdog_names_the_blocked_actor() -> None:
    sched = Scheduler(8)
    gate = threading.Event()

    def blocked() -> None:
        sched.point("before-wait")
        gate.wait()
        sched.point("after-wait")

    sched.spawn("stuck", blocked)
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"'stuck'.*'before-wait'"):
        sched.run(stall_timeout=0.5)
    assert time.monotonic() - start < 2
    gate.set()  # let the abandoned thread end: its next yield point raises Stopped
