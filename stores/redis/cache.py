"""What this process knows about turns it touched: tags, stored counts, stored messages."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from redis import Redis

from runner_core.errors import TurnNotFoundError
from runner_core.messages import Message
from stores.redis.codec import text
from stores.redis.keys import Keyspace


@dataclass(slots=True)
class Known:
    """One turn as far as this process knows.

    ``tag`` never changes. ``stored``/``last_id`` are a guess the save script verifies.
    ``messages`` is a prefix of the stored, append-only message list (never a caller's
    copy), so a load or claim fetches only what follows it.
    """

    tag: str
    stored: int = -1
    last_id: str = ""
    messages: tuple[Message, ...] | None = None


class TurnCache:
    """A thread-safe LRU of ``Known`` entries; only the latest few keep their messages."""

    def __init__(self, size: int, with_messages: int = 256) -> None:
        self._size = max(1, size)
        self._with_messages = max(0, with_messages)
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Known] = OrderedDict()
        self._holding: OrderedDict[str, None] = OrderedDict()  # entries with messages

    def get(self, turn_id: str) -> Known | None:
        """The entry, if any (marks it recently used)."""
        with self._lock:
            known = self._entries.get(turn_id)
            if known is not None:
                self._entries.move_to_end(turn_id)
            return known

    def put(self, turn_id: str, known: Known) -> None:
        """Add or replace an entry."""
        with self._lock:
            self._entries[turn_id] = known
            self._entries.move_to_end(turn_id)
            while len(self._entries) > self._size:
                gone, _ = self._entries.popitem(last=False)
                self._holding.pop(gone, None)
            if known.messages is None:
                self._holding.pop(turn_id, None)
                return
            self._holding[turn_id] = None
            self._holding.move_to_end(turn_id)
            while len(self._holding) > self._with_messages:
                oldest, _ = self._holding.popitem(last=False)
                entry = self._entries.get(oldest)
                if entry is not None:
                    entry.messages = None

    def forget(self, turn_id: str) -> None:
        """Drop an entry (the turn was expired)."""
        with self._lock:
            self._entries.pop(turn_id, None)
            self._holding.pop(turn_id, None)


class TagIndex:
    """Turn id -> tag: from the process cache, else from the global index (one GET)."""

    def __init__(self, redis: Redis, keys: Keyspace, cache: TurnCache) -> None:
        self.redis = redis
        self.keys = keys
        self.cache = cache

    def tag_of(self, turn_id: str) -> str:
        """The turn's tag; ``TurnNotFoundError`` if the index has none."""
        known = self.cache.get(turn_id)
        if known is not None:
            return known.tag
        raw = self.redis.get(self.keys.turn_index(turn_id))
        if raw is None:
            raise TurnNotFoundError(turn_id)
        tag = text(raw)
        self.cache.put(turn_id, Known(tag))
        return tag
