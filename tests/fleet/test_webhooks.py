"""Outbound webhooks without workers: recording, stable ids, signing, backoff, dead letters."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook

from agentworker.fleet.stepping import step_once
from agentworker.notify import webhooks
from agentworker.settings import Settings
from runner_core import AgentResumeCommand, AgentRunner, AgentTurn, InMemoryAgentLoader
from stores import RedisAgentTurnStore
from tests.support.agents import approval_agent
from tests.support.approvals import listed_calls, refunds_agent, waiting_on_two
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

SECRET = "whsec_" + base64.b64encode(b"receiver-key-0123456789abcdefgh").decode()


class Receiver:
    """A local endpoint that answers the first ``fail`` requests with 500, then 204."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.got: list[tuple[dict[str, str], bytes, int]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["content-length"]))
                status = 500 if len(outer.got) < outer.fail else 204
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.got.append((headers, body, status))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail=2)
    yield r
    r.close()


def settings_for(server: RedisServer, url: str, **extra: Any) -> Settings:
    subscriptions = [{"name": "ops", "url": url, "secret": SECRET}]
    return Settings(
        redis_url=server.url,
        namespace="wh-" + uuid.uuid4().hex[:8],
        webhooks=json.dumps(subscriptions),
        webhook_retry_initial_seconds=0.05,
        webhook_retry_max_seconds=0.2,
        webhook_max_attempts=3,
        webhook_timeout_seconds=2,
        **extra,
    )


def runner_with_webhooks(settings: Settings, hints: list[str]) -> AgentRunner:
    runner = AgentRunner(agent_loader=InMemoryAgentLoader([approval_agent()]))
    runner.add_event_listener(webhooks.listener_of(settings, runner.store.load, hints.append))
    return runner


def deliver_until_settled(outbox: webhooks.Outbox, msg_id: str, tries: int = 10) -> list[str]:
    outcomes = []
    for _ in range(tries):
        outcome = outbox.deliver(msg_id)
        outcomes.append(outcome)
        if outcome in ("delivered", "dead"):
            return outcomes
        time.sleep(0.3)
    return outcomes


def test_a_waiting_turn_is_one_notification_delivered_after_retries_with_one_id(
    server: RedisServer, receiver: Receiver
) -> None:
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    runner = runner_with_webhooks(settings, hints)
    turn = runner.run("pay-agent", "pay 5")
    assert turn.status.value == "WAITING_FOR_APPROVAL"
    [msg_id] = hints

    outbox = webhooks.outbox_of(settings)
    assert deliver_until_settled(outbox, msg_id) == ["retry", "retry", "delivered"]

    # Three posts of one logical notification: same id, same body, each one verifiable
    assert [status for _, _, status in receiver.got] == [500, 500, 204]
    assert {h["webhook-id"] for h, _, _ in receiver.got} == {msg_id}
    assert len({body for _, body, _ in receiver.got}) == 1
    for headers, body, _ in receiver.got:
        verified = Webhook(SECRET).verify(body, headers)
        assert verified["type"] == "turn.waiting_for_approval"
        assert verified["data"]["turn_id"] == turn.id
        assert verified["data"]["suspension"]["metadata"] == {
            "tool": "pay",
            "arguments": {"amount": 5},
            "calls": [{"call_id": "c1", "tool": "pay", "arguments": {"amount": 5}}],
        }
    [entry] = outbox.log_of(turn.id)
    assert (entry["id"], entry["state"], len(entry["attempts"])) == (msg_id, "delivered", 3)
    assert outbox.deliver(msg_id) == "delivered"  # a late hint sends nothing more
    assert len(receiver.got) == 3


def test_the_same_event_recorded_twice_is_still_one_notification(
    server: RedisServer, receiver: Receiver
) -> None:
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    runner = runner_with_webhooks(settings, hints)
    recorded: list[Any] = []
    runner.add_event_listener(recorded.append)
    runner.run("pay-agent", "pay 5")
    [approval] = [e for e in recorded if e.type.value == "TOOL_APPROVAL_REQUESTED"]
    listener = webhooks.listener_of(settings, runner.store.load, hints.append)
    listener(approval)  # a second process hands the same committed event over again
    assert len(hints) == 1


def test_ended_and_failed_turns_notify_and_the_filters_apply(
    server: RedisServer, receiver: Receiver
) -> None:
    receiver.fail = 0
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    runner = runner_with_webhooks(settings, hints)
    turn = runner.run("pay-agent", "pay 5")
    runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
    outbox = webhooks.outbox_of(settings)
    kinds = [e["type"] for e in outbox.log_of(turn.id)]
    assert kinds == ["turn.waiting_for_approval", "turn.ended"]
    subscription = webhooks.Subscription("x", "http://h", b"k", agent="other-agent")
    assert not subscription.wants("turn.ended", runner.store.load(turn.id))
    tenant_only = webhooks.Subscription("x", "http://h", b"k", tenant="acme")
    assert not tenant_only.wants("turn.ended", runner.store.load(turn.id))


def test_a_delivery_that_keeps_failing_is_dead_lettered(server: RedisServer) -> None:
    receiver = Receiver(fail=100)
    try:
        settings = settings_for(server, receiver.url)
        hints: list[str] = []
        runner = runner_with_webhooks(settings, hints)
        turn = runner.run("pay-agent", "pay 5")
        outbox = webhooks.outbox_of(settings)
        assert deliver_until_settled(outbox, hints[0]) == ["retry", "retry", "dead"]
        assert outbox.records.dead_since(hints[0]) is not None
        assert outbox.due() == []
        assert outbox.log_of(turn.id)[0]["state"] == "dead"
    finally:
        receiver.close()


def test_the_sweep_hints_due_deliveries_again_and_holds_them(
    server: RedisServer, receiver: Receiver
) -> None:
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    runner_with_webhooks(settings, hints).run("pay-agent", "pay 5")
    outbox = webhooks.outbox_of(settings)
    assert outbox.due() == []  # the listener's hint holds it
    outbox.hold(hints, -1)  # as if that hint was lost long ago
    again: list[str] = []
    assert webhooks.send_due(outbox, again.append) == 1 and again == hints
    assert webhooks.send_due(outbox, again.append) == 0


def test_bad_subscriptions_are_configuration_errors() -> None:
    from runner_core import ConfigurationError

    for raw in ('[{"url": "ftp://x", "secret": "s"}]', '[{"url": "http://x"}]', "{}"):
        with pytest.raises(ConfigurationError, match="AGENTWORKER_WEBHOOKS"):
            webhooks.parse_subscriptions(raw)


def two_workers(settings: Settings, hints: list[str]) -> tuple[AgentRunner, AgentRunner]:
    """A worker whose listeners never run (killed right after its commit) and a healthy one."""
    loader = InMemoryAgentLoader([approval_agent()])

    def runner() -> AgentRunner:
        store = RedisAgentTurnStore(settings.redis_url, namespace=settings.namespace)
        return AgentRunner(turn_store=store, agent_loader=loader, dispatcher=lambda _: None)

    dying, healthy = runner(), runner()
    healthy.add_event_listener(webhooks.listener_of(settings, healthy.store.load, hints.append))
    return dying, healthy


def approval_message_id(runner: AgentRunner, turn_id: str, url: str) -> str:
    """The id the ``ops`` subscription gives the turn's approval request."""
    [approval] = [
        e for e in runner.store.read_events(turn_id) if e.type.value == "TOOL_APPROVAL_REQUESTED"
    ]
    return webhooks.message_id("ops", url, turn_id, approval.sequence)


def test_a_notification_a_killed_worker_never_recorded_is_recorded_when_its_message_returns(
    server: RedisServer, receiver: Receiver
) -> None:
    # Given a worker whose commit parked the turn for approval, killed before its listener
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    dying, healthy = two_workers(settings, hints)
    turn = dying.start("pay-agent", "pay 5")
    assert step_once(dying, turn.id, "w1", chain_seconds=60) == "WAITING_FOR_APPROVAL"
    assert webhooks.outbox_of(settings).log_of(turn.id) == []

    # When its unacknowledged message comes back to a healthy worker
    assert step_once(healthy, turn.id, "w2") == "not-runnable"

    # Then the notification is recorded, with the id the dead worker's listener would have
    # given it, and delivered; the same message again records nothing more
    assert hints == [approval_message_id(healthy, turn.id, receiver.url)]
    outbox = webhooks.outbox_of(settings)
    assert deliver_until_settled(outbox, hints[0])[-1] == "delivered"
    assert step_once(healthy, turn.id, "w2") == "not-runnable"
    assert len(hints) == 1 and len(outbox.log_of(turn.id)) == 1


def test_a_record_its_recorder_died_in_is_completed_not_dropped(
    server: RedisServer, receiver: Receiver
) -> None:
    # Given a notification whose recorder died between its claim and the rest of the record
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    dying, healthy = two_workers(settings, hints)
    turn = dying.start("pay-agent", "pay 5")
    step_once(dying, turn.id, "w1", chain_seconds=60)
    msg_id = approval_message_id(dying, turn.id, receiver.url)
    outbox = webhooks.outbox_of(settings)
    assert outbox.records.redis.hsetnx(f"{settings.namespace}:wh:d:{msg_id}", "state", "pending")

    # When the step message comes back: the record is completed and delivered
    step_once(healthy, turn.id, "w2")
    assert hints == [msg_id]
    assert deliver_until_settled(outbox, msg_id)[-1] == "delivered"
    assert [d["state"] for d in outbox.log_of(turn.id)] == ["delivered"]


class Killed(BaseException):
    """The process dies here (no ``except Exception`` catches it)."""


def killed_before_listeners_of(event_type: str) -> Any:
    """A first listener that kills the process when ``event_type`` is delivered."""

    def listener(event: Any) -> None:
        if event.type.value == event_type:
            raise Killed

    return listener


def waiting_turn(settings: Settings, hints: list[str]) -> tuple[AgentRunner, AgentTurn]:
    """A healthy worker, and a turn it parked for approval (its notification recorded)."""
    _, healthy = two_workers(settings, hints)
    turn = healthy.start("pay-agent", "pay 5")
    assert step_once(healthy, turn.id, "w1", chain_seconds=60) == "WAITING_FOR_APPROVAL"
    return healthy, turn


def test_a_cancel_whose_process_died_before_its_listener_is_notified_by_the_sweep(
    server: RedisServer, receiver: Receiver
) -> None:
    # Given a turn waiting for approval, and a canceller (the HTTP app) killed between the
    # commit that ends the turn and its webhook listener
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    healthy, turn = waiting_turn(settings, hints)
    canceller, _ = two_workers(settings, [])
    canceller.add_event_listener(killed_before_listeners_of("TURN_CANCELLED"))  # first
    canceller.add_event_listener(webhooks.listener_of(settings, canceller.store.load, hints.append))
    with pytest.raises(Killed):
        canceller.cancel(turn.id, "no longer needed")
    outbox = webhooks.outbox_of(settings)
    assert healthy.store.peek(turn.id).status.value == "CANCELLED"
    assert [d["type"] for d in outbox.log_of(turn.id)] == ["turn.waiting_for_approval"]

    # When the sweep runs: nothing before the check is due, then the end is recorded once
    assert webhooks.recheck(healthy, outbox) == 0
    later = time.time() + webhooks.CHECK_SECONDS + 1
    assert webhooks.recheck(healthy, outbox, now=later) == 1
    assert webhooks.recheck(healthy, outbox, now=later) == 0

    # Then the turn.ended notification is delivered, under the id its listener would have given
    [ended] = [e for e in healthy.store.read_events(turn.id) if e.type.value == "TURN_CANCELLED"]
    assert hints[-1] == webhooks.message_id("ops", receiver.url, turn.id, ended.sequence)
    assert deliver_until_settled(outbox, hints[-1])[-1] == "delivered"
    assert [d["type"] for d in outbox.log_of(turn.id)][-1] == "turn.ended"


def test_a_cancel_that_notified_leaves_nothing_for_the_sweep(
    server: RedisServer, receiver: Receiver
) -> None:
    # Given a turn waiting for approval, cancelled by a process that lives
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    healthy, turn = waiting_turn(settings, hints)
    healthy.cancel(turn.id)
    assert len(hints) == 2

    # Then no check is left behind for the sweep
    outbox = webhooks.outbox_of(settings)
    assert outbox.expected(now=time.time() + webhooks.CHECK_SECONDS + 1) == []
    assert webhooks.recheck(healthy, outbox, now=time.time() + 3600) == 0


def test_the_approval_payload_lists_every_waiting_call(server: RedisServer) -> None:
    runner = AgentRunner(turn_store=RedisAgentTurnStore(server.url, namespace=uuid.uuid4().hex))
    recorded: list[Any] = []
    runner.add_event_listener(recorded.append)
    turn = waiting_on_two(runner, [])
    [event] = [e for e in recorded if e.type.value == "TOOL_APPROVAL_REQUESTED"]

    body = webhooks.payload("turn.waiting_for_approval", event, runner.store.load(turn.id))

    assert body["data"]["calls"] == listed_calls()
    assert body["data"]["suspension"]["correlation_id"] == "r1"
    assert "calls" not in webhooks.payload("turn.ended", event, runner.store.load(turn.id))["data"]


def test_a_single_call_approval_payload_is_a_list_of_one(
    server: RedisServer, receiver: Receiver
) -> None:
    receiver.fail = 0
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    turn = runner_with_webhooks(settings, hints).run("pay-agent", "pay 5")
    [msg_id] = hints

    assert webhooks.outbox_of(settings).deliver(msg_id) == "delivered"

    [(headers, body, _)] = receiver.got
    data = Webhook(SECRET).verify(body, headers)["data"]
    assert data["turn_id"] == turn.id
    assert data["calls"] == [{"call_id": "c1", "tool": "pay", "arguments": {"amount": 5}}]


def test_the_delivered_approval_lists_both_calls_of_one_response(
    server: RedisServer, receiver: Receiver
) -> None:
    receiver.fail = 0
    settings = settings_for(server, receiver.url)
    hints: list[str] = []
    runner = AgentRunner(agent_loader=InMemoryAgentLoader([refunds_agent([])]))
    runner.add_event_listener(webhooks.listener_of(settings, runner.store.load, hints.append))
    runner.run("refunds", "refund both")
    [msg_id] = hints

    assert webhooks.outbox_of(settings).deliver(msg_id) == "delivered"

    [(headers, body, _)] = receiver.got
    assert Webhook(SECRET).verify(body, headers)["data"]["calls"] == listed_calls()
