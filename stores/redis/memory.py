"""``RedisChatMemory``: a conversation's model-visible messages, shared by every process.

Kept under the conversation's hash tag (the slot of its root turns). Adding is one script:
a message whose id is already stored is skipped, so projecting a turn twice, from two
runners, or again after a failure, stores each message once.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis

from runner_core.messages import MESSAGE, Message
from stores.redis.connection import Guard
from stores.redis.keys import Keyspace
from stores.redis.scripts import Scripts


class RedisChatMemory:
    """The ``ChatMemory`` of one conversation, in Redis."""

    def __init__(
        self, redis: Redis, keys: Keyspace, scripts: Scripts, guard: Guard, conversation_id: str
    ) -> None:
        if not conversation_id:
            raise ValueError("conversation_id must not be empty")
        self.redis = redis
        self.scripts = scripts
        self.guard = guard
        self.conversation_id = conversation_id
        self.list_key, self.ids_key = keys.memory(conversation_id)

    def get_model_messages(self, max_messages: int | None) -> list[Message]:
        """The newest ``max_messages`` messages (all if None), oldest first."""
        if max_messages is not None and max_messages <= 0:
            return []
        start = 0 if max_messages is None else -max_messages
        with self.guard:
            raw = self.redis.lrange(self.list_key, start, -1)
        return [MESSAGE.validate_json(item) for item in raw]

    def has_message(self, message_id: str) -> bool:
        """Whether a message with this id is stored (one SISMEMBER)."""
        with self.guard:
            return bool(self.redis.sismember(self.ids_key, message_id))

    def add_messages(self, messages: Sequence[Message]) -> None:
        """Append the messages whose ids are not stored yet (one round trip)."""
        if not messages:
            return
        args: list[str] = []
        for message in messages:
            args += [message.id, message.model_dump_json()]
        with self.guard:
            self.scripts.run("memory_add", [self.list_key, self.ids_key], args)
