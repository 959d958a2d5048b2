"""The Redis side of the webhook outbox: delivery records, due index, logs, locks.

What to deliver, when, and how to sign and post it is ``agentworker.notify.webhooks``;
this module only reads and writes the ``ns:wh:*`` keys (see ``keys.py``). The keys have
no hash tag: every command addresses one key, and a pipeline of them is no transaction,
so a Redis Cluster client splits it per node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis

from stores.redis.codec import text
from stores.redis.keys import Keyspace


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery as recorded: its fields (text names, byte values) and its attempts."""

    message_id: str
    fields: dict[str, bytes]
    attempts: list[bytes]


#: A value of a delivery record field, as redis-py writes it.
Value = bytes | str | int | float


def _fields(raw: Mapping[Any, Any]) -> dict[str, bytes]:
    """An HGETALL reply with text names and byte values, whatever the client decodes."""
    return {text(k): v if isinstance(v, bytes) else str(v).encode() for k, v in raw.items()}


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class RedisOutbox:
    """Webhook delivery records of one namespace, in Redis."""

    def __init__(self, redis: Redis, keys: Keyspace) -> None:
        self.redis = redis
        self.keys = keys

    def record(
        self,
        message_id: str,
        turn_id: str,
        fields: Mapping[str, Value],
        due_at: float,
        keep_seconds: int,
    ) -> bool:
        """Record a delivery due at ``due_at``; False if it was recorded already."""
        key = self.keys.webhook_delivery(message_id)
        # The claim first: the rest may span hash slots (a cluster), so it is no transaction.
        # A claim without its url is a recorder that died here (or one writing right now):
        # the rest is written again, with the same content either way.
        if not self.redis.hsetnx(key, "state", "pending") and self.redis.hexists(key, "url"):
            return False
        log = self.keys.webhook_log(turn_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, mapping=dict(fields))  # type: ignore[arg-type]
        pipe.expire(key, keep_seconds)
        pipe.zadd(self.keys.webhook_due(), {message_id: due_at})
        pipe.rpush(log, message_id)
        pipe.expire(log, keep_seconds)
        pipe.execute()
        return True

    def hold(self, message_ids: Sequence[str], until: float) -> None:
        """Move recorded deliveries' due time to ``until`` (unrecorded ones stay absent)."""
        if message_ids:
            self.redis.zadd(self.keys.webhook_due(), dict.fromkeys(message_ids, until), xx=True)

    def due(self, until: float, limit: int) -> list[str]:
        """Up to ``limit`` deliveries due at ``until``, earliest first."""
        ids = self.redis.zrangebyscore(self.keys.webhook_due(), "-inf", until, start=0, num=limit)
        return [text(i) for i in ids]

    def expect(self, turn_id: str, at: float) -> None:
        """Have the sweep check ``turn_id`` at ``at`` (an earlier check stays)."""
        self.redis.zadd(self.keys.webhook_check(), {turn_id: at}, nx=True)

    def expected(self, until: float, limit: int) -> list[str]:
        """Up to ``limit`` turns whose check is due at ``until``."""
        key = self.keys.webhook_check()
        return [text(i) for i in self.redis.zrangebyscore(key, "-inf", until, start=0, num=limit)]

    def checked(self, turn_ids: Sequence[str]) -> None:
        """These turns need no later check."""
        if turn_ids:
            self.redis.zrem(self.keys.webhook_check(), *turn_ids)

    def lock(self, message_id: str, seconds: int) -> bool:
        """Become the one deliverer of ``message_id`` for ``seconds``; False if busy."""
        key = self.keys.webhook_lock(message_id)
        return bool(self.redis.set(key, "1", nx=True, ex=seconds))

    def unlock(self, message_id: str) -> None:
        """Stop being its deliverer."""
        self.redis.delete(self.keys.webhook_lock(message_id))

    def fields(self, message_id: str) -> dict[str, bytes]:
        """The delivery's record ({} if it expired or never was)."""
        return _fields(self.redis.hgetall(self.keys.webhook_delivery(message_id)))

    def drop(self, message_id: str) -> None:
        """Take the delivery out of the due index (nothing left to send)."""
        self.redis.zrem(self.keys.webhook_due(), message_id)

    def settle(
        self,
        message_id: str,
        attempts: int,
        entry: str,
        state: str,
        at: float,
        keep_seconds: int,
    ) -> None:
        """Log an attempt and write its outcome, in one round trip.

        ``state``: ``delivered`` (at ``at``), ``dead`` (given up at ``at``) or ``retry``
        (due again at ``at``).
        """
        k, key = self.keys, self.keys.webhook_delivery(message_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, mapping={"attempts": attempts, "last": entry})
        pipe.rpush(k.webhook_attempts(message_id), entry)
        pipe.expire(k.webhook_attempts(message_id), keep_seconds)
        if state == "delivered":
            pipe.hset(key, mapping={"state": "delivered", "delivered_at": at})
            pipe.zrem(k.webhook_due(), message_id)
        elif state == "dead":
            pipe.hset(key, "state", "dead")
            pipe.zrem(k.webhook_due(), message_id)
            pipe.zadd(k.webhook_dead(), {message_id: at})
        else:
            pipe.zadd(k.webhook_due(), {message_id: at})
        pipe.execute()

    def dead_since(self, message_id: str) -> float | None:
        """When the delivery gave up (None if it has not)."""
        score = self.redis.zscore(self.keys.webhook_dead(), message_id)
        return None if score is None else float(score)

    def log_of(self, turn_id: str) -> list[Delivery]:
        """The turn's deliveries, oldest first, each once."""
        logged = [text(raw) for raw in self.redis.lrange(self.keys.webhook_log(turn_id), 0, -1)]
        out = []
        for message_id in dict.fromkeys(logged):  # a record completed twice is logged twice
            tries = self.redis.lrange(self.keys.webhook_attempts(message_id), 0, -1)
            out.append(Delivery(message_id, self.fields(message_id), [_bytes(t) for t in tries]))
        return out
