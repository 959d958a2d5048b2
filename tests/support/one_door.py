"""A model-based test of the one-door invariants: actors interleaved at every store call.

Two workers, a webhook that resumes, a canceller and a sweeper run against one turn tree
on a shared store; a seeded scheduler interleaves them at every store call, and a fault
policy kills workers (like SIGKILL), drops Redis replies (a blip) and makes claims reach
the store late. After each schedule the invariants of DESIGN.md (8, 9) are checked
against the store's own records.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from agentworker.fleet.stepping import step_once
from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentPlanningPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurn,
    AgentTurnOptions,
    AgentTurnStatus,
    AgentTurnStore,
    AgentWorkerError,
    AiMessage,
    Commit,
    ConcurrentModificationError,
    FunctionModel,
    InMemoryAgentLoader,
    LeaseLostError,
    Middleware,
    ModelRequest,
    ModelResponse,
    RetryPolicy,
    StoreUnavailableError,
    ToolCall,
    ToolMessage,
    UserMessage,
    tool,
)
from runner_core.events import TERMINAL_EVENTS, AgentEventType
from tests.support.scheduler import (
    Crash,
    Delay,
    FailAfter,
    FailBefore,
    Fault,
    Report,
    Scheduler,
)

S = AgentTurnStatus
E = AgentEventType
LEASE_SECONDS = 0.4
WORKERS = ("worker-a", "worker-b")
#: The actor a thread works for; a context variable, so concurrent tool calls inherit it.
ACTOR: ContextVar[str] = ContextVar("one_door_actor", default="?")


@dataclass
class World:
    """What the actors share: the tool ledger and the writes the store accepted."""

    runs: list[tuple[str, str, str]] = field(default_factory=list)  # call id, actor, outcome
    asked: list[tuple[str, str]] = field(default_factory=list)  # model call, lease id
    violations: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Calls running now, and the crashes of a worker while some of its calls ran.
    in_flight: dict[str, int] = field(default_factory=dict)
    crashes_in_flight: int = 0
    #: Attempts of a worker that ended fenced (its lease ran out, or another writer wrote
    #: first): like a death, such an attempt leaves its calls in flight unrecorded.
    fenced: list[str] = field(default_factory=list)
    #: The store the fan-out tool reads to see whether its call was answered already.
    reader: AgentTurnStore | None = None

    def ran(self, call_id: str, outcome: str) -> None:
        with self.lock:
            self.runs.append((call_id, ACTOR.get(), outcome))

    def fetch_started(self, turn_id: str, call_id: str) -> None:
        """A fan-out call starts: it must not have been answered (committed) before."""
        assert self.reader is not None
        answered = {
            m.call_id for m in self.reader.load(turn_id).messages if isinstance(m, ToolMessage)
        }
        with self.lock:
            if call_id in answered:
                self.violations.append(f"committed call {call_id} ran again ({ACTOR.get()})")
            self.in_flight[ACTOR.get()] = self.in_flight.get(ACTOR.get(), 0) + 1

    def fetch_ended(self) -> None:
        with self.lock:
            self.in_flight[ACTOR.get()] -= 1


class Asked(Middleware):
    """Records every model call: one turn at one point of its history."""

    def __init__(self, world: World) -> None:
        self.world = world

    def wrap_model(
        self,
        turn: AgentTurn,
        request: ModelRequest,
        call_next: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        world = self.world
        key = f"{turn.state.agent_id} {turn.state.id} after {len(request.messages)} messages"
        held = turn.held_lease
        with world.lock:
            world.asked.append((key, held.lease_id if held is not None else "-"))
        return call_next(request)


class Audited:
    """The real store, checking at every commit that the writer may write (not a yield point)."""

    def __init__(self, inner: AgentTurnStore, world: World) -> None:
        self.inner, self.world = inner, world

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, commit: Commit) -> Any:
        s = commit.snapshot
        before = None if commit.expected_version == -1 else self.inner.peek(s.id)
        result = self.inner.commit(commit)
        if before is not None and before.live_lease is not None:
            lease = before.live_lease
            # The store judged the lease at one moment between the peek and now: it was live
            # then for certain only if it still is (a 0.4 s lease can run out in between on
            # a loaded machine, and then a write without it is right)
            live = lease.until > self.inner.now()
            if commit.lease != (lease.owner, lease.lease_id) and live:
                self.world.violations.append(f"{s.id}: written by {commit.lease} under {lease}")
        return result


def agents(world: World) -> list[Agent]:
    """A payer (a flaky tool, then an approval) and a planner with two children."""

    @tool
    def charge(amount: int) -> str:
        """Charge the card; the gateway times out the first time."""
        call_id = AgentToolContext.current().call_id
        with world.lock:
            failed = any(c == call_id and o == "failed" for c, _, o in world.runs)
        if not failed:
            world.ran(call_id, "failed")
            raise ConnectionError("gateway timeout")
        world.ran(call_id, "ok")
        return f"charged {amount}"

    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund (a person approves)."""
        world.ran(AgentToolContext.current().call_id, "ok")
        return f"refunded {amount}"

    def payer(request: ModelRequest) -> AiMessage:
        done = sum(isinstance(m, ToolMessage) for m in request.messages)
        if done == 0:
            return AiMessage(tool_calls=[ToolCall(id="c1", name="charge", arguments={"amount": 5})])
        if done == 1:
            return AiMessage(tool_calls=[ToolCall(id="r1", name="refund", arguments={"amount": 2})])
        return AiMessage("all settled")

    tasks = [{"id": "a", "description": "check a"}, {"id": "b", "description": "check b"}]
    plan = ToolCall(id="p1", name="create_task_plan", arguments={"goal": "g", "tasks": tasks})

    def planner(request: ModelRequest) -> AiMessage:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AiMessage("the summary")
        return AiMessage(tool_calls=[plan])

    def helper(request: ModelRequest) -> AiMessage:
        first = next(m for m in request.messages if isinstance(m, UserMessage))
        return AiMessage(f"checked: {len(first.text)}")

    asked = [Asked(world)]
    return [
        fanout_agent(world, asked),
        Agent("payer", FunctionModel(payer), tools=[charge, refund], middleware=asked),
        Agent(
            "planner",
            FunctionModel(planner),
            sub_agents=["helper"],
            planning=AgentPlanningPolicy(),
            middleware=asked,
        ),
        Agent("helper", FunctionModel(helper), middleware=asked),
    ]


#: How many calls the fan-out agent's one response makes (all run at once).
FANOUT = 4


def fanout_agent(world: World, middleware: Sequence[Middleware]) -> Agent:
    """One response with ``FANOUT`` calls of a short I/O tool, all run concurrently."""

    @tool
    def fetch(n: int) -> str:
        """Fetch a page (takes a little longer for a higher ``n``)."""
        ctx = AgentToolContext.current()
        world.fetch_started(ctx.turn_id, ctx.call_id)
        try:
            time.sleep(0.002 * (n + 1))
        finally:
            world.fetch_ended()
        world.ran(ctx.call_id, "ok")
        return f"fetched {n}"

    def fanout(request: ModelRequest) -> AiMessage:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AiMessage("fetched them all")
        calls = [ToolCall(id=f"f{i}", name="fetch", arguments={"n": i}) for i in range(FANOUT)]
        return AiMessage(tool_calls=calls)

    return Agent("fanout", FunctionModel(fanout), tools=[fetch], middleware=middleware)


POLICY = AgentExecutionPolicy(
    lease_seconds=LEASE_SECONDS, retry=RetryPolicy(max_retries=3, initial_delay=0.0)
)


CLAIMS = ("store.claim", "store.claim_runnable")


def faults(
    crash_rate: float, blip_rate: float, late_rate: float, world: World | None = None
) -> Callable[[str, str, random.Random], Fault | None]:
    """Workers die at store calls and lose replies; other actors only see blips.

    A worker's claim may also reach the store a lease's length after the worker read the
    store clock for it (a pause between the two): the lease it gets is already spent.
    """

    def policy(actor: str, label: str, rng: random.Random) -> Fault | None:
        if not label.startswith("store."):
            return None
        if actor in WORKERS and rng.random() < crash_rate:
            if world is not None and world.in_flight.get(actor, 0) > 0:
                world.crashes_in_flight += 1
            return Crash()
        if actor in WORKERS and label in CLAIMS and rng.random() < late_rate:
            return Delay(LEASE_SECONDS * 1.1)
        if rng.random() < blip_rate:
            blip = StoreUnavailableError("redis://blip", ConnectionError("blip"))
            return FailAfter(blip) if rng.random() < 0.5 else FailBefore(blip)
        return None

    return policy


class Actors:
    """The actors of one schedule, each on its own store client, all on one turn tree."""

    def __init__(
        self,
        sched: Scheduler,
        world: World,
        make_store: Callable[[], AgentTurnStore],
        loader: InMemoryAgentLoader,
        root: str,
    ) -> None:
        self.sched, self.world, self.root = sched, world, root
        self.make_store, self.loader = make_store, loader
        self.plain = make_store()
        self.done = threading.Event()
        #: Workers go on with their turn's next steps, as a step task's chain does.
        self.chain = False

    def runner(self, name: str) -> AgentRunner:
        ACTOR.set(name)
        store = self.sched.wrap(Audited(self.make_store(), self.world), "store")
        return AgentRunner(turn_store=store, agent_loader=self.loader, policy=POLICY)  # type: ignore[arg-type]

    def ended(self) -> bool:
        return self.plain.load(self.root).status.is_terminal

    def worker(self, name: str) -> Callable[[], None]:
        def loop() -> None:
            me = self.runner(name)
            for _ in range(60):
                if self.ended():
                    self.done.set()
                    return
                try:
                    claimed = me.claim_runnable(name, limit=1)
                    if not claimed:
                        self.sched.sleep(0.02)
                        continue
                    turn = claimed[0]
                    with me.holding(turn):
                        me.step(turn, release=True)
                    if self.chain and turn.status in (S.READY, S.RUNNING):
                        # a step task's chain: claim and step again while it runs at once
                        if step_once(me, turn.id, name, chain_seconds=1.0) == "fenced":
                            self.world.fenced.append(name)
                except (LeaseLostError, ConcurrentModificationError):
                    self.world.fenced.append(name)  # the attempt ends: the sweeper resends
                except AgentWorkerError:
                    continue  # refused or a blip: the task ends, the sweeper resends

        return loop

    def webhook(self) -> None:
        me = self.runner("webhook")
        for _ in range(80):
            if self.done.is_set():
                return
            try:
                turn = me.restore(self.root)
                if turn.status is S.WAITING_FOR_APPROVAL:
                    me.submit_resume(self.root, AgentResumeCommand.approve_tool("r1"))
                elif turn.status is S.RETRY_SCHEDULED:
                    me.submit_resume(self.root, AgentResumeCommand.continue_turn())
            except AgentWorkerError:
                pass
            self.sched.point("webhook.poll")

    def canceller(self, delay: float) -> Callable[[], None]:
        def cancel() -> None:
            me = self.runner("canceller")
            self.sched.sleep(delay)
            try:
                me.cancel(self.root, "changed my mind")
            except AgentWorkerError:
                pass

        return cancel

    def sweeper(self) -> None:
        me = self.runner("sweeper")
        for _ in range(10):
            if self.done.is_set():
                return
            try:
                me.repair()
            except AgentWorkerError:
                pass
            self.sched.sleep(0.05)


def run_schedule(
    make_store: Callable[[], AgentTurnStore],
    seed: int,
    crash_rate: float,
    blip_rate: float,
    late_rate: float = 0.0,
    kind: str | None = None,
) -> tuple[Report, World, str, AgentTurnStore]:
    """One schedule: start a turn, let the actors loose, then take the tree to its end.

    ``kind``: the agent (default: the payer or the planner, by the seed); the fan-out
    agent's calls run ``FANOUT`` at a time.
    """
    rng = random.Random(seed)
    world = World()
    loader = InMemoryAgentLoader(agents(world))
    sched = Scheduler(seed, faults=faults(crash_rate, blip_rate, late_rate, world))
    plain = make_store()
    world.reader = plain
    starter = AgentRunner(turn_store=plain, agent_loader=loader, policy=POLICY)
    kind = kind or rng.choice(["payer", "planner"])
    policy = POLICY.model_copy(update={"max_tool_concurrency": FANOUT})
    options = AgentTurnOptions(policy=policy if kind == "fanout" else POLICY)
    root = starter.start(kind, "go", options=options).id
    actors = Actors(sched, world, make_store, loader, root)
    actors.chain = rng.random() < 0.5
    for name in WORKERS:
        sched.spawn(name, actors.worker(name))
    sched.spawn("webhook", actors.webhook)
    sched.spawn("sweeper", actors.sweeper)
    if rng.random() < 0.3:
        sched.spawn("canceller", actors.canceller(rng.random() * 0.05))
    report = sched.run(max_steps=5_000, raise_errors=True, stall_timeout=20)
    finish(plain, loader, root)
    return report, world, root, plain


def finish(store: AgentTurnStore, loader: InMemoryAgentLoader, root: str) -> None:
    """After the schedule: a healthy worker takes the tree to its end (leases expire)."""
    import time

    runner = AgentRunner(turn_store=store, agent_loader=loader, policy=POLICY)
    deadline = time.monotonic() + 10 * LEASE_SECONDS + 5
    while time.monotonic() < deadline:
        if store.load(root).status.is_terminal:
            return
        turn = store.load(root)
        if turn.status is S.WAITING_FOR_APPROVAL:
            try:
                runner.submit_resume(root, AgentResumeCommand.approve_tool("r1"))
            except AgentWorkerError:
                pass
        claimed = runner.claim_runnable("finisher", limit=5)
        for t in claimed:
            with runner.holding(t):
                runner.step(t, release=True)
        if not claimed:
            time.sleep(0.02)
    raise AssertionError(f"turn {root} did not end: {store.load(root).status}")


def tool_runs(report: Report, world: World) -> list[str]:
    """Tool calls that ran more often than deaths allow."""
    problems: list[str] = []
    # no tool call runs twice unless the process running it died before its result was saved
    # (or its attempt ended fenced: a lease that ran out on a loaded machine, a version
    # another writer moved; that attempt's calls in flight are left unrecorded too)
    ok: dict[str, list[str]] = {}
    for call_id, actor, outcome in world.runs:
        if outcome == "ok":
            ok.setdefault(call_id, []).append(actor)
    fenced = set(world.fenced)
    for call_id, actors in ok.items():
        survivors = [a for a in actors if a not in report.crashed | fenced]
        ran = set(actors)
        ended = len(ran & report.crashed) + sum(world.fenced.count(a) for a in ran)
        if len(survivors) > 1 or len(actors) > 1 + ended:
            problems.append(f"tool call {call_id} ran {len(actors)} times: {actors}")
    # an attempt that ends re-runs at most the calls it had in flight: FANOUT at most
    twice = [c for c, actors in ok.items() if len(actors) > 1]
    ends = len(report.crashed & set(WORKERS)) + len(world.fenced)
    if len(twice) > FANOUT * ends:
        problems.append(
            f"{len(twice)} calls ran twice after {ends} deaths or fenced attempts: {twice}"
        )
    return problems


def check(report: Report, world: World, root: str, store: AgentTurnStore) -> list[str]:
    """Every invariant; the list of what broke (empty when all hold)."""
    problems = list(world.violations) + tool_runs(report, world)
    # one holding of a lease never asks the model the same thing twice; under a new lease
    # it may (the old one ran out, or its step gave up and released it)
    asked = [(key, lease) for key, lease in world.asked if lease != "-"]
    for key, lease in set(asked):
        if asked.count((key, lease)) > 1:
            problems.append(f"model call {key} made twice under lease {lease}")
    # committed events: once each, numbered 1..n per turn; one terminal event per ended turn
    log = store.read_events(root)
    ids = [e.event_id for e in log]
    if len(set(ids)) != len(ids):
        problems.append("an event appears twice in the log")
    for turn_id in {e.turn_id for e in log}:
        mine = [e for e in log if e.turn_id == turn_id]
        if [e.sequence for e in mine] != list(range(1, len(mine) + 1)):
            problems.append(f"{turn_id}: sequences {[e.sequence for e in mine]}")
        saved = [e.data["version"] for e in mine if e.type is E.SNAPSHOT_SAVED]
        if saved != sorted(set(saved)):
            problems.append(f"{turn_id}: versions saved out of order {saved}")
        terminal = [e for e in mine if e.type in TERMINAL_EVENTS]
        if store.load(turn_id).status.is_terminal and len(terminal) != 1:
            problems.append(f"{turn_id}: {len(terminal)} terminal events")
    # a parent settles each child once (its resumption is provisional: the commit of the
    # step that settles a wave records one TASK_COMPLETED or TASK_FAILED per child)
    parent = [e.type for e in log if e.turn_id == root]
    settled = Counter(
        e.data["child_turn_id"]
        for e in log
        if e.turn_id == root and e.type in (E.TASK_COMPLETED, E.TASK_FAILED)
    )
    if twice := sorted(c for c, n in settled.items() if n > 1):
        problems.append(f"parent settled children {twice} more than once: {parent}")
    return problems
