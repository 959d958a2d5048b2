"""One door: every change of a turn is one fenced commit, and events follow commits.

Each test is a race between two entry points that broke the headline ("a turn never
loses or doubles a step") before every write went through ``commit``; each runs on
every store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentExecutionPolicy,
    AgentPlanningPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    AgentTurnStore,
    AiMessage,
    Commit,
    ConcurrentModificationError,
    FunctionModel,
    InMemoryAgentLoader,
    LeaseLostError,
    ModelRequest,
    RetryPolicy,
    StoreUnavailableError,
    ToolCall,
    ToolMessage,
    TurnLeasedError,
    tool,
)
from tests.support.commits import save, save_tree
from tests.support.stores import child_of, snap, waiting_for

S = AgentTurnStatus
E = AgentEventType


class Ledger:
    """Every run of a tool, by call id: (outcome, who)."""

    def __init__(self) -> None:
        self.runs: dict[str, list[str]] = {}
        self.lock = threading.Lock()

    def add(self, call_id: str, outcome: str) -> None:
        with self.lock:
            self.runs.setdefault(call_id, []).append(outcome)


def flaky_agent(ledger: Ledger, fail_first: int = 1) -> Agent:
    """Calls ``charge`` once (id c1), then answers; the tool fails ``fail_first`` times."""

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        from runner_core import AgentToolContext

        call_id = AgentToolContext.current().call_id
        failed = sum(1 for r in ledger.runs.get(call_id, []) if r == "failed")
        if failed < fail_first:
            ledger.add(call_id, "failed")
            raise ConnectionError("payment gateway timed out")
        ledger.add(call_id, "ok")
        return f"charged {amount}"

    def answer(request: ModelRequest) -> AiMessage:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AiMessage("done")
        return AiMessage(tool_calls=[ToolCall(id="c1", name="charge", arguments={"amount": 5})])

    return Agent("payer", FunctionModel(answer), tools=[charge])


@pytest.fixture
def make_runner(make_store: Callable[[], AgentTurnStore]) -> Callable[..., AgentRunner]:
    """Runners on separate store clients (separate processes in real life), one loader."""
    loader = InMemoryAgentLoader()

    def make(**kwargs: Any) -> AgentRunner:
        return AgentRunner(turn_store=make_store(), agent_loader=loader, **kwargs)

    return make


RETRY_NOW = AgentExecutionPolicy(retry=RetryPolicy(max_retries=3, initial_delay=0.001))


def test_a_resume_over_a_live_lease_is_refused_and_the_tool_runs_once_more_only(
    make_runner: Callable[..., AgentRunner],
) -> None:
    # Given a tool that failed retryably: the turn is RETRY_SCHEDULED in phase TOOLS
    ledger = Ledger()
    webhook, worker = make_runner(), make_runner()
    options = AgentTurnOptions(policy=RETRY_NOW)
    turn = worker.start(flaky_agent(ledger), "pay", options=options)
    held = worker.claim(turn.id, "w1")
    assert held is not None
    with worker.holding(held):
        worker.step(held)
        worker.step(held)
    assert worker.restore(turn.id).status is S.RETRY_SCHEDULED
    time.sleep(0.01)  # the retry is due
    # When a worker claims the due retry and a webhook resumes it meanwhile
    held = worker.claim(turn.id, "w2")
    assert held is not None
    with pytest.raises(TurnLeasedError) as refused:
        webhook.submit_resume(turn.id, AgentResumeCommand.retry())
    # Then the resume changed nothing, and only the lease holder runs the tool again
    assert refused.value.owner == "w2" and refused.value.retry_after > 0
    with worker.holding(held):
        worker.step(held, release=True)
    with pytest.raises(Exception, match="not waiting"):
        webhook.submit_resume(turn.id, AgentResumeCommand.retry())
    assert ledger.runs == {"c1": ["failed", "ok"]}


class Wrapped:
    """A store passing every call through to ``inner``; subclasses step into some."""

    def __init__(self, inner: AgentTurnStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ClaimBeforeCommit(Wrapped):
    """A store whose next commit is preceded by another worker's claim (a race)."""

    def __init__(self, inner: AgentTurnStore, claimer: AgentTurnStore) -> None:
        super().__init__(inner)
        self.claimer, self.armed = claimer, False

    def commit(self, commit: Commit) -> Any:
        if self.armed:
            self.armed = False
            s = commit.snapshot
            assert self.claimer.claim(s.id, "w-other", self.claimer.now(), 30_000) is not None
        return self.inner.commit(commit)


def test_a_cancel_never_finalises_under_another_workers_lease(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a READY turn, and a claim landing between the cancel's check and its commit
    loader = InMemoryAgentLoader()
    racing = ClaimBeforeCommit(make_store(), make_store())
    canceller = AgentRunner(turn_store=racing, agent_loader=loader)  # type: ignore[arg-type]
    turn = canceller.start(flaky_agent(Ledger()), "pay")
    racing.armed = True

    after = canceller.cancel(turn.id, "user pressed stop")

    # Then only the flag was set: the owner ends the turn at its next check
    stored = make_store().load(turn.id)
    assert stored.status is S.READY and stored.cancel_requested
    assert stored.lease is not None and stored.lease.owner == "w-other"
    assert after.status is S.READY
    owner = AgentRunner(turn_store=make_store(), agent_loader=loader)
    lease = stored.lease
    make_store().release_lease(turn.id, "w-other", lease.lease_id)
    held = owner.claim(turn.id, "w-other-2")
    assert held is not None
    with owner.holding(held):
        owner.step(held)
    assert make_store().load(turn.id).status is S.CANCELLED


def test_a_hundred_children_ending_together_wake_their_parent_once(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a parent waiting on 100 children, and the parent's lease held by its owner
    store = make_store()
    parent = snap()
    save(store, parent, -1)
    kids = [child_of(parent) for _ in range(100)]
    waiting_for(parent, *kids)
    save_tree(store, parent, 0, kids)
    store.request_cancellation(parent.id)  # (so its owner may hold it while it waits)
    owner = store.claim(parent.id, "owner", store.now(), 60_000)
    assert owner is not None and owner.lease is not None
    barrier = threading.Barrier(20)
    results: list[Any] = []
    errors: list[BaseException] = []

    def end(batch: list[Any]) -> None:
        mine = make_store()
        barrier.wait()
        for kid in batch:
            kid.status = S.COMPLETED
            try:
                results.append(save(mine, kid, 0))
            except BaseException as exc:  # noqa: BLE001 - counted below
                errors.append(exc)

    # When all 100 end at the same instant
    threads = [threading.Thread(target=end, args=(kids[i::20],)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    # Then no commit conflicted, the parent woke exactly once, and its owner is not fenced
    assert errors == []
    assert sum(r.parent_woken for r in results) == 1
    stored = store.load(parent.id)
    assert stored.version == owner.version and len(stored.child_results) == 100
    owner.status, owner.suspension = S.RUNNING, None
    lease = (owner.lease.owner, owner.lease.lease_id)
    assert store.commit(Commit(owner, owner.version, "o1", lease)).version == owner.version + 1


def test_children_written_after_a_cancel_request_are_born_with_it(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    # Given a parent whose cancel flag was set while its owner was still in its step
    store = make_store()
    parent = snap()
    save(store, parent, -1)
    owner = store.claim(parent.id, "owner", store.now(), 60_000)
    assert owner is not None and owner.lease is not None
    store.request_cancellation(parent.id, "stop it")

    # When the owner's commit creates children (it read the turn before the flag was set)
    kids = [child_of(parent) for _ in range(2)]
    waiting_for(owner, *kids)
    lease = (owner.lease.owner, owner.lease.lease_id)
    result = store.commit(Commit(owner, owner.version, "c1", lease, children=tuple(kids)))

    # Then the children carry the flag and its reason from birth, as the parent does
    assert result.cancel_requested
    for kid in kids:
        stored = store.load(kid.id)
        assert (stored.cancel_requested, stored.cancel_reason) == (True, "stop it")
        assert store.peek(kid.id).cancel_requested


class CancelBeforeSpawn(Wrapped):
    """A store in which a cancel of the turn lands just before the commit creating children."""

    def __init__(self, inner: AgentTurnStore, canceller: AgentRunner) -> None:
        super().__init__(inner)
        self.canceller, self.fired = canceller, False

    def commit(self, commit: Commit) -> Any:
        if commit.children and not self.fired:
            self.fired = True
            turn_id = commit.snapshot.id
            assert self.canceller.store.children_of(turn_id) == []
            self.canceller.cancel(turn_id, "changed my mind")  # under the worker's lease
        return self.inner.commit(commit)


def test_a_cancel_that_overtakes_the_step_spawning_children_cancels_them_too(
    make_runner: Callable[..., AgentRunner], make_store: Callable[[], AgentTurnStore]
) -> None:
    # Given a planner whose plan is being made into child turns when a cancel arrives
    # (the tree has no children yet, so the cancel's cascade finds none)
    asked: list[str] = []
    canceller = make_runner()
    spawning = CancelBeforeSpawn(make_store(), canceller)
    worker = AgentRunner(turn_store=spawning, agent_loader=canceller.loader)  # type: ignore[arg-type]
    tasks = [{"id": "a", "description": "check a"}, {"id": "b", "description": "check b"}]
    plan = ToolCall(id="p1", name="create_task_plan", arguments={"goal": "g", "tasks": tasks})

    def planner(request: ModelRequest) -> AiMessage:
        asked.append("planner")
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AiMessage("summary")
        return AiMessage(tool_calls=[plan])

    def helper(request: ModelRequest) -> AiMessage:
        asked.append("helper")
        return AiMessage("checked")

    assert isinstance(worker.loader, InMemoryAgentLoader)
    worker.loader.register(Agent("helper", FunctionModel(helper)))
    agent = Agent(
        "planner", FunctionModel(planner), sub_agents=["helper"], planning=AgentPlanningPolicy()
    )
    root = worker.start(agent, "go").id

    # When the worker steps whatever it can claim until the tree is quiet
    for _ in range(20):
        claimed = worker.claim_runnable("w1", limit=5)
        if not claimed:
            break
        for turn in claimed:
            with worker.holding(turn):
                worker.step(turn, release=True)

    # Then the children it created in that step ended cancelled, and no helper was asked
    store = make_store()
    children = store.children_of(root)
    assert spawning.fired and len(children) == 2
    assert store.load(root).status is S.CANCELLED
    assert [store.load(c).status for c in children] == [S.CANCELLED, S.CANCELLED]
    assert asked == ["planner"]


class BlipAfterCommit(Wrapped):
    """A store whose ``times`` next commits land but lose their reply (a Redis blip)."""

    def __init__(self, inner: AgentTurnStore, times: int = 1) -> None:
        super().__init__(inner)
        self.times = times
        self.request_ids: list[str] = []

    def commit(self, commit: Commit) -> Any:
        self.request_ids.append(commit.request_id)
        result = self.inner.commit(commit)
        if self.times > 0 and commit.snapshot.status.is_terminal:
            self.times -= 1
            raise StoreUnavailableError("redis://blip", ConnectionError("reply lost"))
        return result


def test_a_blip_on_the_final_commit_is_ridden_out_without_a_second_tool_run(
    make_store: Callable[[], AgentTurnStore],
) -> None:
    ledger = Ledger()
    blip = BlipAfterCommit(make_store(), times=2)
    runner = AgentRunner(turn_store=blip, agent_loader=InMemoryAgentLoader())  # type: ignore[arg-type]
    turn = runner.start(flaky_agent(ledger, fail_first=0), "pay")
    for _ in range(3):
        held = runner.claim(turn.id, "w1")
        if held is None:
            break
        with runner.holding(held):
            runner.step(held, release=True)

    stored = make_store().load(turn.id)
    assert stored.status is S.COMPLETED and stored.lease is None
    assert ledger.runs == {"c1": ["ok"]}
    # the lost replies were answered by replays of the same request id
    assert blip.request_ids[-1] == blip.request_ids[-2] == blip.request_ids[-3]
    assert runner.claim(turn.id, "w2") is None


class BlipAfterArming(Wrapped):
    """A store whose reads and commits fail ``times`` times once ``armed`` (Redis unreachable)."""

    def __init__(self, inner: AgentTurnStore, times: int) -> None:
        super().__init__(inner)
        self.times, self.armed = times, False

    def _blip(self) -> None:
        if self.armed and self.times > 0:
            self.times -= 1
            raise StoreUnavailableError("redis://blip", ConnectionError("connection reset"))

    def peek(self, turn_id: str) -> Any:
        self._blip()
        return self.inner.peek(turn_id)

    def commit(self, commit: Commit) -> Any:
        self._blip()
        return self.inner.commit(commit)


@pytest.mark.parametrize("leased", [True, False])
def test_a_blip_after_a_model_call_never_throws_the_paid_answer_away(
    make_store: Callable[[], AgentTurnStore], leased: bool
) -> None:
    # Given a step whose model has answered, when the store blips at the commit that
    # records the answer (a lease holder rides out a blip until its lease runs out, others
    # a few tries)
    asked: list[int] = []
    blip = BlipAfterArming(make_store(), times=2)

    def answer(request: ModelRequest) -> AiMessage:
        asked.append(len(request.messages))
        blip.armed = True
        return AiMessage("done")

    runner = AgentRunner(turn_store=blip, agent_loader=InMemoryAgentLoader())  # type: ignore[arg-type]
    turn = runner.start(Agent("writer", FunctionModel(answer)), "write")
    if leased:
        held = runner.claim(turn.id, "w1")
        assert held is not None
        with runner.holding(held):
            runner.step(held, release=True)
    else:
        runner.step(turn)

    # Then the answer is saved from that one model call
    stored = make_store().load(turn.id)
    assert stored.status is S.COMPLETED and stored.final_output == "done"
    assert asked == [1] and blip.times == 0


def test_a_fenced_step_announces_nothing_it_did_not_commit(
    make_runner: Callable[..., AgentRunner], make_store: Callable[[], AgentTurnStore]
) -> None:
    # Given worker A inside a model call when its lease is lost to worker B
    seen: list[AgentEvent] = []
    a, b = make_runner(), make_runner()
    a.add_event_listener(seen.append)
    b.add_event_listener(seen.append)
    stolen: list[Any] = []

    def answer(request: ModelRequest) -> AiMessage:
        store = make_store()
        s = store.load(turn.id)
        assert s.lease is not None
        store.release_lease(turn.id, s.lease.owner, s.lease.lease_id)  # as if it expired
        stolen.append(b.claim(turn.id, "B"))
        return AiMessage("done by A")

    turn = a.start(Agent("slow", FunctionModel(answer)), "hi")
    held = a.claim(turn.id, "A")
    assert held is not None
    with pytest.raises((LeaseLostError, ConcurrentModificationError)):
        with a.holding(held):
            a.step(held)

    # Then A's step left only its provisional start: nothing it did not commit
    assert [(e.type, e.provisional) for e in seen] == [
        (E.SNAPSHOT_SAVED, False),  # the creation
        (E.TURN_STARTED, True),
        (E.STEP_STARTED, True),
        (E.MODEL_STARTED, True),
    ]
    assert len({e.attempt for e in seen[1:]}) == 1
    assert seen[1].attempt  # the lease id of the abandoned attempt
    assert [e.type for e in make_store().read_events(turn.id)] == [E.SNAPSHOT_SAVED]
    # and B's cancel (B holds the lease, so only the flag) is numbered right after
    assert stolen[0] is not None
    b.cancel(turn.id, "stop")
    log = make_store().read_events(turn.id)
    assert [(e.type, e.sequence) for e in log] == [
        (E.SNAPSHOT_SAVED, 1),
        (E.CANCELLATION_REQUESTED, 2),
    ]
    assert make_store().load(turn.id).status is S.READY
    b.release(stolen[0])


def test_committed_events_are_in_the_log_once_each_numbered_per_turn(
    make_runner: Callable[..., AgentRunner], make_store: Callable[[], AgentTurnStore]
) -> None:
    from tests.support import scenarios

    seen: list[AgentEvent] = []
    runner = make_runner()
    runner.add_event_listener(seen.append)
    root = scenarios.planning_with_children(runner)

    log = make_store().read_events(root.id)
    assert [e.event_id for e in log] == [e.event_id for e in seen if not e.provisional]
    for turn_id in {e.turn_id for e in log}:
        numbers = [e.sequence for e in log if e.turn_id == turn_id]
        assert numbers == list(range(1, len(numbers) + 1))
    parent = [e.type for e in log if e.turn_id == root.id]
    # the parent settles its children in its own step: one commit, with a SNAPSHOT_SAVED
    settled = parent.index(E.TASK_COMPLETED)
    assert E.SNAPSHOT_SAVED in parent[settled:] and parent.count(E.TURN_SUSPENDED) >= 1
    # and the newest of them read from the end are the log's tail, oldest first (the Redis
    # stream also holds provisional entries, so it may return fewer)
    tail = make_store().read_events(root.id, 30, newest=True)
    assert 0 < len(tail) <= 30 and [e.event_id for e in tail] == [
        e.event_id for e in log[-len(tail) :]
    ]
