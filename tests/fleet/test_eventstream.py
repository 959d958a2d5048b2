"""The Redis event bridge and its reader: every event, in order, resumable, bounded, expiring."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from types import MappingProxyType
from typing import Any

import pytest
import redis

from agentworker.notify.streams import (
    RedisEventBridge,
    bridge_client,
    end_id,
    follow,
    read_events,
    stream_key,
)
from runner_core import (
    Agent,
    AgentEvent,
    AgentEventType,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    InMemoryAgentTurnStore,
    ModelRequest,
    ToolCall,
    ToolMessage,
    Usage,
    tool,
)
from tests.support.agents import approval_agent
from tests.support.servers import RedisServer, free_port

pytestmark = pytest.mark.redis


@pytest.fixture
def client(server: RedisServer) -> redis.Redis:
    return server.client()


@pytest.fixture
def ns() -> str:
    return "ev-" + uuid.uuid4().hex[:8]


def bridged_runner(client: redis.Redis, ns: str, **kwargs: Any) -> AgentRunner:
    """The embedded store with a bridge that streams committed events too."""
    runner = AgentRunner()
    runner.add_event_listener(RedisEventBridge(client, ns, committed=True, **kwargs))
    return runner


def one_call_then_done(name: str) -> FunctionModel:
    """A model that calls the tool ``name`` once, then answers "done"."""

    def answer(request: ModelRequest) -> AiMessage:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return AiMessage("done")
        return AiMessage(tool_calls=[ToolCall(id="c1", name=name, arguments={})])

    return FunctionModel(answer)


#: The stream of a turn of ``approval_agent`` run into its approval.
APPROVAL_STREAM = [
    ("SNAPSHOT_SAVED", False),
    ("TURN_STARTED", True),
    ("STEP_STARTED", True),
    ("MODEL_STARTED", True),
    ("MODEL_COMPLETED", False),
    ("SNAPSHOT_SAVED", False),
    ("STEP_COMPLETED", False),
    ("STEP_STARTED", True),  # streamed before the commit that follows it
    ("SNAPSHOT_SAVED", False),
    ("STEP_COMPLETED", False),
    ("TOOL_APPROVAL_REQUESTED", False),
    ("TURN_SUSPENDED", False),
]


def event(type: AgentEventType, turn_id: str, root: str, **data: Any) -> AgentEvent:
    return AgentEvent(
        event_id=uuid.uuid4().hex,
        type=type,
        turn_id=turn_id,
        root_turn_id=root,
        parent_turn_id=None if turn_id == root else root,
        agent_id="a",
        agent_version="1",
        sequence=1,
        occurred_at=time.time(),
        data=MappingProxyType({"status": "RUNNING", **data}),
    )


def test_every_event_of_a_turn_is_streamed_in_order_with_all_fields(
    client: redis.Redis, ns: str
) -> None:
    runner = bridged_runner(client, ns)
    seen: list[AgentEvent] = []
    runner.add_event_listener(seen.append)

    turn = runner.run(approval_agent(), "pay 5")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))

    streamed = [e for _, e in read_events(client, ns, turn.id, count=1000)]
    assert [e["event_id"] for e in streamed] == [e.event_id for e in seen]
    first, last = streamed[0], streamed[-1]
    assert set(first) == {
        "event_id",
        "type",
        "turn_id",
        "root_turn_id",
        "parent_turn_id",
        "agent_id",
        "agent_version",
        "sequence",
        "occurred_at",
        "data",
        "provisional",
        "attempt",
    }
    assert first["type"] == "SNAPSHOT_SAVED" and first["data"]["status"] == "READY"
    assert last["type"] == "TURN_COMPLETED" and last["data"]["final_output"] == "done: paid 5.0"
    assert [e["sequence"] for e in streamed] == [e.sequence for e in seen]
    approval = next(e for e in streamed if e["type"] == "TOOL_APPROVAL_REQUESTED")
    assert approval["data"]["correlation_id"] == "c1"


def test_reading_resumes_strictly_after_an_id_without_gaps_or_duplicates(
    client: redis.Redis, ns: str
) -> None:
    runner = bridged_runner(client, ns)
    turn = runner.run(approval_agent(), "pay")
    runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
    full = read_events(client, ns, turn.id, count=1000)
    assert len(full) > 10

    pages: list[tuple[str, dict[str, Any]]] = []
    after = "0-0"
    while page := read_events(client, ns, turn.id, after=after, count=3):
        pages.extend(page)
        after = page[-1][0]

    assert pages == full
    assert read_events(client, ns, turn.id, after=full[-1][0]) == []


def test_the_stream_expires_only_after_the_roots_terminal_event(
    client: redis.Redis, ns: str
) -> None:
    bridge = RedisEventBridge(client, ns, ttl_after_end=120, committed=True)
    key = stream_key(ns, "root", "root")
    bridge(event(AgentEventType.TURN_STARTED, "root", "root"))
    bridge(event(AgentEventType.TURN_COMPLETED, "child", "root"))  # a child's end
    bridge.flush()
    assert client.ttl(key) == -1 and end_id(client, ns, "root") is None

    bridge(event(AgentEventType.BUDGET_EXCEEDED, "root", "root"))
    bridge.flush()

    assert 0 < client.ttl(key) <= 120
    last_id = read_events(client, ns, "root")[-1][0]
    assert end_id(client, ns, "root") == last_id


def test_the_stream_is_trimmed_to_about_maxlen(client: redis.Redis, ns: str) -> None:
    bridge = RedisEventBridge(client, ns, maxlen=50, committed=True)
    for _ in range(1000):
        bridge(event(AgentEventType.TOOL_PROGRESS, "t", "t"))
    bridge.flush()
    assert client.xlen(stream_key(ns, "t", "t")) < 200


def test_values_that_are_not_json_are_converted(client: redis.Redis, ns: str) -> None:
    bridge = RedisEventBridge(client, ns, committed=True)
    bridge(
        event(
            AgentEventType.MODEL_COMPLETED,
            "t",
            "t",
            usage=Usage(input_tokens=3),
            status_enum=AgentTurnStatus.RUNNING,
            tags={"x"},
        )
    )
    bridge.flush()
    data = read_events(client, ns, "t")[0][1]["data"]
    assert data["usage"] == {
        "input_tokens": 3, "output_tokens": 0, "cached_input_tokens": 0, "reasoning_tokens": 0
    }  # fmt: skip
    assert data["status_enum"] == "RUNNING" and data["tags"] == ["x"]


def test_a_dead_redis_never_breaks_the_runner(caplog: pytest.LogCaptureFixture) -> None:
    dead = bridge_client(f"redis://127.0.0.1:{free_port()}/0", timeout=0.2)
    runner = bridged_runner(dead, "dead")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agentworker.events"):
        turn = runner.run(approval_agent(), "pay")
        turn = runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
    assert turn.status is AgentTurnStatus.COMPLETED
    assert time.monotonic() - started < 2  # one failure pauses the bridge, no wait per event
    warnings = [r for r in caplog.records if "not streamed" in r.message]
    assert len(warnings) == 1


def test_follow_yields_live_events_until_the_root_ends(client: redis.Redis, ns: str) -> None:
    runner = bridged_runner(client, ns)
    turn = runner.run(approval_agent(), "pay")
    before = read_events(client, ns, turn.id, count=1000)

    def approve_later() -> None:
        time.sleep(0.2)
        runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))

    worker = threading.Thread(target=approve_later)
    worker.start()
    followed = list(follow(client, ns, turn.id, after=before[-1][0], timeout=10, block_ms=100))
    worker.join()

    assert followed[-1][1]["type"] == "TURN_COMPLETED"
    assert before + followed == read_events(client, ns, turn.id, count=1000)
    # a reader that already has the terminal event is done at once
    started = time.monotonic()
    assert list(follow(client, ns, turn.id, after=followed[-1][0], timeout=5)) == []
    assert time.monotonic() - started < 1


def test_follow_stops_at_its_timeout_while_the_turn_waits(client: redis.Redis, ns: str) -> None:
    runner = bridged_runner(client, ns)
    turn = runner.run(approval_agent(), "pay")
    started = time.monotonic()
    events = list(follow(client, ns, turn.id, timeout=0.3, block_ms=100))
    assert 0.25 < time.monotonic() - started < 2
    assert events[-1][1]["type"] == "TURN_SUSPENDED"


def test_a_bad_stream_id_is_refused(client: redis.Redis, ns: str) -> None:
    with pytest.raises(ValueError, match="stream id"):
        read_events(client, ns, "t", after="latest")


def test_make_runner_installs_the_bridge_only_when_events_are_enabled(
    server: RedisServer, ns: str
) -> None:
    from agentworker.settings import Settings
    from agentworker.wiring import create_app, make_runner

    def bridges(enabled: bool) -> int:
        settings = Settings(redis_url=server.url, namespace=ns, events_enabled=enabled)
        runner = make_runner(settings, create_app(settings), require_agents=False)
        return sum(isinstance(x, RedisEventBridge) for x in runner.events._listeners)

    assert bridges(True) == 1
    assert bridges(False) == 0


def test_the_events_setting_reads_agentworker_events(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentworker.settings import Settings

    monkeypatch.setenv("AGENTWORKER_EVENTS", "false")
    assert Settings().events_enabled is False
    monkeypatch.setenv("AGENTWORKER_EVENTS", "1")
    assert Settings().events_enabled is True


def test_streams_live_in_the_tree_hash_slot() -> None:
    assert stream_key("ns", "c:chat-1", "abc") == "ns:{c:chat-1}:ev:abc"


class _FailsOnce:
    """A client whose first write fails like a Redis that went away for a moment."""

    def __init__(self, real: redis.Redis) -> None:
        self.real = real
        self.failed = False

    def get(self, *args: Any) -> Any:
        return self.real.get(*args)

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        pipe = self.real.pipeline(*args, **kwargs)
        if not self.failed:
            self.failed = True

            def gone(*_: Any, **__: Any) -> Any:
                raise redis.ConnectionError("gone")

            pipe.execute = gone
        return pipe


def test_after_an_error_the_bridge_pauses_then_streams_again(
    client: redis.Redis, ns: str, caplog: pytest.LogCaptureFixture
) -> None:
    bridge = RedisEventBridge(_FailsOnce(client), ns, committed=True)  # type: ignore[arg-type]
    bridge.pause_after_error = 0.1
    with caplog.at_level(logging.WARNING, logger="agentworker.events"):
        bridge(event(AgentEventType.TURN_STARTED, "t", "t"))
        bridge.flush()  # fails
        bridge(event(AgentEventType.STEP_STARTED, "t", "t"))  # dropped while paused
        time.sleep(0.15)
        bridge(event(AgentEventType.STEP_COMPLETED, "t", "t"))
        bridge.flush()

    assert [e["type"] for _, e in read_events(client, ns, "t")] == ["STEP_COMPLETED"]
    assert "after 2 were dropped" in caplog.records[-1].message


def test_events_are_buffered_until_the_runner_flushes_or_they_wait_too_long(
    client: redis.Redis, ns: str
) -> None:
    bridge = RedisEventBridge(client, ns, committed=True)
    bridge.max_delay = 0.05
    bridge(event(AgentEventType.MODEL_TEXT_DELTA, "t", "t"))
    bridge(event(AgentEventType.MODEL_TEXT_DELTA, "t", "t"))
    assert read_events(client, ns, "t") == []  # one round trip later, not one per event
    time.sleep(0.06)
    bridge(event(AgentEventType.MODEL_TEXT_DELTA, "t", "t"))  # the oldest waited too long
    assert len(read_events(client, ns, "t")) == 3


def test_a_runner_step_writes_its_events_in_one_round_trip(
    client: redis.Redis, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = bridged_runner(client, ns)
    turn = runner.start(approval_agent(), "pay")
    executed: list[int] = []
    real = redis.client.Pipeline.execute

    def counting(self: redis.client.Pipeline, *args: Any, **kwargs: Any) -> Any:
        executed.append(len(self.command_stack))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counting)
    runner.step(turn)
    monkeypatch.undo()

    types = [e["type"] for _, e in read_events(client, ns, turn.id)]
    assert types[-1] == "STEP_COMPLETED" and "MODEL_COMPLETED" in types
    # the step's start and the live MODEL_STARTED at once (one round trip, flushed by the
    # call's start), then the step's committed events in one round trip
    assert types[:4] == ["SNAPSHOT_SAVED", "TURN_STARTED", "STEP_STARTED", "MODEL_STARTED"]
    assert executed == [3, len(types) - 4]


def test_a_tools_start_reaches_the_stream_while_the_tool_runs(
    server: RedisServer, client: redis.Redis, ns: str
) -> None:
    from stores import RedisAgentTurnStore

    # Given the production wiring: the Redis store writes committed events in its commits,
    # the bridge streams the provisional ones
    store = RedisAgentTurnStore(server.url, namespace=ns)
    runner = AgentRunner(turn_store=store)
    runner.add_event_listener(RedisEventBridge(client, ns))
    seen_during: list[tuple[str, bool]] = []

    @tool
    def slow() -> str:
        """Takes a while."""
        from runner_core import AgentToolContext

        root = AgentToolContext.current().turn_id
        seen_during.extend((e["type"], e["provisional"]) for _, e in read_events(client, ns, root))
        return "ok"

    turn = runner.run(Agent("slow-agent", one_call_then_done("slow"), tools=[slow]), "go")

    # Then while the tool ran, its start (provisional) was already there, its end not yet
    assert turn.status is AgentTurnStatus.COMPLETED
    assert ("TOOL_STARTED", True) in seen_during
    assert not any(t == "TOOL_COMPLETED" for t, _ in seen_during)
    # and every committed event is in the stream once, numbered 1..n
    full = [e for _, e in read_events(client, ns, turn.id, count=1000)]
    numbers = [e["sequence"] for e in full if not e["provisional"]]
    assert numbers == list(range(1, len(numbers) + 1))
    assert [e["type"] for e in full if not e["provisional"]][-1] == "TURN_COMPLETED"
    store.close()


def test_the_stream_has_each_step_start_before_the_step(
    server: RedisServer, client: redis.Redis, ns: str
) -> None:
    from stores import RedisAgentTurnStore

    # Given the production wiring, and a tools step with nothing to start at once (the call
    # waits for approval), so the step's start is still buffered when its commit is made
    store = RedisAgentTurnStore(server.url, namespace=ns)
    runner = AgentRunner(turn_store=store)
    runner.add_event_listener(RedisEventBridge(client, ns))

    turn = runner.run(approval_agent(), "pay 5")

    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    full = [(e["type"], e["provisional"]) for _, e in read_events(client, ns, turn.id)]
    assert full == APPROVAL_STREAM
    store.close()


def riding_runner(server: RedisServer, client: redis.Redis, ns: str) -> tuple[AgentRunner, Any]:
    """The production wiring: provisional events ride in the commits of the Redis store."""
    from stores import RedisAgentTurnStore

    store = RedisAgentTurnStore(server.url, namespace=ns)
    bridge = RedisEventBridge(client, ns)
    assert bridge.streams.ride_with(store)
    runner = AgentRunner(turn_store=store)
    runner.add_event_listener(bridge)
    return runner, store


def test_riding_events_land_before_their_commit_in_the_commits_round_trip(
    server: RedisServer, client: redis.Redis, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stores.redis.wire import Wire

    # Given the production wiring and a turn that was started
    runner, store = riding_runner(server, client, ns)
    turn = runner.start(approval_agent(), "pay 5")
    exchanges: list[list[str]] = []
    pipelines: list[int] = []
    real_exchange, real_execute = Wire.exchange, redis.client.Pipeline.execute

    def exchange(self: Wire, commands: Any) -> Any:
        exchanges.append([str(c[0]) for c in commands])
        return real_exchange(self, commands)

    def execute(self: redis.client.Pipeline, *args: Any, **kwargs: Any) -> Any:
        pipelines.append(len(self.command_stack))
        return real_execute(self, *args, **kwargs)

    # When it takes its model step
    monkeypatch.setattr(Wire, "exchange", exchange)
    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    runner.step(turn)
    monkeypatch.undo()

    # Then the commit's round trip carried the turn's, the step's and the call's start,
    # ahead of its script (a direct runner also reads the turn's control before the call)
    assert pipelines == []
    assert [c[:4] for c in exchanges if "XADD" in c] == [["XADD", "XADD", "XADD", "EVALSHA"]]
    assert sum(c.count("XADD") for c in exchanges) == 3
    # And the rest of the turn streams in the same order as when the bridge sent at once
    runner.run_until_blocked(turn)
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    full = [(e["type"], e["provisional"]) for _, e in read_events(client, ns, turn.id)]
    assert full == APPROVAL_STREAM
    store.close()


def test_riding_entries_of_a_failed_commit_go_with_the_next_one(
    server: RedisServer, client: redis.Redis, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner_core import StoreUnavailableError
    from stores.redis.wire import Wire

    # Given the production wiring, and a store whose first exchange of the step fails
    # before the server sees it (the kernel tries the commit again)
    runner, store = riding_runner(server, client, ns)
    turn = runner.start(approval_agent(), "pay 5")
    real_exchange = Wire.exchange
    failed: list[int] = []

    def exchange(self: Wire, commands: Any) -> Any:
        if not failed and any(str(c[0]) == "XADD" for c in commands):
            failed.append(len(commands))
            raise redis.ConnectionError("the connection dropped before the write")
        return real_exchange(self, commands)

    monkeypatch.setattr(Wire, "exchange", exchange)
    try:
        runner.step(turn)
    except StoreUnavailableError:
        runner.step(turn)
    monkeypatch.undo()

    # Then the entries that rode in the failed write were written by a later one, once
    # each and before the commit's own events: nothing of the stream is lost
    assert failed and failed[0] > 1
    runner.run_until_blocked(turn)
    full = [(e["type"], e["provisional"]) for _, e in read_events(client, ns, turn.id)]
    assert full == APPROVAL_STREAM
    store.close()


def test_a_riding_tool_start_is_streamed_while_the_tool_runs(
    server: RedisServer, client: redis.Redis, ns: str
) -> None:
    # Given the production wiring and a tool that waits until its start is in the stream
    runner, store = riding_runner(server, client, ns)
    waited: list[float] = []

    @tool
    def patient() -> str:
        """Waits to see its own start."""
        from runner_core import AgentToolContext

        root = AgentToolContext.current().turn_id
        started = time.monotonic()
        while time.monotonic() - started < 5:
            if any(e["type"] == "TOOL_STARTED" for _, e in read_events(client, ns, root)):
                waited.append(time.monotonic() - started)
                return "seen"
            time.sleep(0.005)
        return "never seen"

    # When it runs: no commit follows the start while the tool waits
    turn = runner.run(Agent("patient-agent", one_call_then_done("patient"), tools=[patient]), "go")

    # Then the start went on its own, soon (the riders' delay, not the tool's end)
    assert turn.status is AgentTurnStatus.COMPLETED
    assert turn.messages[-2].content == "seen"  # type: ignore[union-attr]
    assert waited[0] < 1.0, waited
    full = [e for _, e in read_events(client, ns, turn.id, count=1000)]
    types = [e["type"] for e in full]
    assert types.index("TOOL_STARTED") < types.index("TOOL_COMPLETED")
    assert types.count("TOOL_STARTED") == 1
    store.close()


def test_entries_ride_only_with_a_store_on_the_same_server(
    server: RedisServer, client: redis.Redis, ns: str, tmp_path: Any
) -> None:
    from stores import RedisAgentTurnStore

    other = RedisServer(tmp_path / "other", appendonly=False).start()
    try:
        elsewhere = RedisAgentTurnStore(other.url, namespace=ns)
        single = RedisAgentTurnStore(
            redis.Redis(port=server.port, single_connection_client=True), namespace=ns
        )
        assert not RedisEventBridge(client, ns).streams.ride_with(elsewhere)
        assert not RedisEventBridge(client, ns).streams.ride_with(single)
        assert not RedisEventBridge(client, ns).streams.ride_with(InMemoryAgentTurnStore())
        bridge = RedisEventBridge(client, ns)
        assert bridge.streams.riders is None  # sent at once, as before
        elsewhere.close()
    finally:
        other.stop()


def test_make_runner_has_provisional_events_ride_in_the_commits(
    server: RedisServer, ns: str
) -> None:
    from agentworker.settings import Settings
    from agentworker.wiring import create_app, make_runner

    settings = Settings(redis_url=server.url, namespace=ns)
    runner = make_runner(settings, create_app(settings), require_agents=False)
    [bridge] = [x for x in runner.events._listeners if isinstance(x, RedisEventBridge)]
    assert bridge.streams.riders is not None
    assert runner.store.writer.riders is bridge.streams.riders  # type: ignore[attr-defined]
