"""Commands sent as one write on a pooled connection, their replies read back in order.

The store's hot path (a commit: the script and the index write after it) needs neither
redis-py's pipeline object nor its per-command bookkeeping: it packs the commands once
(with hiredis when it is there), writes them on a connection of the client's pool, and
reads one reply per command. What a pipeline gives that matters is kept: the
connection's retry policy (a connection lost mid-exchange is closed and the whole exchange
sent again where the client's own commands would be; every script of the store is safe
to run twice), error replies returned in their place instead of raised, and the
connection back in the pool whatever happens. Replies come as the connection parses
them (redis-py's response callbacks are not applied; the callers read raw replies), and
redis-py's own command metrics do not see these exchanges.

A client bound to one connection (``single_connection_client``) or a cluster client has
no pool connection to borrow: ``Wire.usable`` is False and the callers keep the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis
from redis import __version__ as redis_version
from redis.exceptions import ResponseError

from stores.redis.codec import Arg

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _pack
except ImportError:  # an optional speed-up (the [redis] extra brings it)
    _pack = None

_LISTED_ONLY = int(redis_version.split(".")[0]) < 6

#: hiredis encodes text as UTF-8, strictly: a client set to anything else packs its own way.
_UTF8 = ("utf-8", "utf8", "UTF-8")


class Wire:
    """One round trip of packed commands on the connection pool of ``redis``."""

    def __init__(self, redis: Redis) -> None:
        pool = getattr(redis, "connection_pool", None)
        self.usable = pool is not None and getattr(redis, "connection", None) is None
        self._pool = pool

    def exchange(self, commands: Sequence[Sequence[Arg | int]]) -> list[Any]:
        """Send ``commands`` in one write; every reply, an error reply as its exception."""
        pool = self._pool
        assert pool is not None and self.usable, "Wire.exchange needs a pooled client"
        conn = pool.get_connection()
        try:
            return conn.retry.call_with_retry(  # type: ignore[no-any-return]
                lambda: _send_and_read(conn, commands), lambda error: _failed(conn, error)
            )
        finally:
            pool.release(conn)


def _failed(conn: Any, error: Exception) -> None:
    """Before a retry: close the connection; give up where redis-py's own commands would.

    redis-py before 6 retries only the errors a connection lists in ``retry_on_error``;
    from 6 on, the retry policy's own errors.
    """
    conn.disconnect()
    if _LISTED_ONLY and not isinstance(error, tuple(conn.retry_on_error or ())):
        raise error


def _packed(conn: Any, commands: Sequence[Sequence[Arg | int]]) -> list[bytes]:
    """The commands in the wire format: by hiredis in one go, else by the connection."""
    encoder = conn.encoder
    if _pack is None or encoder.encoding not in _UTF8 or encoder.encoding_errors != "strict":
        return conn.pack_commands(commands)  # type: ignore[no-any-return]
    return [b"".join([_pack(c if isinstance(c, tuple) else tuple(c)) for c in commands])]


def _send_and_read(conn: Any, commands: Sequence[Sequence[Arg | int]]) -> list[Any]:
    conn.send_packed_command(_packed(conn, commands))
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(conn.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies
