"""Outbound webhooks: turn events that need someone, delivered as signed Standard Webhooks.

Which events: a tool call waits for approval (``turn.waiting_for_approval``), a tool asks for
input (``turn.waiting_for_input``), a turn failed (``turn.failed``) or ended another way
(``turn.ended``). Who hears them: the subscriptions of ``AGENTWORKER_WEBHOOKS`` (all turns,
or one agent's, or one tenant's) and those given on ``POST /turns`` (that turn's only).

How, durably (Redis is the truth, a Celery message only a hint, as for steps):

1. After an event's commit, the runner's listener records one delivery per subscription:
   a hash ``ns:wh:d:<message id>`` with the body to send, a ``due`` time in ``ns:wh:due``
   and the id in the turn's delivery log ``ns:wh:log:<turn id>``. The message id is derived
   from the subscription, the turn and the event's sequence: a duplicate listener call
   records nothing new, so each event is one logical notification with one stable id.
2. ``agentworker.deliver_webhook(message id)`` posts it (one deliverer at a time per
   message). A 2xx answer ends it; otherwise the next attempt is due after tenacity's
   exponential wait; after ``webhook_max_attempts`` it is dead (``ns:wh:dead``).
3. The sweep re-sends the hint of every delivery that is due and not held, so a worker that
   died mid-delivery, or a lost hint, delays a notification but never loses it.
4. A worker killed between a commit and its listener leaves its step message unacknowledged;
   when it comes back and finds the turn parked or ended, ``catch_up`` records from the
   turn's committed events what that worker did not (``agentworker/stepping.py``).
5. A cancel ends an idle turn in the cancelling process (the HTTP app), where no step
   message would come back: its cancel request marks the turn for a check that the turn's
   notification clears, and the sweep catches up a mark left behind (``recheck``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis import Redis

from agentworker.notify.signing import secret_key, sign
from runner_core import (
    AgentEvent,
    AgentEventType,
    AgentRunner,
    AgentTurnSnapshot,
    AgentTurnStatus,
    RetryPolicy,
)
from runner_core.errors import AgentWorkerError, ConfigurationError
from runner_core.events import TERMINAL_EVENTS
from runner_core.resume import approval_calls
from stores.redis import Keyspace, RedisOutbox, make_client

log = logging.getLogger("agentworker.webhooks")

#: The terminal events announced as ``turn.ended``: all but a failure, which has its own
#: type (``turn.failed``) so that a receiver can page on it alone (docs/webhooks.md).
ENDED_EVENTS = TERMINAL_EVENTS - {AgentEventType.TURN_FAILED}
#: The Standard Webhooks ``type`` of each event that needs someone.
EVENT_TYPES: dict[AgentEventType, str] = {
    AgentEventType.TOOL_APPROVAL_REQUESTED: "turn.waiting_for_approval",
    AgentEventType.TOOL_INPUT_REQUESTED: "turn.waiting_for_input",
    AgentEventType.TURN_FAILED: "turn.failed",
    **{e: "turn.ended" for e in ENDED_EVENTS},
}
#: Seconds a hinted or in-flight delivery is held before the sweep sends it again.
HOLD_SECONDS = 60.0
#: How long delivery records and logs are kept (seconds).
KEEP_SECONDS = 7 * 24 * 3600
#: Seconds after a cancel request before the sweep checks its turn's notification.
CHECK_SECONDS = 60.0


@dataclass(frozen=True)
class Subscription:
    """Where one kind of notification goes, and the key that signs it."""

    name: str
    url: str
    key: bytes
    agent: str | None = None
    tenant: str | None = None
    events: frozenset[str] | None = None

    def wants(self, kind: str, snapshot: AgentTurnSnapshot) -> bool:
        """True when this subscription covers the event of this turn."""
        return (
            (self.events is None or kind in self.events)
            and (self.agent is None or snapshot.agent_id == self.agent)
            and (self.tenant is None or snapshot.metadata.get("tenant_id") == self.tenant)
        )


def parse_subscriptions(raw: str | None) -> list[Subscription]:
    """``AGENTWORKER_WEBHOOKS``; ``ConfigurationError`` naming a bad entry."""
    if raw is None or not raw.strip():
        return []
    try:
        entries = json.loads(raw)
    except ValueError:
        raise ConfigurationError("AGENTWORKER_WEBHOOKS is not valid JSON") from None
    if not isinstance(entries, list):
        raise ConfigurationError("AGENTWORKER_WEBHOOKS must be a JSON list")
    found = []
    for n, entry in enumerate(entries):
        where = f"AGENTWORKER_WEBHOOKS[{n}]"
        if not isinstance(entry, dict) or not str(entry.get("url", "")).startswith("http"):
            raise ConfigurationError(f"{where}: needs an http(s) 'url'")
        if not isinstance(entry.get("secret"), str):
            raise ConfigurationError(f"{where}: needs a 'secret' (whsec_<base64>)")
        events = entry.get("events")
        if events is not None and not set(events) <= set(EVENT_TYPES.values()):
            raise ConfigurationError(
                f"{where}: events are some of {sorted(set(EVENT_TYPES.values()))}"
            )
        found.append(
            Subscription(
                str(entry.get("name") or f"webhook-{n}"),
                entry["url"],
                secret_key(entry["secret"]),
                entry.get("agent"),
                entry.get("tenant"),
                frozenset(events) if events is not None else None,
            )
        )
    return found


def message_id(subscription: str, url: str, turn_id: str, sequence: int) -> str:
    """The stable id of one notification: the same event to the same endpoint, the same id."""
    digest = hashlib.sha256(f"{subscription}\n{url}\n{turn_id}\n{sequence}".encode())
    return "msg_" + digest.hexdigest()[:32]


def payload(kind: str, event: AgentEvent, snapshot: AgentTurnSnapshot) -> dict[str, Any]:
    """The body: ``{"type", "timestamp", "data"}`` with what the receiver needs to act.

    Waiting for approval, ``data["calls"]`` lists every call the turn waits on (one
    suspension for all the calls of a model response that need approval).
    """
    data: dict[str, Any] = {
        "turn_id": event.turn_id,
        "root_turn_id": event.root_turn_id,
        "agent_id": event.agent_id,
        "event": event.type.value,
        "sequence": event.sequence,
        "status": snapshot.status.value,
        "tenant_id": snapshot.metadata.get("tenant_id"),
    }
    if snapshot.suspension is not None and kind.startswith("turn.waiting"):
        data["suspension"] = snapshot.suspension.model_dump(mode="json")
        if kind == "turn.waiting_for_approval":
            data["calls"] = approval_calls(snapshot.suspension)
    if snapshot.status.is_terminal:
        data["final_output"] = snapshot.final_output
        data["error"] = snapshot.error.model_dump(mode="json") if snapshot.error else None
    when = datetime.fromtimestamp(event.occurred_at, UTC).isoformat().replace("+00:00", "Z")
    return {"type": kind, "timestamp": when, "data": data}


class Outbox:
    """Webhook deliveries: what to record, when to send, how to sign, post and retry.

    The records themselves (``ns:wh:*``) are ``stores.redis.RedisOutbox``.
    """

    def __init__(
        self,
        redis: Redis,
        namespace: str,
        keys: dict[str, bytes],
        policy: RetryPolicy,
        max_attempts: int = 8,
        timeout: float = 10.0,
    ) -> None:
        self.records = RedisOutbox(redis, Keyspace(namespace))
        #: Signing keys by subscription name (read at delivery: secrets stay out of Redis).
        self.keys = keys
        self.policy = policy
        self.max_attempts = max_attempts
        self.timeout = timeout

    def record(self, subscription: str, url: str, event: AgentEvent, body: bytes) -> str | None:
        """Record one delivery; its id if new, None if this event was recorded already."""
        msg_id = message_id(subscription, url, event.turn_id, event.sequence)
        fields = {
            "url": url,
            "subscription": subscription,
            "turn_id": event.turn_id,
            "type": json.loads(body)["type"],
            "body": body,
            "attempts": 0,
            "created_at": time.time(),
        }
        if not self.records.record(msg_id, event.turn_id, fields, time.time(), KEEP_SECONDS):
            return None
        return msg_id

    def hold(self, msg_ids: Sequence[str], seconds: float = HOLD_SECONDS) -> None:
        """A hint was sent for these: the sweep leaves them alone for ``seconds``."""
        self.records.hold(msg_ids, time.time() + seconds)

    def expect(self, turn_id: str, seconds: float = CHECK_SECONDS) -> None:
        """A notifying commit may follow for ``turn_id``: have the sweep check it later."""
        self.records.expect(turn_id, time.time() + seconds)

    def expected(self, limit: int = 100, now: float | None = None) -> list[str]:
        """Turns whose check is due (``now`` defaults to the clock)."""
        return self.records.expected(time.time() if now is None else now, limit)

    def checked(self, turn_ids: Sequence[str]) -> None:
        """These turns need no later check."""
        self.records.checked(turn_ids)

    def due(self, limit: int = 100) -> list[str]:
        """Deliveries whose time has come and that no hint or deliverer holds."""
        return self.records.due(time.time(), limit)

    def deliver(self, msg_id: str) -> str:
        """One attempt; what became of the delivery (delivered, retry, dead, busy, gone)."""
        if not self.records.lock(msg_id, int(self.timeout * 3) + 5):
            return "busy"
        try:
            return self._attempt(msg_id)
        finally:
            self.records.unlock(msg_id)

    def _attempt(self, msg_id: str) -> str:
        fields = self.records.fields(msg_id)
        if fields.get("state") != b"pending" or "url" not in fields:
            self.records.drop(msg_id)
            return "gone" if not fields else _text(fields["state"])
        self.hold([msg_id], self.timeout * 3 + 5)  # a deliverer that dies: sent again later
        key = self.keys.get(_text(fields["subscription"]))
        attempts = int(fields["attempts"]) + 1
        if key is None:
            outcome, problem = "no key", "its subscription is not configured any more"
        else:
            outcome, problem = self._post(msg_id, _text(fields["url"]), fields["body"], key)
        return self._settle(msg_id, attempts, outcome, problem)

    def _post(self, msg_id: str, url: str, body: bytes, key: bytes) -> tuple[str, str]:
        ts = int(time.time())
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(ts),
            "webhook-signature": sign(key, msg_id, ts, body),
            "user-agent": "agentworker-webhooks",
        }
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                return str(answer.status), ""
        except urllib.error.HTTPError as error:
            return str(error.code), f"HTTP {error.code}"
        except OSError as error:
            return "error", f"{type(error).__name__}: {error}"

    def _settle(self, msg_id: str, attempts: int, outcome: str, problem: str) -> str:
        now = time.time()
        entry = json.dumps({"at": now, "outcome": outcome, "problem": problem})
        at = now
        if outcome.isdigit() and 200 <= int(outcome) < 300:
            state = "delivered"
        elif attempts >= self.max_attempts:
            state = "dead"
            log.warning("webhook %s dead after %d attempts: %s", msg_id, attempts, problem)
        else:
            state, at = "retry", now + self.policy.delay(attempts)
        self.records.settle(msg_id, attempts, entry, state, at, KEEP_SECONDS)
        return state

    def log_of(self, turn_id: str) -> list[dict[str, Any]]:
        """The turn's deliveries, oldest first: id, type, url, state, attempts, each attempt."""
        out = []
        for delivery in self.records.log_of(turn_id):
            fields = {k: _text(v) for k, v in delivery.fields.items()}
            out.append(
                {
                    "id": delivery.message_id,
                    "type": fields.get("type"),
                    "url": fields.get("url"),
                    "subscription": fields.get("subscription"),
                    "state": fields.get("state"),
                    "attempts": [json.loads(a) for a in delivery.attempts],
                }
            )
        return out


class WebhookListener:
    """A runner event listener: records the notifications of committed events; never raises."""

    def __init__(
        self,
        outbox: Outbox,
        subscriptions: Sequence[Subscription],
        load: Callable[[str], AgentTurnSnapshot],
        send_hint: Callable[[str], None],
        start_key: bytes | None = None,
    ) -> None:
        self.outbox = outbox
        self.subscriptions = list(subscriptions)
        self.load = load
        self.send_hint = send_hint
        self.start_key = start_key

    def __call__(self, event: AgentEvent) -> None:
        """Record and hint each delivery this event needs."""
        self.notify(event)

    def notify(self, event: AgentEvent) -> int:
        """Record and hint each delivery this event needs; how many were new."""
        kind = EVENT_TYPES.get(event.type)
        if event.provisional:
            return 0
        try:
            if event.type is AgentEventType.CANCELLATION_REQUESTED:
                # The end may be committed here (an idle turn) and this process killed
                # before its listeners: no step message would come back to catch it up
                self.outbox.expect(event.turn_id)
                return 0
            if kind is None:
                return 0
            new = self._notify(kind, event)
            if event.type is AgentEventType.TURN_CANCELLED:
                self.outbox.checked([event.turn_id])
            return new
        except Exception:  # noqa: BLE001 - a listener must not break the runner
            log.exception("recording webhooks of %s %s failed", event.type, event.turn_id)
            return 0

    def _notify(self, kind: str, event: AgentEvent) -> int:
        snapshot = self.load(event.turn_id)
        body = json.dumps(payload(kind, event, snapshot), separators=(",", ":")).encode()
        targets = [(s.name, s.url) for s in self.subscriptions if s.wants(kind, snapshot)]
        if self.start_key is not None:
            for given in snapshot.metadata.get("webhooks") or []:
                events = given.get("events")
                if events is None or kind in events:
                    targets.append((START_SUBSCRIPTION, str(given["url"])))
        new = [m for name, url in targets if (m := self.outbox.record(name, url, event, body))]
        for msg_id in new:
            self.send_hint(msg_id)
        self.outbox.hold(new)
        return len(new)


#: The subscription name of webhooks given on start (signed with webhook_start_secret).
START_SUBSCRIPTION = "start"


def outbox_of(settings: Any, redis: Redis | None = None) -> Outbox:
    """The outbox of ``settings`` (``agentworker.settings.Settings``)."""
    keys = {s.name: s.key for s in parse_subscriptions(_secret(settings.webhooks))}
    start = _secret(settings.webhook_start_secret)
    if start:
        keys[START_SUBSCRIPTION] = secret_key(start)
    policy = RetryPolicy(
        initial_delay=settings.webhook_retry_initial_seconds,
        max_delay=settings.webhook_retry_max_seconds,
        multiplier=2.0,
        jitter=settings.webhook_retry_initial_seconds / 2,
    )
    client = redis if redis is not None else make_client(settings.redis_url)
    return Outbox(
        client,
        settings.namespace,
        keys,
        policy,
        settings.webhook_max_attempts,
        settings.webhook_timeout_seconds,
    )


def configured(settings: Any) -> bool:
    """True when any outbound webhook is configured."""
    return bool(_secret(settings.webhooks) or _secret(settings.webhook_start_secret))


def listener_of(
    settings: Any, load: Callable[[str], AgentTurnSnapshot], send_hint: Callable[[str], None]
) -> WebhookListener:
    """The event listener a runner adds when webhooks are configured."""
    start = _secret(settings.webhook_start_secret)
    return WebhookListener(
        outbox_of(settings),
        parse_subscriptions(_secret(settings.webhooks)),
        load,
        send_hint,
        secret_key(start) if start else None,
    )


#: A turn in one of these may have a notification whose recording a dead process missed.
NOTIFYING = frozenset(
    {AgentTurnStatus.WAITING_FOR_APPROVAL, AgentTurnStatus.WAITING_FOR_USER}
) | frozenset(s for s in AgentTurnStatus if s.is_terminal)
#: How far back in its tree's stream a catch-up looks for a turn's notifying events.
CATCH_UP_ENTRIES = 200


def catch_up(runner: AgentRunner, turn_id: str) -> int:
    """Record the notifications of a parked or ended turn that are not recorded yet.

    A process killed between a commit and its listeners leaves the commit's events in the
    store and their notifications unrecorded. Its step message comes back (it was not
    acknowledged) and finds nothing to run: the step task then calls this, which reads
    the turn's last committed events and records what is missing (the message ids are
    stable, so what was recorded stays one notification). Needs the event stream
    (``AGENTWORKER_EVENTS``, on by default). Returns how many deliveries were new.
    """
    listeners = [x for x in runner.events.listeners if isinstance(x, WebhookListener)]
    if not listeners:
        return 0
    try:
        control = runner.store.peek(turn_id)
        if control.status not in NOTIFYING:
            return 0
        root = runner.store.load(turn_id).root_turn_id
        events = runner.store.read_events(root, CATCH_UP_ENTRIES, newest=True)
    except AgentWorkerError as exc:
        log.warning("webhook catch-up of turn %s skipped: %s", turn_id, exc)
        return 0
    mine = [e for e in events if e.turn_id == turn_id and e.type in EVENT_TYPES]
    new = sum(listener.notify(e) for listener in listeners for e in mine)
    if new:
        log.warning("turn %s: %d webhook deliveries recorded late (a process died)", turn_id, new)
    return new


def recheck(runner: AgentRunner, outbox: Outbox, limit: int = 100, now: float | None = None) -> int:
    """The sweep's part for cancels: catch up every turn whose check is due.

    A cancel ends an idle turn in the process that cancels (the HTTP app, the CLI). Its
    cancel request marked the turn for a check, and the cancelled turn's notification
    clears the mark; a mark left ``CHECK_SECONDS`` later is a process that died between the
    two, and ``catch_up`` records what it missed. Returns how many deliveries were new.
    """
    turn_ids = outbox.expected(limit, now)
    new = sum(catch_up(runner, turn_id) for turn_id in turn_ids)
    outbox.checked(turn_ids)
    return new


def send_due(outbox: Outbox, send_hint: Callable[[str], None], limit: int = 100) -> int:
    """The sweep's part: hint every due delivery again; how many were sent."""
    due = outbox.due(limit)
    for msg_id in due:
        send_hint(msg_id)
    outbox.hold(due)
    return len(due)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    text = value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)
    return text or None
