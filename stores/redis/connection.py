"""Connecting to Redis: URLs, ACL credentials, timeouts, and errors that hide passwords."""

from __future__ import annotations

from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

from redis import Redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from runner_core.errors import StoreUnavailableError

__all__ = ["Guard", "StoreUnavailableError", "connect", "redact"]


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def connect(
    target: Redis | str,
    *,
    username: str | None = None,
    password: str | None = None,
    socket_timeout: float = 5.0,
    connect_timeout: float = 2.0,
    health_check_interval: int = 30,
) -> tuple[Redis, str]:
    """A client for ``target`` (a client is used as given) and a printable, redacted name."""
    if not isinstance(target, str):
        kwargs = target.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
        return target, f"redis://{where}/{kwargs.get('db', 0)}"
    if not target.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"not a Redis URL (redis://, rediss:// or unix://): {redact(target)}")
    extra: dict[str, object] = {}
    if username is not None:
        extra["username"] = username
    if password is not None:
        extra["password"] = password
    # A few quick retries ride out a blip or a failover (every script is safe to run
    # twice); redis-py's default (10 retries, backoff up to 10 s) would hang a worker for
    # minutes on a dead server.
    retry = Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3)
    client = Redis.from_url(
        target,
        retry=retry,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        socket_keepalive=True,
        health_check_interval=health_check_interval,
        client_name="agentworker",
        **extra,
    )
    return client, redact(target)


class Guard:
    """Turns redis-py's connection and timeout errors into ``StoreUnavailableError``."""

    __slots__ = ("url",)

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(error, RedisConnectionError | RedisTimeoutError):
            raise StoreUnavailableError(self.url, error) from error
