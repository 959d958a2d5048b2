"""A Redis connection that records every command it sends (for slot and payload checks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import key_slot  # type: ignore[attr-defined]

from stores import RedisAgentTurnStore

Command = tuple[Any, ...]


class Recorded(list[Command]):
    """Commands as sent, pipelines included (the name as text, arguments as bytes)."""

    def scripts(self) -> list[tuple[str, list[bytes], list[Any]]]:
        """(sha, KEYS, ARGV) of every EVALSHA/EVAL."""
        out = []
        for cmd in self:
            name = str(cmd[0]).upper()
            if name in ("EVALSHA", "EVAL"):
                n = int(cmd[2])
                keys = [_bytes(k) for k in cmd[3 : 3 + n]]
                sha = cmd[1].decode() if isinstance(cmd[1], bytes) else str(cmd[1])
                out.append((sha, keys, list(cmd[3 + n :])))
        return out


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def recording_store(url: str, namespace: str) -> tuple[RedisAgentTurnStore, Recorded]:
    """A store whose connections record into the returned list."""
    recorded = Recorded()

    class Recording(redis.Connection):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            chunks = [command] if isinstance(command, (str, bytes)) else command
            wire = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)
            recorded.extend(parse_commands(wire))
            super().send_packed_command(command, check_health)

    pool = redis.ConnectionPool.from_url(url, connection_class=Recording)
    return RedisAgentTurnStore(redis.Redis(connection_pool=pool), namespace=namespace), recorded


def parse_commands(wire: bytes) -> list[Command]:
    """The commands in ``wire`` (RESP arrays of bulk strings, as clients send them)."""
    commands: list[Command] = []
    at = 0
    while at < len(wire):
        assert wire[at : at + 1] == b"*", wire[at : at + 20]
        end = wire.index(b"\r\n", at)
        count, at = int(wire[at + 1 : end]), end + 2
        parts: list[bytes] = []
        for _ in range(count):
            assert wire[at : at + 1] == b"$", wire[at : at + 20]
            end = wire.index(b"\r\n", at)
            size, at = int(wire[at + 1 : end]), end + 2
            parts.append(wire[at : at + size])
            at += size + 2
        commands.append((parts[0].decode(), *parts[1:]))
    return commands


def slots(keys: Sequence[bytes]) -> set[int]:
    """The cluster hash slots of ``keys``."""
    return {key_slot(k) for k in keys}
