"""A real fleet on RabbitMQ: prefork workers, the store on a private redis-server.

The broker: the one at ``AGENTWORKER_TEST_AMQP_URL`` (default: guest on 127.0.0.1:5672),
else a private node started for the session when rabbitmq-server is installed, else the
tests skip, saying so. On the local node each test gets a vhost of its own
(``rabbitmqctl``); elsewhere, queues named for the test; both are removed afterwards.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentworker.fleet.queues import celery_version
from runner_core import (
    AgentResumeCommand,
    AgentRunner,
    AgentTurnSnapshot,
    AgentTurnStatus,
    ToolMessage,
)
from tests.support.fleet_agents import PREFIX, executions
from tests.support.fleet_fixtures import RETRYING, producer
from tests.support.servers import Fleet, RedisServer

pytestmark = pytest.mark.e2e

WAITING = {AgentTurnStatus.WAITING_FOR_APPROVAL, AgentTurnStatus.WAITING_FOR_USER}


def _drive(runner: AgentRunner, turn_ids: list[str], timeout: float) -> dict[str, Any]:
    """Like ``test_fleet.drive``, with a light status read first.

    150 full loads every 0.1 s would take the workers' CPU on a small machine.
    """
    deadline = time.monotonic() + timeout
    final: dict[str, Any] = {}
    while len(final) < len(turn_ids) and time.monotonic() < deadline:
        for turn_id in turn_ids:
            if turn_id in final:
                continue
            status = runner.store.peek(turn_id).status
            if status.is_terminal:
                final[turn_id] = runner.store.load(turn_id)
            elif status in WAITING:
                _answer(runner, runner.store.load(turn_id))
        time.sleep(0.1)
    missing = [t for t in turn_ids if t not in final]
    assert not missing, f"{len(missing)} turns not finished after {timeout}s"
    return final


def _answer(runner: AgentRunner, s: AgentTurnSnapshot) -> None:
    """Play the human: approve, or fill the form."""
    if s.suspension is None:
        return
    if s.status is AgentTurnStatus.WAITING_FOR_APPROVAL:
        command = AgentResumeCommand.approve_tool(s.suspension.correlation_id or "")
        runner.submit_resume(s.id, command.with_metadata(approver="e2e"))
    else:
        runner.submit_resume(s.id, AgentResumeCommand.user_input({"city": "Oslo"}))


def _owner(fleet: Fleet, child_pid: int) -> str:
    """The fleet worker whose process (a prefork parent) runs ``child_pid``."""
    stat = Path(f"/proc/{child_pid}/stat").read_text()
    parent = int(stat.rsplit(")", 1)[1].split()[1])
    for name, proc in fleet.workers.items():
        if child_pid == proc.pid or parent == proc.pid:
            return name
    raise AssertionError(f"no fleet worker runs pid {child_pid}")


def _hub_wakes_from_threads() -> bool:
    """Whether kombu's event loop wakes when another thread queues a callback (an ack).

    kombu 5.4's does not: a threads-pool worker then waits for the loop's poll timeout
    after every task, as the solo pool does (deploy/README.md, "Worker pools").
    """
    from kombu.asynchronous.hub import Hub

    return hasattr(Hub, "_create_waker")


THREADS = pytest.param(
    "threads",
    4,
    id="threads",
    marks=pytest.mark.skipif(
        not _hub_wakes_from_threads(),
        reason="this kombu's event loop does not wake for a thread's ack: threads stall on AMQP",
    ),
)


@pytest.mark.parametrize(("pool", "threads"), [pytest.param(None, 1, id="prefork"), THREADS])
def test_150_turns_with_a_worker_killed_mid_step_lose_and_double_nothing(
    rabbit_fleet: Fleet,
    rabbit_env: dict[str, str],
    redis_server: RedisServer,
    pool: str | None,
    threads: int,
) -> None:
    # Given two workers and beat on RabbitMQ: prefork (the launcher's pool for amqp://),
    # or 4 threads each (what deploy/CAPACITY.md suggests for steps that wait on models)
    rabbit_fleet.start_worker("w1", threads, pool=pool)
    rabbit_fleet.start_worker("w2", threads, pool=pool)
    rabbit_fleet.start_beat()
    rabbit_fleet.wait_ready()
    expected = "(thread)" if pool == "threads" else "(prefork)"
    assert expected in (rabbit_fleet.logs / "w1.log").read_text()
    runner = producer()
    kinds = ["e2e-charges"] * 40 + ["e2e-tools"] * 40 + ["e2e-parent"] * 12
    kinds += ["e2e-approval"] * 20 + ["e2e-form"] * 15 + ["e2e-flaky"] * 22
    started = time.monotonic()
    ids = {runner.start(k, f"job {i}", options=RETRYING).id: k for i, k in enumerate(kinds[::2])}
    slow = runner.start("e2e-slow", "the step to kill").id
    ids[slow] = "e2e-slow"
    ids |= {runner.start(k, f"job {i}", options=RETRYING).id: k for i, k in enumerate(kinds[1::2])}
    assert len(ids) == 150

    # When the worker running the slow tool is killed with SIGKILL mid-step, and restarted
    client = redis_server.client()
    deadline = time.monotonic() + 30
    while not client.get(f"{PREFIX}slow-started:{slow}") and time.monotonic() < deadline:
        time.sleep(0.01)
    lease = runner.store.peek(slow).lease
    assert lease is not None, "the slow tool never started"
    victim = _owner(rabbit_fleet, int(lease.owner.rsplit(":", 1)[1]))
    rabbit_fleet.kill_worker(victim)
    running = sum(not runner.store.peek(t).status.is_terminal for t in ids)
    rabbit_fleet.start_worker("w3", threads, pool=pool)
    final = _drive(runner, list(ids), timeout=90)
    elapsed = time.monotonic() - started

    # Then every turn completed, with the expected answers ...
    assert running > 20, "the kill came too late to be mid-run"
    statuses = Counter(s.status for s in final.values())
    assert statuses == {AgentTurnStatus.COMPLETED: 150}, statuses
    outputs = {
        "e2e-tools": "done: recorded a | recorded b",
        "e2e-approval": "done: paid 5.0",
        "e2e-form": 'done: shipping to {"city": "Oslo"}',
        "e2e-parent": "parts: COMPLETED, COMPLETED, COMPLETED",
        "e2e-slow": "done: recorded s | recorded after",
        "e2e-flaky": "worked after 2 failures",
        "e2e-charges": "done: " + " | ".join(f"charged {float(i)}" for i in range(5)),
    }
    for turn_id, kind in ids.items():
        s = final[turn_id]
        if kind in outputs:
            assert s.final_output == outputs[kind], (kind, s.final_output)
        calls = [m.call_id for m in s.messages if isinstance(m, ToolMessage)]
        assert len(calls) == len(set(calls)), turn_id  # each call answered once
    # ... every recorded side effect ran, and none twice where one step ran at a time per
    # process (with threads the victim's other steps may have recorded before they died:
    # tools are at least once; the charges below show the idempotent way) ...
    runs = executions(client)
    assert len(runs) == 40 * 2 + 12 * 3 + 20 + 15 + 2
    if threads == 1:
        assert set(runs.values()) == {1}, {k: v for k, v in runs.items() if v != 1}
    assert [v for k, v in runs.items() if k.startswith(slow)] == [1, 1]  # killed: never ran
    # ... and every idempotent charge was applied exactly once
    effects = {k.decode(): int(client.get(k) or 0) for k in client.keys(PREFIX + "effect:*")}
    lost = {k.decode() for k in client.keys(PREFIX + "applied:*")} - {
        k.replace(":effect:", ":applied:") for k in effects
    }
    assert len(effects) == 40 * 5 and set(effects.values()) == {1}, (len(effects), lost)
    print(f"150 turns on RabbitMQ, {expected} workers, {victim} killed: {elapsed:.1f} s")


@pytest.mark.skipif(celery_version() < (5, 5), reason="quorum queues need Celery 5.5+")
def test_quorum_queues_run_turns_and_a_worker_of_another_type_refuses_to_start(
    rabbit_fleet: Fleet, rabbit_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given both queues declared as quorum queues by a worker
    rabbit_fleet.env["AGENTWORKER_QUEUE_TYPE"] = "quorum"
    monkeypatch.setenv("AGENTWORKER_QUEUE_TYPE", "quorum")
    rabbit_fleet.start_worker("quorum1")
    rabbit_fleet.start_beat()
    rabbit_fleet.wait_ready()
    # When turns run through them, they complete
    runner = producer()
    ids = [runner.start("e2e-tools", f"job {i}").id for i in range(10)]
    final = _drive(runner, ids, timeout=60)
    assert {s.status for s in final.values()} == {AgentTurnStatus.COMPLETED}
    assert "Global QoS is disabled" in (rabbit_fleet.logs / "quorum1.log").read_text()
    # And a worker configured for classic queues exits at start with one line saying why
    rabbit_fleet.env["AGENTWORKER_QUEUE_TYPE"] = "classic"
    classic = rabbit_fleet.start_worker("classic1")
    assert classic.wait(60) == 2
    log = (rabbit_fleet.logs / "classic1.log").read_text()
    step_queue = rabbit_env["AGENTWORKER_STEP_QUEUE"]
    assert f"queue {step_queue!r} exists on the broker as a quorum queue" in log
    assert "AGENTWORKER_QUEUE_TYPE=classic" in log
    del rabbit_fleet.workers["classic1"]
