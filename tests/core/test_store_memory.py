"""The store contract on InMemoryAgentTurnStore: versions, claims, atomic saves, scans."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runner_core import (
    AgentConversationBusyException,
    AgentRunner,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AgentWorker,
    AiMessage,
    Commit,
    ConcurrentModificationError,
    HistoryRewrittenError,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
    LeaseLostError,
    Suspension,
    SuspensionType,
    TurnLeasedError,
    TurnNotFoundError,
    UserMessage,
    tool,
)
from tests.support.commits import save, save_tree
from tests.support.scripts import Script, agent, ask, call, stored_ids

HI = UserMessage("hi")


def snap(turn_id: str = "t1", **fields: Any) -> AgentTurnSnapshot:
    values: dict[str, Any] = {
        "id": turn_id,
        "agent_id": "support",
        "agent_version": "1",
        "root_turn_id": fields.pop("root_turn_id", turn_id),
        "messages": [HI],
        "created_at": 1.0,
        "updated_at": 1.0,
    }
    values.update(fields)
    return AgentTurnSnapshot(**values)


def test_versions_start_at_zero_and_grow_by_one(store: InMemoryAgentTurnStore) -> None:
    s = snap()

    results = [save(store, s, -1), save(store, s, 0), save(store, s, 1)]

    assert [r.version for r in results] == [0, 1, 2]
    assert store.load("t1").version == 2
    assert store.peek("t1").version == 2


def test_creating_an_existing_id_conflicts(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(), -1)
    save(store, snap(), 0)

    with pytest.raises(ConcurrentModificationError) as caught:
        save(store, snap(), -1)

    assert (caught.value.turn_id, caught.value.expected, caught.value.actual) == ("t1", -1, 1)


def test_stale_version_conflicts_and_writes_nothing(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(), -1)
    save(store, snap(), 0)

    with pytest.raises(ConcurrentModificationError) as caught:
        save(store, snap(status=AgentTurnStatus.FAILED), 0)

    assert (caught.value.expected, caught.value.actual) == (0, 1)
    assert "expected version 0, stored version 1" in str(caught.value)
    assert store.load("t1").status is AgentTurnStatus.READY


def test_unknown_id_raises_turn_not_found(store: InMemoryAgentTurnStore) -> None:
    for op in (
        lambda: store.load("nope"),
        lambda: store.peek("nope"),
        lambda: save(store, snap("nope"), 0),
        lambda: store.request_cancellation("nope"),
        lambda: store.claim("nope", "w", store.now(), 1000),
        lambda: store.renew_lease("nope", "w", "l", 0.0, 1.0),
        lambda: store.release_lease("nope", "w", "l"),
    ):
        with pytest.raises(TurnNotFoundError) as caught:
            op()
        assert caught.value.turn_id == "nope"


def test_loads_are_copies(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(metadata={"a": {"b": 1}}), -1)

    loaded = store.load("t1")
    loaded.messages.append(AiMessage("x"))
    loaded.metadata["a"]["b"] = 2
    loaded.status = AgentTurnStatus.FAILED

    again = store.load("t1")
    assert len(again.messages) == 1
    assert again.metadata == {"a": {"b": 1}}
    assert again.status is AgentTurnStatus.READY


def test_saves_never_change_the_lease(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(), -1)
    claimed = store.claim("t1", "w", store.now(), 10_000)
    assert claimed is not None

    assert claimed.lease is not None
    owner = (claimed.lease.owner, claimed.lease.lease_id)
    unleased = claimed.model_copy(update={"lease": None})
    result = store.commit(Commit(unleased, claimed.version, "r1", lease=owner))

    assert result.version == claimed.version + 1
    assert store.peek("t1").lease == claimed.lease


def test_a_write_without_the_live_lease_is_refused(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(), -1)
    claimed = store.claim("t1", "w", store.now(), 10_000)
    assert claimed is not None

    with pytest.raises(TurnLeasedError) as refused:
        save(store, claimed, claimed.version)
    with pytest.raises(LeaseLostError):
        store.commit(Commit(claimed, claimed.version, "r2", lease=("w", "not-the-lease-id")))

    assert refused.value.owner == "w" and 9 < refused.value.retry_after <= 10
    assert store.peek("t1").version == claimed.version


def test_claim_bumps_the_version(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(), -1)

    claimed = store.claim("t1", "w", store.now(), 10_000)

    assert claimed is not None and claimed.version == 1
    assert claimed.lease is not None and claimed.lease.owner == "w"
    assert store.peek("t1").version == 1
    assert store.claim("t1", "other", store.now(), 10_000) is None


def test_twenty_concurrent_claims_have_one_winner(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(), -1)
    barrier = threading.Barrier(20)
    won: list[str] = []

    def claim(worker: str) -> None:
        barrier.wait(timeout=5)
        if store.claim("t1", worker, store.now(), 10_000) is not None:
            won.append(worker)

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)

    assert len(won) == 1
    assert store.peek("t1").lease.owner == won[0]  # type: ignore[union-attr]
    assert store.peek("t1").version == 1


@pytest.mark.parametrize(
    ("status", "claimable"),
    [
        (AgentTurnStatus.READY, True),
        (AgentTurnStatus.RUNNING, True),
        (AgentTurnStatus.WAITING_FOR_USER, False),
        (AgentTurnStatus.WAITING_FOR_APPROVAL, False),
        (AgentTurnStatus.WAITING_FOR_CHILD, False),
        (AgentTurnStatus.COMPLETED, False),
        (AgentTurnStatus.FAILED, False),
    ],
)
def test_which_statuses_are_claimable(
    store: InMemoryAgentTurnStore, status: AgentTurnStatus, claimable: bool
) -> None:
    save(store, snap(status=status), -1)

    assert (store.claim("t1", "w", store.now(), 1000) is not None) is claimable


def test_retry_scheduled_is_claimable_only_when_due(store: InMemoryAgentTurnStore) -> None:
    now = store.now()
    save(store, snap(status=AgentTurnStatus.RETRY_SCHEDULED, next_runnable_at=now + 100), -1)

    assert store.claim("t1", "w", now, 1000) is None
    assert store.claim_runnable("w", now + 99, 1000, 10) == []
    [claimed] = store.claim_runnable("w", now + 100, 1000, 10)
    assert claimed.id == "t1"


def test_waiting_turn_with_cancel_requested_is_claimable(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(status=AgentTurnStatus.WAITING_FOR_APPROVAL), -1)
    assert store.request_cancellation("t1")

    assert store.claim("t1", "w", store.now(), 1000) is not None


def test_cancelled_turn_is_never_reclaimed(
    runner: AgentRunner, store: InMemoryAgentTurnStore
) -> None:
    turn = runner.start(agent(Script()), "hi")
    runner.cancel(turn.id)

    assert store.load(turn.id).status is AgentTurnStatus.CANCELLED
    assert store.claim(turn.id, "w", store.now() + 3600, 1000) is None
    assert store.claim_runnable("w", store.now() + 3600, 1000, 10) == []


def test_live_lease_blocks_claims_until_it_expires(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(status=AgentTurnStatus.RUNNING), -1)
    now = store.now()
    assert store.claim("t1", "w1", now, 1_000) is not None

    assert store.claim("t1", "w2", now + 0.999, 1_000) is None
    assert store.claim("t1", "w2", now + 1.0, 1_000) is not None


def test_child_not_claimable_while_its_parent_holds_a_live_lease(
    store: InMemoryAgentTurnStore,
) -> None:
    save(store, snap("parent", status=AgentTurnStatus.RUNNING), -1)
    save(store, snap("child", parent_turn_id="parent", root_turn_id="parent"), -1)
    now = store.now()
    parent = store.claim("parent", "w1", now, 10_000)
    assert parent is not None and parent.lease is not None

    assert store.claim("child", "w2", now, 10_000) is None
    assert [s.id for s in store.claim_runnable("w2", now, 10_000, 10)] == []

    assert store.release_lease("parent", "w1", parent.lease.lease_id) is True
    assert store.claim("child", "w2", now, 10_000) is not None
    assert store.children_of("parent") == ["child"]


def test_claim_runnable_respects_the_limit_and_age_order(store: InMemoryAgentTurnStore) -> None:
    for i in range(5):
        save(store, snap(f"t{i}"), -1)

    first = store.claim_runnable("w", store.now(), 10_000, 3)
    rest = store.claim_runnable("w", store.now(), 10_000, 10)

    assert [s.id for s in first] == ["t0", "t1", "t2"]
    assert [s.id for s in rest] == ["t3", "t4"]


def test_save_parent_and_children_is_atomic(store: InMemoryAgentTurnStore) -> None:
    # Given a parent and an unrelated turn whose id a child will collide with
    save(store, snap("parent", status=AgentTurnStatus.RUNNING), -1)
    save(store, snap("taken"), -1)
    waiting = snap(
        "parent",
        status=AgentTurnStatus.WAITING_FOR_CHILD,
        suspension=Suspension(type=SuspensionType.CHILD, correlation_id="c-new"),
    )
    children = [
        snap("c-new", parent_turn_id="parent", root_turn_id="parent"),
        snap("taken", parent_turn_id="parent", root_turn_id="parent"),
    ]

    # When the atomic write meets the conflict
    with pytest.raises(ConcurrentModificationError):
        save_tree(store, waiting, 0, children)

    # Then nothing was written at all
    assert store.peek("parent").version == 0
    assert store.load("parent").status is AgentTurnStatus.RUNNING
    with pytest.raises(TurnNotFoundError):
        store.load("c-new")
    assert store.children_of("parent") == []

    # and without the conflict everything is written at once
    result = save_tree(store, waiting, 0, children[:1])
    assert result.version == 1
    assert store.load("c-new").version == 0
    assert store.children_of("parent") == ["c-new"]


def test_save_parent_and_children_checks_the_parent_version(
    store: InMemoryAgentTurnStore,
) -> None:
    save(store, snap("parent"), -1)

    with pytest.raises(ConcurrentModificationError):
        save_tree(store, snap("parent"), 5, [snap("kid", parent_turn_id="parent")])

    with pytest.raises(TurnNotFoundError):
        store.load("kid")


def test_find_terminal_children_with_waiting_parent(store: InMemoryAgentTurnStore) -> None:
    parent = snap(
        "parent",
        status=AgentTurnStatus.WAITING_FOR_CHILD,
        suspension=Suspension(type=SuspensionType.CHILD, correlation_id="kid"),
    )
    save(store, parent, -1)
    kid = snap("kid", parent_turn_id="parent", root_turn_id="parent")
    save(store, kid, -1)
    assert store.find_terminal_children_with_waiting_parent(10) == []

    # the child's terminal commit records its result in the parent and wakes it
    result = save(store, kid.model_copy(update={"status": AgentTurnStatus.COMPLETED}), 0)
    assert result.parent_woken
    assert store.find_terminal_children_with_waiting_parent(10) == []
    assert set(store.load("parent").child_results) == {"kid"}
    assert store.claim("parent", "w", store.now(), 1000) is not None


def test_repair_finds_a_result_that_never_reached_the_parent(
    store: InMemoryAgentTurnStore,
) -> None:
    # an ended child the parent started waiting for afterwards (records of older versions)
    save(store, snap("parent"), -1)
    kid = snap("kid", parent_turn_id="parent", root_turn_id="parent")
    save(store, kid, -1)
    save(store, kid.model_copy(update={"status": AgentTurnStatus.COMPLETED}), 0)
    waiting = snap(
        "parent",
        status=AgentTurnStatus.WAITING_FOR_CHILD,
        suspension=Suspension(type=SuspensionType.CHILD, correlation_id="kid"),
    )
    save(store, waiting, 0)
    assert store.find_terminal_children_with_waiting_parent(10) == [("kid", "parent")]

    assert store.report_child("kid") is True
    assert store.report_child("kid") is False  # a duplicate report changes nothing
    assert store.find_terminal_children_with_waiting_parent(10) == []


def test_history_is_append_only(store: InMemoryAgentTurnStore) -> None:
    first, second = UserMessage("hi"), AiMessage("hello")
    save(store, snap(messages=[first, second]), -1)

    with pytest.raises(HistoryRewrittenError):
        save(store, snap(messages=[first]), 0)  # drops a message
    with pytest.raises(HistoryRewrittenError):
        save(store, snap(messages=[first, AiMessage("rewritten")]), 0)  # replaces one
    assert store.peek("t1").version == 0
    assert store.load("t1").messages == [first, second]

    third = UserMessage("more")
    assert save(store, snap(messages=[first, second, third]), 0).version == 1
    assert store.load("t1").messages == [first, second, third]


def test_conversation_busy_check_is_part_of_creation(store: InMemoryAgentTurnStore) -> None:
    save(store, snap("a", conversation_id="conv"), -1)
    assert store.find_active_turn("conv") == ("a", AgentTurnStatus.READY)

    with pytest.raises(AgentConversationBusyException) as caught:
        save(store, snap("b", conversation_id="conv"), -1)
    assert caught.value.active_turn_id == "a"
    with pytest.raises(TurnNotFoundError):
        store.load("b")

    save(store, snap("a", conversation_id="conv", status=AgentTurnStatus.COMPLETED), 0)
    assert store.find_active_turn("conv") is None
    assert save(store, snap("b", conversation_id="conv"), -1).version == 0


def test_request_cancellation_is_monotonic(store: InMemoryAgentTurnStore) -> None:
    save(store, snap(), -1)

    assert store.request_cancellation("t1", "why")
    assert not store.request_cancellation("t1", "again")
    save(store, snap(), 0)  # a save without the flag
    control = store.peek("t1")
    assert (control.cancel_requested, control.version) == (True, 1)
    assert store.load("t1").cancel_reason == "why"


def test_several_runners_in_threads_share_one_store() -> None:
    # Given one store, one loader and four runners, each in its own thread
    store, loader = InMemoryAgentTurnStore(), InMemoryAgentLoader()
    counts: dict[str, int] = {}
    lock = threading.Lock()

    @tool
    def count(key: str) -> str:
        """Count a call."""
        with lock:
            counts[key] = counts.get(key, 0) + 1
        return "ok"

    def model(request: Any) -> Any:
        if any(getattr(m, "role", "") == "tool" for m in request.messages):
            return "done"
        return ask(call("count", key=request.messages[-1].text))

    shared = agent(Script(then=model), count)
    loader.register(shared)
    results: list[AgentTurnStatus] = []

    def work(n: int) -> None:
        r = AgentRunner(store, loader)
        for i in range(10):
            results.append(r.run("support", f"{n}-{i}").status)

    # When each runs ten turns concurrently
    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)

    # Then every turn completed and ran its tool exactly once
    assert results == [AgentTurnStatus.COMPLETED] * 40
    assert len(stored_ids(store)) == 40
    assert len(counts) == 40 and set(counts.values()) == {1}


def test_workers_in_threads_run_each_tool_once(
    store: InMemoryAgentTurnStore, loader: InMemoryAgentLoader
) -> None:
    counts: dict[str, int] = {}
    lock = threading.Lock()

    @tool
    def count(key: str) -> str:
        """Count a call."""
        with lock:
            counts[key] = counts.get(key, 0) + 1
        return "ok"

    def model(request: Any) -> Any:
        if any(getattr(m, "role", "") == "tool" for m in request.messages):
            return "done"
        return ask(call("count", key=request.messages[-1].text))

    producer = AgentRunner(store, loader)
    a = agent(Script(then=model), count)
    ids = [producer.start(a, f"job-{i}").id for i in range(20)]

    workers = [AgentWorker(AgentRunner(store, loader), worker_id=f"w{i}") for i in range(4)]
    threads = [threading.Thread(target=w.run_until_idle) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)

    assert [store.load(i).status for i in ids] == [AgentTurnStatus.COMPLETED] * 20
    assert set(counts) == {f"job-{i}" for i in range(20)}
    assert set(counts.values()) == {1}
