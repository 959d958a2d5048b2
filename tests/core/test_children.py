"""Child turns: fan-out and fan-in, ordering, budgets, roll-ups, repair, routing, cancellation."""

from __future__ import annotations

from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentBudget,
    AgentEventType,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentToolContext,
    AgentTurn,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AgentWorker,
    AiMessage,
    InvalidResumeError,
    ModelResponse,
    TaskStatus,
    ToolCall,
    ToolMessage,
    Usage,
    tool,
)
from tests.support.plans import (
    Scripted,
    Workers,
    World,
    ask,
    create,
    planner,
    task,
)

E = AgentEventType
S = AgentTurnStatus
THREE = (task("a"), task("b"), task("c"))


def forget_results(world: World, parent_id: str) -> None:
    """Records of older versions: the children ended but their results never reached the parent."""
    with world.store._lock:
        world.store._records[parent_id].header.child_results = {}


def one_wake(world: World, turn_id: str) -> None:
    """Each wave of children woke the parent exactly once (a suspension, then one resume)."""
    types = [t for t in world.log.types(turn_id) if t in (E.TURN_SUSPENDED, E.TURN_RESUMED)]
    assert types == [E.TURN_SUSPENDED, E.TURN_RESUMED] * (len(types) // 2), types


def step_held(runner: AgentRunner, turn_id: str, steps: int = 1) -> AgentTurn:
    """Claim the turn and step it under its lease, like one worker poll per step."""
    for _ in range(steps):
        held = runner.claim(turn_id, "w1")
        assert held is not None, f"{turn_id} is not claimable"
        with runner.holding(held):
            runner.step(held)
    return held


# -- fan-out and fan-in ----------------------------------------------------------------------


def test_three_independent_tasks_run_three_children_and_resume_the_parent_once() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(*THREE), "all done")

    root = world.runner().run(planner(model), "go")

    assert root.status is S.COMPLETED and root.final_output == "all done"
    assert model.calls == 2
    assert sorted(workers.order) == ["a", "b", "c"]
    children = world.children(root.id)
    assert len(children) == 3
    assert {c.status for c in children} == {S.COMPLETED}
    assert {(c.parent_turn_id, c.root_turn_id) for c in children} == {(root.id, root.id)}
    assert world.store.statuses(root.id) == [
        S.READY,
        S.RUNNING,
        S.WAITING_FOR_CHILD,
        S.RUNNING,
        S.COMPLETED,
    ]
    log = world.log
    assert len(log.of(E.TASK_STARTED, root.id)) == 3
    assert len(log.of(E.CHILD_STARTED, root.id)) == 3
    [suspended] = log.of(E.TURN_SUSPENDED, root.id)
    assert sorted(suspended.data["child_turn_ids"]) == sorted(c.id for c in children)
    assert len(log.of(E.TASK_COMPLETED, root.id)) == 3
    assert len(log.of(E.TURN_RESUMED, root.id)) == 1
    # the model's second request carries one answer to the plan call with all three results
    answers = [m for m in model.requests[1].messages if isinstance(m, ToolMessage)]
    assert [m.call_id for m in answers] == ["p1"]
    for name in "abc":
        assert f'"result": "result-{name}"' in answers[0].content


def test_worker_mode_makes_all_three_children_ready_together() -> None:
    world = World()
    runner = world.runner()
    seen: dict[str, Any] = {}

    def at_suspension(event: Any) -> None:
        if event.type is E.TURN_SUSPENDED and event.turn_id == root.id:
            seen["at_suspension"] = [c.status for c in world.children(root.id)]
            seen["ran_before"] = list(workers.order)

    def first_child(task_id: str) -> None:
        if "first" not in seen:
            kids = world.children(root.id)
            seen["first"] = (
                len(kids),
                [world.store.peek(c.id).live_lease is not None for c in kids],
            )

    workers = Workers(hook=first_child)
    world.register(workers.agent())
    model = Scripted(create(*THREE), "all done")
    runner.add_event_listener(at_suspension)
    root = runner.start(planner(model), "go")

    steps = AgentWorker(runner, worker_id="w1").run_until_idle()

    assert runner.restore(root.id).status is S.COMPLETED
    assert seen["at_suspension"] == [S.READY, S.READY, S.READY]
    assert seen["ran_before"] == []
    # the three were claimable at once: one poll leased them all before the first ran
    assert seen["first"] == (3, [True, True, True])
    assert model.calls == 2 and sorted(workers.order) == ["a", "b", "c"]
    assert steps == 3 + 3 + 2
    one_wake(world, root.id)
    assert world.store.statuses(root.id).count(S.WAITING_FOR_CHILD) == 1
    assert len(world.log.of(E.TURN_RESUMED, root.id)) == 1
    assert world.dispatched.count(root.id) == 2  # start, then the last child's fan-in


def test_a_diamond_runs_in_dependency_order() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(
        create(task("A"), task("B", deps=["A"]), task("C", deps=["A"]), task("D", deps=["B", "C"])),
        "done",
    )

    root = world.runner().run(planner(model), "go")

    assert root.status is S.COMPLETED
    assert workers.order[0] == "A" and workers.order[-1] == "D"
    assert sorted(workers.order[1:3]) == ["B", "C"]
    assert "Result of A: result-A" in workers.inputs["B"]
    assert "Result of A: result-A" in workers.inputs["C"]
    assert "Result of B: result-B" in workers.inputs["D"]
    assert "Result of C: result-C" in workers.inputs["D"]
    assert "Result of A" not in workers.inputs["D"]  # only direct dependencies
    assert "Result of" not in workers.inputs["A"]
    # B and C start as one wave: both before either has ended
    log = world.log
    started = {e.data["task_id"]: log.events.index(e) for e in log.of(E.TASK_STARTED, root.id)}
    ended = {e.data["task_id"]: log.events.index(e) for e in log.of(E.TASK_COMPLETED, root.id)}
    assert started["A"] < ended["A"] < started["B"] < started["C"] < ended["B"] < ended["C"]
    assert max(ended["B"], ended["C"]) < started["D"]
    assert len(log.of(E.TURN_SUSPENDED, root.id)) == 3
    assert len(log.of(E.TURN_RESUMED, root.id)) == 3
    one_wake(world, root.id)
    assert model.calls == 2


def test_child_input_is_built_from_the_plan_not_the_parent_history() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("t1", expected="three bullet points"), goal="a report"), "done")

    world.runner().run(planner(model), "secret parent input")

    text = workers.inputs["t1"]
    assert text.splitlines() == [
        "Overall goal: a report",
        "Your task (t1): do t1",
        "Expected output: three bullet points",
    ]
    [request] = workers.requests
    assert all("secret parent input" not in str(m) for m in request.messages)


# -- budget and usage ------------------------------------------------------------------------


def budget_options(limit: int) -> AgentTurnOptions:
    return AgentTurnOptions(
        policy=AgentExecutionPolicy(
            budget=AgentBudget(max_total_tokens=limit, max_duration_seconds=300.0)
        )
    )


def test_the_root_budget_bounds_the_whole_tree() -> None:
    world = World()
    workers = Workers(usage=Usage(input_tokens=30, output_tokens=20))
    world.register(workers.agent())
    model = Scripted(ModelResponse(create(task("a"), task("b")), Usage(input_tokens=10)))

    root = world.runner().run(planner(model), "go", options=budget_options(100))

    assert root.status is S.BUDGET_EXCEEDED
    assert root.terminal_reason == "max_total_tokens (used=110, limit=100)"
    assert model.calls == 1  # the summary request is never made
    children = world.children(root.id)
    for child in children:
        # two children started together split the 90 tokens left: 45 each, and each
        # overspends its share with its one 50-token answer
        assert child.status is S.BUDGET_EXCEEDED
        assert child.policy is not None
        assert child.policy.budget.max_total_tokens == 45

        duration = child.policy.budget.max_duration_seconds
        assert duration is not None and 0 < duration <= 300.0
    assert isinstance(root.messages[-1], AiMessage) and "max_total_tokens" in str(
        root.messages[-1].text
    )
    assert root.pending_tool_calls == []


def test_a_later_wave_gets_what_the_earlier_ones_left() -> None:
    world = World()
    workers = Workers(usage=Usage(input_tokens=30))
    world.register(workers.agent())
    model = Scripted(
        ModelResponse(create(task("a"), task("b", deps=["a"])), Usage(input_tokens=10)),
        "done",
    )

    root = world.runner().run(planner(model), "go", options=budget_options(1000))

    assert root.status is S.COMPLETED
    first, second = world.children(root.id)
    assert first.policy is not None and second.policy is not None
    assert first.policy.budget.max_total_tokens == 990
    assert second.policy.budget.max_total_tokens == 960


def test_a_child_over_the_remaining_budget_ends_budget_exceeded() -> None:
    world = World()
    workers = Workers(usage=Usage(input_tokens=70))
    world.register(workers.agent())
    model = Scripted(ModelResponse(create(task("a")), Usage(input_tokens=40)))

    root = world.runner().run(planner(model), "go", options=budget_options(100))

    [child] = world.children(root.id)
    assert child.status is S.BUDGET_EXCEEDED
    assert child.terminal_reason == "max_total_tokens (used=70, limit=60)"
    plan = root.task_plan
    assert plan is not None and plan.tasks[0].status is TaskStatus.FAILED
    assert root.status is S.BUDGET_EXCEEDED
    assert root.usage.total_tokens == 110


def test_child_usage_and_tool_calls_roll_up_into_the_parent() -> None:
    world = World()

    @tool
    def fetch(n: int) -> str:
        """Fetch."""
        return f"fetched {n}"

    def worker(name: str) -> Agent:
        model = Scripted(
            ModelResponse(
                AiMessage(tool_calls=[ToolCall(id="f1", name="fetch", arguments={"n": 1})]),
                Usage(input_tokens=3, output_tokens=1),
            ),
            ModelResponse(AiMessage(f"{name} done"), Usage(input_tokens=5, output_tokens=2)),
        )
        return Agent(name, model.model, tools=[fetch])

    world.register(worker("w1"), worker("w2"))
    model = Scripted(
        ModelResponse(
            create(task("a", agent="w1"), task("b", agent="w2")),
            Usage(input_tokens=100, output_tokens=10),
        ),
        ModelResponse(AiMessage("summary"), Usage(input_tokens=200, output_tokens=20)),
    )

    root = world.runner().run(planner(model, subs=("w1", "w2")), "go")

    assert root.status is S.COMPLETED
    for child in world.children(root.id):
        assert child.usage == Usage(input_tokens=8, output_tokens=3)
        assert child.tool_call_count == 1
    assert root.usage == Usage(input_tokens=300 + 16, output_tokens=30 + 6)
    assert root.tool_call_count == 2
    assert world.runner().restore(root.id).usage == root.usage


def test_usage_rolls_up_through_two_levels() -> None:
    world = World()
    workers = Workers(usage=Usage(input_tokens=7))
    sub = planner(
        Scripted(ModelResponse(create(task("leaf"), call_id="s1"), Usage(input_tokens=1)), "sub"),
        id="sub",
    )
    world.register(workers.agent(), sub)
    model = Scripted(create(task("t1", agent="sub")), "done")

    root = world.runner().run(planner(model, subs=("sub",)), "go")

    [mid] = world.children(root.id)
    assert mid.usage == Usage(input_tokens=8)
    assert root.usage == Usage(input_tokens=8)


# -- duplicate and late completions -------------------------------------------------------------


def ended_children_without_fan_in(world: World, n_tasks: int = 2) -> tuple[AgentTurn, list[str]]:
    """Worker mode, then the parent's record made to miss its children's results."""
    runner = world.runner()
    workers = Workers(usage=Usage(input_tokens=10))
    world.register(workers.agent())
    model = Scripted(create(*THREE[:n_tasks]), "done")
    root = runner.start(planner(model), "go")
    worker = AgentWorker(runner, worker_id="w1")
    while worker.run_once():
        parent = world.store.load(root.id)
        if parent.all_children_reported():
            break
    forget_results(world, root.id)
    stuck = runner.restore(root.id)
    assert stuck.status is S.WAITING_FOR_CHILD and not stuck.state.all_children_reported()
    ids = world.store.children_of(root.id)
    assert {world.store.load(c).status for c in ids} == {S.COMPLETED}
    return stuck, ids


def test_the_last_childs_commit_wakes_the_parent_atomically() -> None:
    world = World()
    workers = Workers(usage=Usage(input_tokens=10))
    world.register(workers.agent())
    runner = world.runner()
    root = runner.start(planner(Scripted(create(*THREE), "done")), "go")
    step_held(runner, root.id, steps=3)
    ids = world.store.children_of(root.id)
    assert len(ids) == 3
    world.dispatched.clear()

    for n, child_id in enumerate(ids):
        step_held(runner, child_id)
        parent = world.store.load(root.id)
        # the parent's own record is untouched: no version bump, no write under its lease
        assert parent.status is S.WAITING_FOR_CHILD
        assert sorted(parent.child_results) == sorted(ids[: n + 1])
        assert parent.all_children_reported() is (n == 2)
    assert world.dispatched == [root.id]  # woken once, by the last child's commit

    done = step_held(runner, root.id, steps=2)
    assert done.status is S.COMPLETED and done.usage.input_tokens == 30
    assert world.store.load(root.id).child_results == {}


def test_a_duplicate_child_completed_resume_is_refused_and_counted_once() -> None:
    world = World()
    stuck, (first, second) = ended_children_without_fan_in(world)
    runner = world.runner()

    waiting = runner.resume(stuck.id, AgentResumeCommand.child_completed(first))
    assert waiting.status is S.WAITING_FOR_CHILD
    version = waiting.version

    with pytest.raises(InvalidResumeError, match="already reported"):
        runner.resume(stuck.id, AgentResumeCommand.child_completed(first))
    assert runner.restore(stuck.id).version == version

    done = runner.resume(stuck.id, AgentResumeCommand.child_completed(second))
    assert done.status is S.COMPLETED
    with pytest.raises(InvalidResumeError, match="not waiting"):
        runner.resume(stuck.id, AgentResumeCommand.child_completed(second))
    final = runner.restore(stuck.id)
    assert final.usage.input_tokens == 20
    assert sorted(e.data["child_turn_id"] for e in world.log.of(E.TASK_COMPLETED, stuck.id)) == (
        sorted([first, second])
    )


def test_report_child_twice_is_a_no_op_the_second_time() -> None:
    world = World()
    stuck, (only,) = ended_children_without_fan_in(world, n_tasks=1)

    assert world.store.report_child(only) is True
    after_first = world.store.load(stuck.id)
    assert world.store.report_child(only) is False

    again = world.store.load(stuck.id)
    assert again.version == after_first.version == stuck.version
    assert again.all_children_reported() and again.status is S.WAITING_FOR_CHILD


def test_a_child_completed_resume_before_the_child_ended_is_refused() -> None:
    world = World()
    runner = world.runner()
    workers = Workers()
    world.register(workers.agent())
    root = runner.start(planner(Scripted(create(task("a")), "done")), "go")
    step_held(runner, root.id, steps=3)
    [child] = world.store.children_of(root.id)
    version = world.store.load(root.id).version

    with pytest.raises(InvalidResumeError, match="has not ended"):
        runner.resume(root.id, AgentResumeCommand.child_completed(child))
    with pytest.raises(InvalidResumeError, match="does not wait for child"):
        runner.resume(root.id, AgentResumeCommand.child_completed("stranger"))

    assert world.store.load(root.id).version == version
    assert workers.order == []


# -- repair after a crash --------------------------------------------------------------------------


def test_repair_wakes_a_parent_whose_children_ended_before_it_heard() -> None:
    world = World()
    stuck, ids = ended_children_without_fan_in(world, n_tasks=3)
    runner = world.runner()
    assert sorted(world.store.find_terminal_children_with_waiting_parent(10)) == sorted(
        (c, stuck.id) for c in ids
    )
    world.dispatched.clear()

    assert runner.repair() == 1
    assert world.dispatched == [stuck.id]
    assert runner.repair() == 0
    assert world.store.find_terminal_children_with_waiting_parent(10) == []

    AgentWorker(runner, worker_id="w2").run_until_idle()
    done = runner.restore(stuck.id)
    assert done.status is S.COMPLETED and done.final_output == "done"
    assert done.usage.input_tokens == 30
    assert len(world.log.of(E.TASK_COMPLETED, stuck.id)) == 3
    assert len(world.log.of(E.TURN_RESUMED, stuck.id)) == 1
    one_wake(world, stuck.id)
    assert world.dispatched == [stuck.id]


class Crash(RuntimeError):
    """The process dies right after the child's terminal save."""


def test_a_crash_after_the_childs_last_commit_loses_no_wake_up() -> None:
    world = World()
    runner = world.runner()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("a")), "done")
    root = runner.start(planner(model), "go")

    def crash_after_child(snapshot: AgentTurnSnapshot, expected: int) -> None:
        if snapshot.parent_turn_id == root.id and snapshot.status.is_terminal:
            world.store.before_save = None
            raise Crash("killed while the child's last commit is under way")

    # the child's last commit lands, then the process dies before it dispatches the parent
    world.store.before_save = crash_after_child
    with pytest.raises(Crash):
        AgentWorker(runner, worker_id="w1").run_until_idle()
    [child] = world.children(root.id)
    assert child.status is not S.COMPLETED  # raised before the write: nothing happened
    world.dispatched.clear()

    AgentWorker(runner, worker_id="w2").run_until_idle()  # (the child's lease ran out)

    done = runner.restore(root.id)
    assert done.status is S.COMPLETED
    assert model.calls == 2 and workers.order == ["a", "a"]
    assert len(world.log.of(E.TASK_COMPLETED, root.id)) == 1
    assert world.runner().repair() == 0


# -- events ----------------------------------------------------------------------------------------


def test_events_come_in_order() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("a"), task("b")), "done")

    root = world.runner().run(planner(model), "go")

    log = world.log
    children = world.store.children_of(root.id)
    key = {
        E.PLAN_CREATED,
        E.TASK_STARTED,
        E.CHILD_STARTED,
        E.TURN_SUSPENDED,
        E.TASK_COMPLETED,
        E.TURN_STARTED,
        E.TURN_RESUMED,
        E.TURN_COMPLETED,
    }
    assert [t for t in log.types(root.id) if t in key] == [
        E.TURN_STARTED,
        E.PLAN_CREATED,
        E.TASK_STARTED,
        E.CHILD_STARTED,
        E.TASK_STARTED,
        E.CHILD_STARTED,
        E.TURN_SUSPENDED,
        E.TURN_RESUMED,  # provisional, as the step that settles the children starts
        E.TASK_COMPLETED,
        E.TASK_COMPLETED,
        E.TURN_COMPLETED,
    ]
    suspended = log.index(E.TURN_SUSPENDED, root.id)
    for n, child in enumerate(children):
        started = log.index(E.TURN_STARTED, child)
        completed = log.index(E.TURN_COMPLETED, child)
        assert suspended < started < completed < log.index(E.TASK_COMPLETED, root.id, n)
        assert log.of(E.TASK_STARTED, root.id)[n].data["child_turn_id"] == child
    assert log.events[-1].type is E.TURN_COMPLETED and log.events[-1].turn_id == root.id
    for event in log.events:
        assert event.root_turn_id == root.id
        assert event.parent_turn_id == (None if event.turn_id == root.id else root.id)
    for turn_id in (root.id, *children):
        sequences = [e.sequence for e in log.events if e.turn_id == turn_id and not e.provisional]
        assert sequences == list(range(1, len(sequences) + 1))
    [plan_event] = log.of(E.PLAN_CREATED)
    assert [t["id"] for t in plan_event.data["plan"]["tasks"]] == ["a", "b"]


def test_a_failed_task_emits_task_failed() -> None:
    world = World()
    workers = Workers(fail={"a"})
    world.register(workers.agent())

    root = world.runner().run(planner(Scripted(create(task("a")), "done")), "go")

    [failed] = world.log.of(E.TASK_FAILED, root.id)
    assert failed.data["task_id"] == "a" and failed.data["child_status"] == "FAILED"
    assert "a broke" in failed.data["error"]
    assert world.log.of(E.TASK_COMPLETED, root.id) == []


# -- what children inherit -----------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [True, False])
def test_streaming_is_inherited(streaming: bool) -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("a")), "done")

    root = world.runner().run(planner(model), "go", options=AgentTurnOptions(streaming=streaming))

    [child] = world.children(root.id)
    assert child.streaming is streaming
    deltas = [e.data["text"] for e in world.log.of(E.MODEL_TEXT_DELTA, child.id)]
    assert deltas == (["result-a"] if streaming else [])


def test_metadata_is_inherited() -> None:
    world = World()
    seen: list[Any] = []

    @tool
    def whoami() -> str:
        """Report the tenant."""
        seen.append(dict(AgentToolContext.current().metadata))
        return "ok"

    worker = Agent(
        "worker", Scripted(ask(ToolCall(id="m1", name="whoami")), "done").model, tools=[whoami]
    )
    world.register(worker)
    options = AgentTurnOptions(metadata={"tenant": "acme", "trace": {"id": 7}})

    root = world.runner().run(planner(Scripted(create(task("a")), "done")), "go", options=options)

    [child] = world.children(root.id)
    assert child.metadata == {"tenant": "acme", "trace": {"id": 7}}
    assert seen == [{"tenant": "acme", "trace": {"id": 7}}]
    assert root.status is S.COMPLETED


# -- routing resumes to the blocked descendant ----------------------------------------------------


def approval_worker(ran: list[str], name: str = "worker", call_id: str = "w1") -> Agent:
    @tool(requires_approval=True)
    def publish() -> str:
        """Publish the report."""
        ran.append(AgentToolContext.current().turn_id)
        return "published"

    model = Scripted(ask(ToolCall(id=call_id, name="publish")), then="reported")
    return Agent(name, model.model, tools=[publish])


def test_resuming_the_root_routes_to_its_blocked_child() -> None:
    world = World()
    ran: list[str] = []
    world.register(approval_worker(ran))
    model = Scripted(create(task("a")), "done")
    runner = world.runner()

    root = runner.run(planner(model), "go")
    assert root.status is S.WAITING_FOR_CHILD
    [child] = world.children(root.id)
    assert child.status is S.WAITING_FOR_APPROVAL

    with pytest.raises(InvalidResumeError, match="no blocked descendant"):
        runner.resume(root.id, AgentResumeCommand.approve_tool("other-call"))
    assert world.store.load(child.id).status is S.WAITING_FOR_APPROVAL

    done = runner.resume(root.id, AgentResumeCommand.approve_tool("w1").with_metadata(by="u7"))

    assert done.id == root.id and done.status is S.COMPLETED and done.final_output == "done"
    after = world.store.load(child.id)
    assert after.status is S.COMPLETED and after.final_output == "reported"
    assert ran == [child.id]
    assert after.resume_log[0]["metadata"] == {"by": "u7"}
    plan = done.task_plan
    assert plan is not None and plan.tasks[0].result == "reported"


def test_resuming_the_root_reaches_a_grandchild() -> None:
    world = World()
    ran: list[str] = []
    sub = planner(Scripted(create(task("leaf"), call_id="s1"), "sub done"), id="sub")
    world.register(approval_worker(ran), sub)
    runner = world.runner()

    root = runner.run(
        planner(Scripted(create(task("t1", agent="sub")), "done"), subs=("sub",)), "go"
    )
    assert root.status is S.WAITING_FOR_CHILD

    done = runner.resume(root.id, AgentResumeCommand.reject_tool("w1", "not today"))

    assert done.status is S.COMPLETED
    [mid] = world.children(root.id)
    [leaf] = world.children(mid.id)
    assert (mid.status, leaf.status) == (S.COMPLETED, S.COMPLETED)
    assert ran == []


# -- cancellation ----------------------------------------------------------------------------------


def assert_closed(snapshot: AgentTurnSnapshot) -> None:
    assert snapshot.status is S.CANCELLED
    assert snapshot.pending_tool_calls == []
    last = snapshot.messages[-1]
    assert isinstance(last, AiMessage) and last.text is not None
    assert last.text.startswith("The previous turn ended before completion")
    answered = {m.call_id for m in snapshot.messages if isinstance(m, ToolMessage)}
    for message in snapshot.messages:
        if isinstance(message, AiMessage):
            assert {c.id for c in message.tool_calls} <= answered


def test_cancelling_a_parent_cancels_its_waiting_children() -> None:
    world = World()
    ran: list[str] = []
    world.register(approval_worker(ran), approval_worker(ran, name="other", call_id="w2"))
    model = Scripted(create(task("a"), task("b", agent="other")))
    runner = world.runner()
    root = runner.run(planner(model, subs=("worker", "other")), "go")
    assert {c.status for c in world.children(root.id)} == {S.WAITING_FOR_APPROVAL}

    cancelled = runner.cancel(root.id, reason="stop everything")

    assert cancelled.status is S.CANCELLED
    final = world.store.load(root.id)
    assert_closed(final)
    [closing] = [m for m in final.messages if isinstance(m, ToolMessage) and m.call_id == "p1"]
    assert closing.content == "Tool call was not completed: stop everything"
    for child in world.children(root.id):
        assert_closed(child)
        assert child.terminal_reason == "stop everything"
    assert ran == []
    assert model.calls == 1
    cancelled_ids = {e.turn_id for e in world.log.of(E.TURN_CANCELLED)}
    assert cancelled_ids == {root.id, *world.store.children_of(root.id)}
    with pytest.raises(InvalidResumeError):
        runner.resume(root.id, AgentResumeCommand.approve_tool("w1"))


def test_cancelling_a_parent_from_inside_a_running_child() -> None:
    world = World()
    runner = world.runner()
    box: dict[str, str] = {}

    @tool
    def abort() -> str:
        """Cancel the whole job while this child runs."""
        runner.cancel(box["root"])
        return "asked to stop"

    first = Agent("first", Scripted(ask(ToolCall(id="x1", name="abort"))).model, tools=[abort])
    second_model = Scripted()
    second = Agent("second", second_model.model)
    world.register(first, second)
    model = Scripted(create(task("a", agent="first"), task("b", agent="second")))
    root = runner.start(planner(model, subs=("first", "second")), "go")
    box["root"] = root.id

    result = runner.run_until_blocked(root)

    assert result.status is S.CANCELLED
    a, b = world.children(root.id)
    assert_closed(a)
    assert [m.content for m in a.messages if isinstance(m, ToolMessage)] == ["asked to stop"]
    assert_closed(b)
    assert second_model.calls == 0
    assert_closed(world.store.load(root.id))


def test_cancel_in_worker_mode_reaches_claimed_and_unclaimed_children() -> None:
    world = World()
    runner = world.runner()
    workers = Workers()
    world.register(workers.agent())
    root = runner.start(planner(Scripted(create(task("a"), task("b")))), "go")
    step_held(runner, root.id, steps=3)
    first, second = world.store.children_of(root.id)
    held = runner.claim(first, "w2")
    assert held is not None

    runner.cancel(root.id)

    assert world.store.load(root.id).status is S.CANCELLED
    assert world.store.load(second).status is S.CANCELLED
    assert world.store.load(first).cancel_requested
    with runner.holding(held):
        runner.run_until_blocked(held)
    assert_closed(world.store.load(first))
    assert runner.restore(root.id).status is S.CANCELLED
    assert "b" not in workers.order


# -- where children run ----------------------------------------------------------------------------


def test_sync_mode_runs_children_inline() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    runner = world.runner()

    root = runner.run(planner(Scripted(create(*THREE), "done")), "go")

    assert root.status is S.COMPLETED
    assert world.dispatched == []  # nobody else was asked to run anything
    assert {c.status for c in world.children(root.id)} == {S.COMPLETED}
    assert {c.lease for c in world.children(root.id)} == {None}


def test_worker_mode_never_runs_a_child_inline() -> None:
    world = World()
    runner = world.runner()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(*THREE), "done")
    root = runner.start(planner(model), "go")
    world.dispatched.clear()

    held = runner.claim(root.id, "w1")
    assert held is not None
    with runner.holding(held):
        blocked = runner.run_until_blocked(held)

    assert blocked.status is S.WAITING_FOR_CHILD
    assert workers.order == []
    ids = world.store.children_of(root.id)
    assert len(ids) == 3
    for child_id in ids:
        control = world.store.peek(child_id)
        assert (control.status, control.lease) == (S.READY, None)

    # other workers take the children; the last one to end hands the parent back
    claimed = runner.claim_runnable("w2", limit=10)
    assert sorted(t.id for t in claimed) == sorted(ids)
    for child in claimed:
        with runner.holding(child):
            runner.run_until_blocked(child)
    assert world.dispatched == [root.id]
    assert model.calls == 1
    parent = runner.restore(root.id)
    assert parent.status is S.WAITING_FOR_CHILD and parent.state.all_children_reported()
    step_held(runner, root.id, steps=2)
    assert runner.restore(root.id).status is S.COMPLETED


# -- a task whose agent cannot be loaded ----------------------------------------------------------


def test_a_task_whose_agent_is_unknown_fails_and_stop_skips_the_rest() -> None:
    world = World()
    workers = Workers()
    world.register(workers.agent())
    model = Scripted(create(task("ghostly", agent="ghost"), task("real")), "done")

    root = world.runner().run(planner(model, subs=("ghost", "worker")), "go")

    assert root.status is S.COMPLETED
    plan = root.task_plan
    assert plan is not None
    assert [(t.id, t.status) for t in plan.tasks] == [
        ("ghostly", TaskStatus.FAILED),
        ("real", TaskStatus.SKIPPED),
    ]
    assert "ghost" in (plan.tasks[0].error or "")
    assert workers.order == []
    assert world.store.children_of(root.id) == []
    [failed] = world.log.of(E.TASK_FAILED, root.id)
    assert failed.data["task_id"] == "ghostly"
