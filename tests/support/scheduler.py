"""A seeded interleaving scheduler: actor threads that take turns at yield points."""

# Notes: calls from threads that are not actors pass straight through, unserialised;
# sleep() makes the interleaving depend on real time; after a stall (or an exception
# from idle()) the remaining actor threads are abandoned, parked (they are daemons).

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

T = TypeVar("T")


class Crashed(BaseException):
    """Raised in an actor that the fault policy killed, at every later yield point too."""


class Stopped(BaseException):
    """Raised in an actor when the run ends early (max_steps or idle)."""


@dataclass(frozen=True)
class Crash:
    """Fault: the actor dies at this yield point."""


@dataclass(frozen=True)
class FailBefore:
    """Fault: raise exc instead of making the call (the request never arrived)."""

    exc: BaseException


@dataclass(frozen=True)
class FailAfter:
    """Fault: make the call, drop its result, raise exc (the reply was lost)."""

    exc: BaseException


@dataclass(frozen=True)
class Delay:
    """Fault: the call reaches its target ``seconds`` late (a pause, a slow network).

    The actor keeps its turn while it waits: real time passes (leases run out), nobody
    else runs in between.
    """

    seconds: float


Fault = Crash | FailBefore | FailAfter | Delay
FaultPolicy = Callable[[str, str, random.Random], Fault | None]
ErrorEntry = tuple[str, BaseException, str]


@dataclass
class Report:
    """The outcome of one run: enough to reproduce and explain it."""

    seed: int
    steps: int
    trace: list[tuple[str, str]]
    crashed: set[str]
    errors: list[ErrorEntry]
    stopped: bool

    def describe(self, last: int = 40) -> str:
        """A short multi-line summary: seed, crashes, errors and the end of the trace."""
        lines = [f"seed={self.seed} steps={self.steps} stopped={self.stopped}"]
        lines.append(f"crashed: {', '.join(sorted(self.crashed)) or '-'}")
        lines += [f"error in {name}: {exc!r}" for name, exc, _ in self.errors]
        tail = self.trace[-last:]
        lines.append(f"last {len(tail)} of {len(self.trace)} yield points:")
        lines += [f"  {actor}: {label}" for actor, label in tail]
        return "\n".join(lines)


@dataclass(eq=False)
class _Actor:
    """One actor: its function, its turn event and its state."""

    name: str
    fn: Callable[[], None]
    go: threading.Event = field(default_factory=threading.Event)
    wake: float = 0.0
    label: str = "<start>"
    done: bool = False
    crashed: bool = False


class Scheduler:
    """Runs actors one at a time, switching only at yield points chosen by a seeded rng."""

    def __init__(self, seed: int, faults: FaultPolicy | None = None) -> None:
        self.seed = seed
        self.crashed: set[str] = set()
        self.errors: list[ErrorEntry] = []
        self.trace: list[tuple[str, str]] = []
        self.steps = 0
        self.stopped = False
        self._rng = random.Random(seed)
        self._faults = faults
        self._actors: list[_Actor] = []
        self._by_thread: dict[threading.Thread, _Actor] = {}
        self._back = threading.Event()
        self._max_steps = 0
        self._stopping = False
        self._started = False

    def spawn(self, name: str, fn: Callable[[], None]) -> None:
        """Register an actor; it starts when run() is called."""
        if self._started:
            raise RuntimeError("spawn() after run()")
        if any(a.name == name for a in self._actors):
            raise ValueError(f"duplicate actor name {name!r}")
        self._actors.append(_Actor(name, fn))

    def wrap(self, obj: T, name: str = "store") -> T:
        """A proxy of obj whose public method calls are yield points labelled name.method."""
        return cast(T, _Proxy(self, obj, name))

    def point(self, label: str) -> None:
        """A yield point: another actor may run now; FailBefore/FailAfter raise, Delay waits."""
        fault = self._yield(label)
        if isinstance(fault, Delay):
            time.sleep(fault.seconds)
        elif isinstance(fault, FailBefore | FailAfter):
            raise fault.exc

    def sleep(self, seconds: float) -> None:
        """Sleep in an actor: others run until time.monotonic() passes the deadline."""
        actor = self._by_thread.get(threading.current_thread())
        if actor is None:
            time.sleep(seconds)
            return
        actor.wake = time.monotonic() + seconds
        self.point("sleep")

    def call(self, label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call fn at a yield point named label, applying the fault policy's verdict."""
        fault = self._yield(label)
        if isinstance(fault, FailBefore):
            raise fault.exc
        if isinstance(fault, Delay):
            time.sleep(fault.seconds)
        result = fn(*args, **kwargs)
        if isinstance(fault, FailAfter):
            raise fault.exc
        return result

    def run(
        self,
        max_steps: int = 10_000,
        idle: Callable[[], bool] | None = None,
        raise_errors: bool = True,
        stall_timeout: float = 10.0,
    ) -> Report:
        """Run every actor to its end; stop them once max_steps or idle() is reached."""
        if self._started:
            raise RuntimeError("run() twice")
        self._started = True
        self._max_steps = max_steps
        for actor in self._actors:
            thread = threading.Thread(
                target=self._actor_main, args=(actor,), name=f"actor-{actor.name}", daemon=True
            )
            self._by_thread[thread] = actor
            thread.start()
        while live := [a for a in self._actors if not a.done]:
            if idle is not None and not self._stopping and idle():
                self._stopping = True
            now = time.monotonic()
            runnable = live if self._stopping else [a for a in live if a.wake <= now]
            if not runnable:
                time.sleep(min(a.wake for a in live) - now)
                continue
            self._turn(self._rng.choice(runnable), stall_timeout)
        report = self._report()
        if raise_errors and self.errors:
            name, exc, tb = self.errors[0]
            raise AssertionError(
                f"actor {name!r} raised {exc!r} (seed {self.seed})\n{tb}\n{report.describe()}"
            ) from exc
        return report

    def _turn(self, actor: _Actor, stall_timeout: float) -> None:
        """Let one actor run until its next yield point or its end."""
        self._back.clear()
        actor.go.set()
        if not self._back.wait(stall_timeout):
            self._stopping = True
            raise AssertionError(
                f"actor {actor.name!r} did not reach a yield point within {stall_timeout}s "
                f"after {actor.label!r} (seed {self.seed})\n{self._report().describe()}"
            )

    def _report(self) -> Report:
        """A report of the run so far."""
        trace, errors = list(self.trace), list(self.errors)
        return Report(self.seed, self.steps, trace, set(self.crashed), errors, self.stopped)

    def _actor_main(self, actor: _Actor) -> None:
        """The body of an actor thread: wait for the first turn, run fn, hand back."""
        actor.go.wait()
        actor.go.clear()
        try:
            if not self._stopping:
                actor.fn()
        except Crashed:
            actor.crashed = True
            self.crashed.add(actor.name)
        except Stopped:
            pass
        except BaseException as exc:
            if not actor.crashed:
                self.errors.append((actor.name, exc, traceback.format_exc()))
        finally:
            actor.done = True
            self._back.set()

    def _yield(self, label: str) -> Fault | None:
        """Count and trace a yield point, ask the policy, hand over the turn; None if no actor."""
        actor = self._by_thread.get(threading.current_thread())
        if actor is None:
            return None
        if actor.crashed:
            raise Crashed(f"{actor.name} already crashed")
        if not self._stopping and self.steps >= self._max_steps:
            self.stopped = self._stopping = True
        if self._stopping:
            raise Stopped(actor.name)
        self.steps += 1
        self.trace.append((actor.name, label))
        actor.label = label
        fault = self._faults(actor.name, label, self._rng) if self._faults else None
        if isinstance(fault, Crash):
            actor.crashed = True
            self.crashed.add(actor.name)
            raise Crashed(f"{actor.name} crashed at {label}")
        self._back.set()
        actor.go.wait()
        actor.go.clear()
        if self._stopping:
            raise Stopped(actor.name)
        return fault


class _Proxy:
    """Forwards attribute access to an object; public method calls become yield points."""

    __slots__ = ("_sched_target", "_sched_owner", "_sched_name")

    def __init__(self, sched: Scheduler, obj: object, name: str) -> None:
        object.__setattr__(self, "_sched_target", obj)
        object.__setattr__(self, "_sched_owner", sched)
        object.__setattr__(self, "_sched_name", name)

    def __getattr__(self, attr: str) -> Any:
        value = getattr(object.__getattribute__(self, "_sched_target"), attr)
        if attr.startswith("_") or not callable(value):
            return value
        sched: Scheduler = object.__getattribute__(self, "_sched_owner")
        label = f"{object.__getattribute__(self, '_sched_name')}.{attr}"

        def call(*args: Any, **kwargs: Any) -> Any:
            return sched.call(label, value, *args, **kwargs)

        return call

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_sched_target"), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(object.__getattribute__(self, "_sched_target"), attr)

    def __repr__(self) -> str:
        return f"<scheduled {object.__getattribute__(self, '_sched_target')!r}>"
