"""What only the Redis store has to prove: one slot per script, cross-process atomicity,
isolated corruption, idempotent replays, connection errors, and append-only payloads."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from runner_core import (
    Agent,
    AgentConversationBusyException,
    AgentRunner,
    AgentTurnStatus,
    AgentWorkerError,
    AiMessage,
    Commit,
    FunctionModel,
    InMemoryAgentLoader,
    SnapshotCorruptedError,
    TurnNotFoundError,
    UserMessage,
)
from stores import RedisAgentTurnStore, StoreUnavailableError
from tests.support import scenarios
from tests.support.capture import recording_store, slots
from tests.support.commits import save, save_tree
from tests.support.servers import RedisServer, free_port
from tests.support.stores import child_of, snap, waiting_for

pytestmark = pytest.mark.redis
S = AgentTurnStatus


def test_every_script_call_touches_one_hash_slot(redis_server: RedisServer, namespace: str) -> None:
    redis_server.client().flushdb()
    store, recorded = recording_store(redis_server.url, namespace)
    loader = InMemoryAgentLoader()

    def make_runner() -> AgentRunner:
        return AgentRunner(turn_store=store, agent_loader=loader)

    # Given every operation the runner and the Celery layer use
    scenarios.tool_turn(make_runner())
    scenarios.approval_from_a_second_runner(make_runner)
    scenarios.planning_with_children(make_runner())
    scenarios.worker_mode(make_runner())
    scenarios.conversation(store)
    _exercise_the_rest(store)

    # Then each script received keys of exactly one slot
    calls = recorded.scripts()
    for sha, keys, _ in calls:
        assert len(slots(keys)) == 1, (sha, keys)
    assert {sha for sha, _, _ in calls} == {s.sha for s in store.scripts.by_name.values()}


def _exercise_the_rest(store: RedisAgentTurnStore) -> None:
    parent = snap(conversation_id="slots")
    save(store, parent, -1)
    now = store.now()
    held = store.claim(parent.id, "w", now, 60_000)
    assert held is not None and held.lease is not None
    kid = child_of(parent)
    waiting_for(held, kid)
    lease = ("w", held.lease.lease_id)
    store.commit(Commit(held, held.version, "slots-1", lease, children=(kid,)))
    assert store.renew_lease(parent.id, "w", held.lease.lease_id, now, now + 90)
    assert store.request_cancellation(kid.id, "stop")
    assert store.release_lease(parent.id, "w", held.lease.lease_id)
    kid.status, kid.cancel_requested = S.CANCELLED, True
    assert save(store, kid, 0).parent_woken
    assert store.report_child(kid.id) is False  # reported by the commit already
    assert store.find_terminal_children_with_waiting_parent(10) == []
    assert store.read_events(parent.id) == []
    store.mark_queued([parent.id, kid.id])
    store.unmark_queued(parent.id)
    store.forget_queued(store.now() + 3600)
    assert store.quarantine(kid.id, "a test") and not store.quarantine(kid.id, "again")
    store.due_turn_ids(now)
    store.stale_turn_ids(now, 0)
    store.wakeups(store.now() + 3600, 0)
    assert store.list_turns(limit=1000)
    assert store.expire_terminal(0) > 0
    store.prune_partitions(0)


def _create_in_threads(url: str, namespace: str, threads: int, ready: Any, out: Any) -> None:
    store = RedisAgentTurnStore(url, namespace=namespace)
    start = threading.Barrier(threads + 1)
    outcomes: list[str] = []

    def create() -> None:
        s = snap(conversation_id="busy")
        start.wait()
        try:
            save(store, s, -1)
            outcomes.append(f"created {s.id}")
        except AgentConversationBusyException:
            outcomes.append("busy")

    workers = [threading.Thread(target=create) for _ in range(threads)]
    for w in workers:
        w.start()
    ready.wait()  # every process is set up
    start.wait()
    for w in workers:
        w.join()
    out.put(outcomes)


def test_the_busy_check_is_atomic_for_50_creators_in_4_processes(
    redis_server: RedisServer, namespace: str
) -> None:
    redis_server.client().flushdb()
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=_create_in_threads, args=(redis_server.url, namespace, n, ready, out))
        for n in (13, 13, 12, 12)
    ]
    for p in procs:
        p.start()
    outcomes = [o for _ in procs for o in out.get(timeout=60)]
    for p in procs:
        p.join(10)
    created = [o.split()[1] for o in outcomes if o.startswith("created")]
    assert len(outcomes) == 50 and len(created) == 1
    store = RedisAgentTurnStore(redis_server.url, namespace=namespace)
    assert store.find_active_turn("busy") == (created[0], S.READY)
    assert [t.turn_id for t in store.list_turns()] == created
    assert redis_server.client().keys(f"{namespace}:turn:*") == [
        f"{namespace}:turn:{created[0]}".encode()
    ]


def _garbage_type(r: redis.Redis, key: str) -> None:
    r.delete(key)
    r.set(key, "garbage")


def _garbage_body(r: redis.Redis, key: str) -> None:
    r.hset(key, "body", "{not json")


def _future_schema(r: redis.Redis, key: str) -> None:
    r.hset(key, "body", '{"schema_version": 99, "id": "x"}')


@pytest.mark.parametrize("spoil", [_garbage_type, _garbage_body, _future_schema])
def test_a_corrupt_record_is_isolated(
    redis_store: RedisAgentTurnStore, spoil: Callable[[redis.Redis, str], None]
) -> None:
    turns = [snap() for _ in range(3)]
    for s in turns:
        save(redis_store, s, -1)
    bad = turns[1]
    spoil(redis_store.redis, redis_store.keys.header(redis_store.tag_of(bad.id), bad.id))

    with pytest.raises(SnapshotCorruptedError) as err:
        RedisAgentTurnStore(redis_store.url, namespace=redis_store.keys.namespace).load(bad.id)
    assert err.value.turn_id == bad.id
    assert redis_store.load(turns[0].id).id == turns[0].id
    claimed = redis_store.claim_runnable("w", redis_store.now(), 10_000, 10)
    assert sorted(s.id for s in claimed) == sorted([turns[0].id, turns[2].id])
    with pytest.raises(SnapshotCorruptedError):
        redis_store.claim(bad.id, "w", redis_store.now(), 10_000)
    assert redis_store.peek(turns[2].id).lease is not None


def replay_every_call(store: RedisAgentTurnStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Send every script call twice, as redis-py does when a reply times out."""
    scripts = store.scripts
    run, pipelined = scripts.run, scripts.pipelined

    def run_twice(*args: Any) -> Any:
        run(*args)
        return run(*args)

    def pipelined_twice(*args: Any, **kwargs: Any) -> Any:
        pipelined(*args, **kwargs)
        return pipelined(*args, **kwargs)

    monkeypatch.setattr(scripts, "run", run_twice)
    monkeypatch.setattr(scripts, "pipelined", pipelined_twice)


def test_replayed_script_calls_are_idempotent(
    redis_store: RedisAgentTurnStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = snap()
    with monkeypatch.context() as patch:
        replay_every_call(redis_store, patch)
        assert save(redis_store, s, -1).version == 0
        s.messages.append(AiMessage("one"))
        assert save(redis_store, s, 0).version == 1
        kid = child_of(s)
        waiting_for(s, kid)
        assert save_tree(redis_store, s, 1, [kid]).version == 2
        assert redis_store.request_cancellation(kid.id)
        held = redis_store.claim(kid.id, "w", redis_store.now(), 10_000)
        assert held is not None and held.lease is not None and held.version == 1
        assert redis_store.renew_lease(
            kid.id, "w", held.lease.lease_id, held.lease.until - 5, held.lease.until + 5
        )
        assert redis_store.release_lease(kid.id, "w", held.lease.lease_id) is True
    stored = redis_store.load(s.id)
    assert stored.version == 2 and len(stored.messages) == 2
    assert redis_store.children_of(s.id) == [kid.id]
    assert redis_store.peek(kid.id).version == 1
    assert redis_store.release_lease(kid.id, "w", held.lease.lease_id) is False
    with pytest.raises(Exception, match="modified concurrently"):
        save(redis_store, s, 1)  # a new request with the old version still conflicts


def test_an_unreachable_redis_names_the_url_without_its_password() -> None:
    url = f"redis://app:s3cret@127.0.0.1:{free_port()}/0"
    with pytest.raises(StoreUnavailableError) as err:
        RedisAgentTurnStore(url)
    assert isinstance(err.value, AgentWorkerError)
    assert "s3cret" not in str(err.value) and "app:***@127.0.0.1" in str(err.value)
    lazy = RedisAgentTurnStore(url, check_connection=False)
    with pytest.raises(StoreUnavailableError, match=r"app:\*\*\*@") as err:
        lazy.load("x")
    assert "s3cret" not in str(err.value)


def test_acl_user_and_password(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:
        server.client().acl_setuser(
            "app", enabled=True, passwords=["+pw-1"], keys=["acl:*"], commands=["+@all"]
        )
        url = f"redis://app:pw-1@127.0.0.1:{server.port}/0"
        scenarios.tool_turn(AgentRunner(turn_store=RedisAgentTurnStore(url, namespace="acl")))
        split = RedisAgentTurnStore(
            f"redis://127.0.0.1:{server.port}/0", username="app", password="pw-1", namespace="acl"
        )
        assert split.list_turns()
        with pytest.raises(StoreUnavailableError) as err:
            RedisAgentTurnStore(f"redis://app:wrong-pw@127.0.0.1:{server.port}/0")
        assert "wrong-pw" not in str(err.value)
    finally:
        server.stop()


def test_another_namespace_does_not_see_the_turn(
    redis_store: RedisAgentTurnStore, redis_server: RedisServer
) -> None:
    s = snap()
    save(redis_store, s, -1)
    other = RedisAgentTurnStore(redis_server.url, namespace="elsewhere")
    with pytest.raises(TurnNotFoundError):
        other.load(s.id)
    with pytest.raises(TurnNotFoundError):
        save(other, s, 0)


def test_scripts_are_reloaded_after_a_script_flush(redis_store: RedisAgentTurnStore) -> None:
    s = snap()
    save(redis_store, s, -1)
    redis_store.redis.script_flush()
    assert redis_store.peek(s.id).version == 0
    redis_store.redis.script_flush()
    save(redis_store, snap(), -1)  # the pipelined create path
    redis_store.redis.script_flush()
    assert len(redis_store.claim_runnable("w", redis_store.now(), 1000, 10)) == 2


def test_a_script_call_that_ran_before_a_noscript_keeps_its_one_run(
    redis_server: RedisServer, namespace: str
) -> None:
    # Given an empty script cache with one script loaded again (another client loading
    # it while this pipeline was on its way, in a housekeeping race)
    s = RedisAgentTurnStore(redis_server.url, namespace=namespace)
    key, due = f"{namespace}:probe", f"{namespace}:probe-due"
    s.redis.zadd(key, {"tag": 5.0})
    s.redis.zadd(due, {"tag": 7.0})
    s.redis.script_flush()
    s.redis.script_load(s.scripts["zrem_if"].script)
    # When one pipeline runs the loaded script and one the server no longer knows
    ran, turned_away = s.scripts["zrem_if"], s.scripts["zcas"]
    calls = [(ran, [key], ["tag", "5.0"]), (turned_away, [due], ["tag", "7", "9"])]
    replies = s.scripts.pipelined(calls)
    # Then the call that ran is not run again: its reply is its one run's (1 removed, not 0)
    assert [int(r) for r in replies] == [1, 1]
    assert s.redis.zscore(due, "tag") == 9.0
    s.close()


def test_a_save_sends_only_the_new_messages(redis_server: RedisServer, namespace: str) -> None:
    redis_server.client().flushdb()
    store, recorded = recording_store(redis_server.url, namespace)
    history = [UserMessage(f"old {i} " + "x" * 100) for i in range(100)]
    s = snap(messages=history)
    save(store, s, -1)
    s.messages.append(AiMessage("new"))
    recorded.clear()
    save(store, s, 0)
    _, _, args = recorded.scripts()[-1]  # the first call may meet NOSCRIPT on a fresh server
    documents = [a for a in args if isinstance(a, bytes) and a.startswith(b'{"id"')]
    assert len(documents) == 1 and b'"new"' in documents[0]
    assert sum(len(a) if isinstance(a, bytes) else len(str(a)) for a in args) < 2_000
    assert store.redis.llen(store.keys.messages(store.tag_of(s.id), s.id)) == 101


def test_the_process_cache_keeps_messages_of_the_latest_turns_only() -> None:
    from stores.redis.cache import Known, TurnCache

    cache = TurnCache(size=3, with_messages=1)
    hello = (UserMessage("hi"),)
    cache.put("a", Known("t", 1, hello[0].id, hello))
    cache.put("b", Known("t", 1, hello[0].id, hello))
    a, b = cache.get("a"), cache.get("b")
    assert a is not None and a.messages is None and a.tag == "t"  # still knows the tag
    assert b is not None and b.messages == hello
    for turn_id in "cde":
        cache.put(turn_id, Known("t"))
    assert cache.get("a") is None and cache.get("e") is not None


def test_a_refused_tree_save_leaves_no_index_entries(redis_store: RedisAgentTurnStore) -> None:
    parent = snap()
    save(redis_store, parent, -1)
    kid = child_of(parent)
    waiting_for(parent, kid)
    with pytest.raises(Exception, match="modified concurrently"):
        save_tree(redis_store, parent, 7, [kid])
    assert redis_store.redis.exists(redis_store.keys.turn_index(kid.id)) == 0
    save_tree(redis_store, parent, 0, [kid])
    assert redis_store.redis.exists(redis_store.keys.turn_index(kid.id)) == 1


def test_a_busy_create_right_after_a_script_flush_leaves_no_index_entry(
    redis_store: RedisAgentTurnStore,
) -> None:
    save(redis_store, snap(conversation_id="c"), -1)
    redis_store.redis.script_flush()  # the create below meets NOSCRIPT, then is busy
    late = snap(conversation_id="c")
    with pytest.raises(AgentConversationBusyException):
        save(redis_store, late, -1)
    assert redis_store.redis.exists(redis_store.keys.turn_index(late.id)) == 0


def test_now_follows_the_server_clock_without_a_round_trip_per_reading(
    redis_store: RedisAgentTurnStore,
) -> None:
    first = redis_store.now()
    calls: list[object] = []
    real_time = redis_store.redis.time
    redis_store.redis.time = lambda: calls.append(1) or real_time()  # type: ignore[method-assign]
    try:
        readings = [redis_store.now() for _ in range(100)]
    finally:
        redis_store.redis.time = real_time  # type: ignore[method-assign]
    assert calls == []  # counted locally between syncs
    assert readings == sorted(readings) and readings[0] >= first
    seconds, micros = real_time()
    server = int(seconds) + int(micros) / 1_000_000
    assert abs(redis_store.now() - server) < 0.01


def test_with_events_off_commits_number_events_but_stream_none(
    redis_server: RedisServer, namespace: str
) -> None:
    store = RedisAgentTurnStore(redis_server.url, namespace=namespace, events=False)
    seen: list[Any] = []
    runner = AgentRunner(turn_store=store)
    runner.add_event_listener(seen.append)
    turn = runner.run(Agent("quiet", FunctionModel(lambda r: AiMessage("hi"))), "go")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert store.read_events(turn.id) == []
    assert store.redis.exists(store.keys.events(store.tag_of(turn.id), turn.id)) == 0
    committed = [e.sequence for e in seen if not e.provisional]
    assert committed == list(range(1, len(committed) + 1))
    store.close()
