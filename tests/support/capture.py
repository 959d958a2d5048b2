"""A Redis connection that records every command it sends (for slot and payload checks)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.cluster import key_slot  # type: ignore[attr-defined]

from stores import RedisAgentTurnStore

Command = tuple[Any, ...]


class Recorded(list[Command]):
    """Commands as sent, pipelines included."""

    def scripts(self) -> list[tuple[str, list[bytes], list[Any]]]:
        """(sha, KEYS, ARGV) of every EVALSHA/EVAL."""
        out = []
        for cmd in self:
            name = str(cmd[0]).upper()
            if name in ("EVALSHA", "EVAL"):
                n = int(cmd[2])
                keys = [_bytes(k) for k in cmd[3 : 3 + n]]
                out.append((str(cmd[1]), keys, list(cmd[3 + n :])))
        return out


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def recording_store(url: str, namespace: str) -> tuple[RedisAgentTurnStore, Recorded]:
    """A store whose connections record into the returned list."""
    recorded = Recorded()

    class Recording(redis.Connection):
        def send_command(self, *args: Any, **kwargs: Any) -> None:
            recorded.append(tuple(args))
            super().send_command(*args, **kwargs)  # type: ignore[no-untyped-call]

        def pack_commands(self, commands: Iterable[Sequence[Any]]) -> Any:
            commands = list(commands)
            recorded.extend(tuple(c) for c in commands)
            return super().pack_commands(commands)  # type: ignore[no-untyped-call]

    pool = redis.ConnectionPool.from_url(url, connection_class=Recording)
    return RedisAgentTurnStore(redis.Redis(connection_pool=pool), namespace=namespace), recorded


def slots(keys: Sequence[bytes]) -> set[int]:
    """The cluster hash slots of ``keys``."""
    return {key_slot(k) for k in keys}
