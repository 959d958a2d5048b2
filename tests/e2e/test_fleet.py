"""Real Celery workers stepping turns from a real Redis: the distributed path end to end."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from agentworker.settings import Settings
from agentworker.wiring import create_app
from runner_core import (
    Agent,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AiMessage,
    FunctionModel,
    ToolMessage,
)
from tests.support.fleet_agents import executions
from tests.support.fleet_fixtures import RETRYING, drive, producer
from tests.support.servers import Fleet, RedisServer, free_port

pytestmark = pytest.mark.e2e


def tool_results(s: AgentTurnSnapshot) -> list[str]:
    return [m.content for m in s.messages if isinstance(m, ToolMessage)]


def test_fifty_turns_with_tools_approvals_forms_retries_and_children(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    # Given two workers and beat
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()
    kinds = ["e2e-tools"] * 15 + ["e2e-approval"] * 10 + ["e2e-form"] * 8 + ["e2e-flaky"] * 7
    kinds += ["e2e-parent"] * 10
    # When 50 turns are started and the humans answer through submit_resume
    ids = {
        runner.start(kind, f"job {i}", options=RETRYING).id: kind for i, kind in enumerate(kinds)
    }
    final = drive(runner, list(ids))
    # Then every turn completed with the expected history
    statuses = Counter(s.status for s in final.values())
    assert statuses == {AgentTurnStatus.COMPLETED: 50}, statuses
    for turn_id, kind in ids.items():
        s = final[turn_id]
        if kind == "e2e-tools":
            assert s.final_output == "done: recorded a | recorded b"
        elif kind == "e2e-approval":
            assert s.final_output == "done: paid 5.0"
            assert s.resume_log[0]["metadata"] == {"approver": "e2e"}
        elif kind == "e2e-form":
            assert s.final_output == 'done: shipping to {"city": "Oslo"}'
        elif kind == "e2e-flaky":
            assert s.final_output == "worked after 2 failures" and s.retry_count == 2
        else:
            assert s.final_output == "parts: COMPLETED, COMPLETED, COMPLETED"
            assert len(runner.store.children_of(turn_id)) == 3
    # And no side effect ran twice for one idempotency key
    runs = executions(redis_server.client())
    assert len(runs) == 15 * 2 + 10 + 8 + 10 * 3
    assert set(runs.values()) == {1}


def test_worker_killed_mid_step_is_finished_by_another(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    # Given one worker running a slow tool
    fleet.start_worker("victim")
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()
    turn = runner.start("e2e-slow", "go")
    client = redis_server.client()
    deadline = time.monotonic() + 20
    while not client.get(f"e2e:slow-started:{turn.id}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.get(f"e2e:slow-started:{turn.id}"), "the slow tool never started"
    # When that worker is killed with SIGKILL in the middle of the step
    fleet.kill_worker("victim")
    fleet.start_worker("rescuer")
    # Then the other worker finishes the turn once the lease has expired
    final = drive(runner, [turn.id], timeout=60)[turn.id]
    assert final.status is AgentTurnStatus.COMPLETED
    assert tool_results(final) == ["recorded s", "recorded after"]
    runs = executions(client)
    assert sorted(runs.values()) == [1, 1], runs  # the killed call never recorded


def test_duplicated_wakeups_execute_each_step_once(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    fleet.start_worker("w1")
    fleet.start_worker("w2")
    fleet.wait_ready()
    runner = producer()
    turn = runner.start("e2e-tools", "go")
    for _ in range(6):  # the same wake-up, many times, to both workers
        runner.dispatch(turn.id)
    final = drive(runner, [turn.id], timeout=30)[turn.id]
    assert final.status is AgentTurnStatus.COMPLETED
    assert final.iteration_count == 3 and final.step_count == 5
    assert tool_results(final) == ["recorded a", "recorded b"]
    assert set(executions(redis_server.client()).values()) == {1}


def test_beat_restart_loses_nothing(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    fleet.start_worker("w1")
    fleet.start_beat()
    fleet.wait_ready()
    runner = producer()
    ids = [runner.start("e2e-flaky", f"job {i}", options=RETRYING).id for i in range(5)]
    time.sleep(0.5)
    fleet.stop_beat()  # retries are due while no beat runs
    time.sleep(1.0)
    fleet.start_beat()
    final = drive(runner, ids, timeout=60)
    assert {s.status for s in final.values()} == {AgentTurnStatus.COMPLETED}
    assert {s.retry_count for s in final.values()} == {2}


def test_unknown_turn_and_pickle_are_refused(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    fleet.start_worker("w1")
    fleet.wait_ready()
    app = create_app(Settings())
    app.send_task("agentworker.step_turn", args=["no-such-turn"], queue="agentworker.steps")
    with app.connection_for_write() as conn:
        producer_ = app.amqp.Producer(conn)
        producer_.publish(
            {"not": "json-only"},
            routing_key="agentworker.steps",
            serializer="pickle",
            headers={"task": "agentworker.step_turn", "id": "pickled-1", "argsrepr": "()"},
        )
    # A good turn after both still runs: the worker did not get stuck on them.
    runner = producer()
    turn = runner.start("e2e-tools", "after the bad messages")
    assert drive(runner, [turn.id], timeout=30)[turn.id].status is AgentTurnStatus.COMPLETED
    log = (fleet.logs / "w1.log").read_text()
    assert "unknown turn 'no-such-turn'" in log
    assert "ContentDisallowed" in log or "pickle" in log


def test_a_broken_broker_at_start_is_repaired_by_the_sweeper(
    fleet: Fleet,
    producer_env: dict[str, str],
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a producer whose broker is unreachable (the store is fine)
    monkeypatch.setenv("AGENTWORKER_BROKER_URL", f"redis://127.0.0.1:{free_port()}/1")
    broken = producer()
    # When it starts a turn: the turn is saved READY, the lost wake-up only logged
    turn = broken.start("e2e-tools", "sent while the broker was down")
    assert broken.store.peek(turn.id).status is AgentTurnStatus.READY
    # Then workers and beat on the real broker find and finish it
    fleet.start_worker("w1")
    fleet.start_beat()
    fleet.wait_ready()
    final = drive(broken, [turn.id], timeout=30)[turn.id]
    assert final.status is AgentTurnStatus.COMPLETED


def test_an_agent_the_workers_cannot_load_fails_the_turn_once(
    fleet: Fleet, producer_env: dict[str, str], redis_server: RedisServer
) -> None:
    # (after a grace of 1 s in which it waits for a worker that has the agent)
    fleet.env["AGENTWORKER_UNLOADABLE_GRACE_SECONDS"] = "1"
    fleet.start_worker("w1")
    fleet.start_beat()  # it sends the turn again once the worker has left it
    fleet.wait_ready()
    runner = producer()
    # the producer knows an agent the workers' loader does not
    stranger = Agent("only-in-the-producer", FunctionModel(lambda r: AiMessage("hi")))
    runner.loader.register(stranger)  # type: ignore[attr-defined]
    turn = runner.start(stranger, "who runs me?")
    final = drive(runner, [turn.id], timeout=30)[turn.id]
    assert final.status is AgentTurnStatus.FAILED
    assert "only-in-the-producer" in (final.terminal_reason or "")
    time.sleep(1.0)  # no poison message: nothing keeps stepping it
    assert runner.store.peek(turn.id).version == final.version
    log = (fleet.logs / "w1.log").read_text()
    assert log.count("agentworker.step_turn") < 10
