"""Connecting to Redis or a Redis Cluster: one client factory, credentials, timeouts, errors.

Every part of agentworker that talks to the store's Redis (the store, chat memory, event
streams, the CLI, the HTTP API, beat's sweep gate) builds its client here, from a URL:

* ``redis://``, ``rediss://``, ``unix://``: one Redis server (``redis.Redis``).
* ``redis+cluster://[user:password@]host:port[,host:port...]`` (``rediss+cluster://`` for
  TLS): a Redis Cluster (``redis.cluster.RedisCluster``), reached through any of the listed
  seed nodes; it discovers the others and follows MOVED/ASK itself. A cluster has only
  database 0, so the URL has no path other than ``/`` or ``/0``, and no query.

Cluster clients are typed as ``Redis``: they answer the same single-slot commands, which
are the only ones the callers send (the store routes its script calls itself).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, cast
from urllib.parse import unquote

from redis import Redis
from redis import asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import SSLConnection
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    DataError,
    MasterDownError,
    RedisClusterException,
    SlotNotCoveredError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from runner_core.errors import ConfigurationError, StoreUnavailableError

try:
    import hiredis
except ImportError:  # an optional speed-up of redis-py (the [redis] extra brings it)
    hiredis = None  # type: ignore[assignment]

__all__ = [
    "CLUSTER_SCHEMES",
    "Guard",
    "StoreUnavailableError",
    "async_client",
    "async_retry",
    "async_twin",
    "connect",
    "is_cluster",
    "is_cluster_url",
    "make_client",
    "redact",
]

#: URL schemes that select a Redis Cluster client.
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
_PLAIN_SCHEMES = ("redis", "rediss", "unix")


def redact(url: str) -> str:
    """The URL with its password replaced by ``***`` (cluster URLs with several hosts too)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{hosts}{slash}{tail}"


def is_cluster_url(url: str) -> bool:
    """True for a ``redis+cluster://`` or ``rediss+cluster://`` URL."""
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def is_cluster(client: object) -> bool:
    """True for a Redis Cluster client (sync or asyncio)."""
    return isinstance(client, RedisCluster | AsyncRedisCluster)


def _retry() -> Retry:
    # A few quick retries ride out a blip or a failover (every script is safe to run
    # twice); redis-py's default (10 retries, backoff up to 10 s) would hang a worker for
    # minutes on a dead server.
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3)


#: The TLS settings of a sync connection that an asyncio one takes too.
_ASYNC_SSL_OPTIONS = (
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_data",
    "ssl_check_hostname",
    "ssl_min_version",
    "ssl_ciphers",
    "ssl_password",
)


def async_retry() -> AsyncRetry:
    """The asyncio twin of the sync clients' retry: a few quick tries, then an error."""
    return AsyncRetry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3)


def async_twin(client: Redis) -> Any:
    """An asyncio client for the server and database of the sync ``client``."""
    kwargs = client.connection_pool.connection_kwargs
    options: dict[str, Any] = {
        key: kwargs[key]
        for key in ("host", "port", "db", "username", "password", "client_name")
        if kwargs.get(key) is not None
    }
    if kwargs.get("path"):
        options["unix_socket_path"] = kwargs["path"]
    if issubclass(client.connection_pool.connection_class, SSLConnection):
        options["ssl"] = True
        options.update({k: kwargs[k] for k in _ASYNC_SSL_OPTIONS if kwargs.get(k) is not None})
    for key in ("socket_timeout", "socket_connect_timeout"):
        options[key] = kwargs.get(key, 5.0)
    return packing_with_hiredis(aioredis.Redis(retry=async_retry(), **options))


class _HiredisPacking:
    """Packs commands with hiredis, as redis-py's sync connections do.

    redis.asyncio packs in Python, several times slower for the long argument lists of the
    store's scripts (a commit sends dozens of arguments), and that time is spent on the
    caller's event loop.
    """

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as exc:
            raise DataError(str(exc)) from exc


class _PackedConnection(_HiredisPacking, aioredis.Connection):
    """``redis.asyncio.Connection`` packing with hiredis."""


class _PackedSSLConnection(_HiredisPacking, aioredis.SSLConnection):
    """``redis.asyncio.SSLConnection`` packing with hiredis."""


class _PackedUnixConnection(_HiredisPacking, aioredis.UnixDomainSocketConnection):
    """``redis.asyncio.UnixDomainSocketConnection`` packing with hiredis."""


_PACKED: dict[type[Any], type[Any]] = {
    aioredis.Connection: _PackedConnection,
    aioredis.SSLConnection: _PackedSSLConnection,
    aioredis.UnixDomainSocketConnection: _PackedUnixConnection,
}


def packing_with_hiredis(client: Any) -> Any:
    """``client`` (a ``redis.asyncio.Redis``) packing its commands with hiredis, if installed."""
    if hiredis is None:
        return client
    pool = client.connection_pool
    pool.connection_class = _PACKED.get(pool.connection_class, pool.connection_class)
    return client


def _credentials(username: str | None, password: str | None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if username is not None:
        extra["username"] = username
    if password is not None:
        extra["password"] = password
    return extra


def cluster_seeds(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The seed nodes of a cluster URL and the client options it carries (credentials, TLS).

    Raises ``ConfigurationError`` naming the (redacted) URL when it is malformed.
    """
    shown = redact(url)
    scheme, _, rest = url.partition("://")
    netloc, _, path = rest.partition("/")
    if "?" in netloc or "#" in netloc or "?" in path or "#" in path:
        raise ConfigurationError(f"a cluster URL takes no query or fragment: {shown}")
    if path not in ("", "0"):
        raise ConfigurationError(f"a Redis Cluster has only database 0, not /{path}: {shown}")
    userinfo, at, hosts = netloc.rpartition("@")
    options: dict[str, Any] = {}
    if at:
        user, colon, password = userinfo.partition(":")
        if user:
            options["username"] = unquote(user)
        if colon:
            options["password"] = unquote(password)
    if scheme.lower() == "rediss+cluster":
        options["ssl"] = True
    seeds: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, port = _host_port(item.strip(), shown)
        seeds.append((host, port))
    return seeds, options


def _host_port(item: str, shown: str) -> tuple[str, int]:
    if item.startswith("["):
        host, _, port_text = item[1:].partition("]")
        port_text = port_text.removeprefix(":")
    elif ":" in item:
        host, _, port_text = item.rpartition(":")
    else:
        host, port_text = item, ""
    if not host:
        raise ConfigurationError(f"a cluster URL needs host:port for every node: {shown}")
    try:
        port = int(port_text) if port_text else 6379
    except ValueError:
        raise ConfigurationError(f"bad port {port_text!r} in cluster URL {shown}") from None
    if not 0 < port < 65536:
        raise ConfigurationError(f"bad port {port} in cluster URL {shown}")
    return host, port


def _check_plain(url: str) -> None:
    if url.partition("://")[0].lower() not in _PLAIN_SCHEMES or "://" not in url:
        raise ConfigurationError(
            "not a Redis URL (redis://, rediss://, unix://, or redis+cluster://host:port,... "
            f"for a Redis Cluster): {redact(url)}"
        )


def make_client(
    url: str,
    *,
    username: str | None = None,
    password: str | None = None,
    socket_timeout: float = 5.0,
    connect_timeout: float = 2.0,
    health_check_interval: int = 30,
    retry: Retry | None = None,
) -> Redis:
    """A client for ``url``: ``Redis``, or ``RedisCluster`` for a cluster URL (see above).

    Raises ``ConfigurationError`` for a malformed URL and ``StoreUnavailableError`` when no
    node of a cluster answers (a cluster client reads the slot map when it is built).
    """
    options: dict[str, Any] = {
        "retry": retry or _retry(),
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": health_check_interval,
        "client_name": "agentworker",
        **_credentials(username, password),
    }
    if not is_cluster_url(url):
        _check_plain(url)
        try:
            return Redis.from_url(url, **options)
        except ValueError as exc:
            raise ConfigurationError(f"bad Redis URL {redact(url)}: {exc}") from None
    seeds, from_url = cluster_seeds(url)
    nodes = [ClusterNode(host, port) for host, port in seeds]  # type: ignore[no-untyped-call]
    try:
        client = RedisCluster(startup_nodes=nodes, **{**from_url, **options})
    except (RedisClusterException, RedisConnectionError, RedisTimeoutError) as exc:
        raise StoreUnavailableError(redact(url), exc) from exc
    return cast(Redis, client)


def async_client(
    url: str,
    *,
    socket_timeout: float = 5.0,
    connect_timeout: float = 2.0,
    username: str | None = None,
    password: str | None = None,
    retry: AsyncRetry | None = None,
) -> Any:
    """An asyncio client for ``url`` (``redis.asyncio`` Redis or RedisCluster).

    Returned as ``Any`` so that callers typed for ``redis.asyncio.Redis`` accept both; a
    cluster client connects on its first command. ``retry``: redis-py's default if None.
    """
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "client_name": "agentworker",
        **_credentials(username, password),
    }
    if retry is not None:
        options["retry"] = retry
    if not is_cluster_url(url):
        _check_plain(url)
        return packing_with_hiredis(aioredis.Redis.from_url(url, **options))
    seeds, from_url = cluster_seeds(url)
    from redis.asyncio.cluster import ClusterNode as AsyncClusterNode

    nodes = [AsyncClusterNode(host, port) for host, port in seeds]
    return AsyncRedisCluster(startup_nodes=nodes, **{**from_url, **options})


def describe(client: Redis) -> str:
    """A printable name of a client: ``redis://host:port/db`` or ``redis+cluster://nodes``."""
    if is_cluster(client):
        cluster = cast(RedisCluster, client)
        primaries = cluster.get_primaries()  # type: ignore[no-untyped-call]
        nodes = ",".join(f"{n.host}:{n.port}" for n in primaries)
        return f"redis+cluster://{nodes}"
    kwargs = client.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return f"redis://{where}/{kwargs.get('db', 0)}"


def connect(
    target: Redis | RedisCluster | str,
    *,
    username: str | None = None,
    password: str | None = None,
    socket_timeout: float = 5.0,
    connect_timeout: float = 2.0,
    health_check_interval: int = 30,
) -> tuple[Redis, str]:
    """A client for ``target`` (a client is used as given) and a printable, redacted name."""
    if not isinstance(target, str):
        client = cast(Redis, target)
        return client, describe(client)
    client = make_client(
        target,
        username=username,
        password=password,
        socket_timeout=socket_timeout,
        connect_timeout=connect_timeout,
        health_check_interval=health_check_interval,
    )
    return client, redact(target)


class Guard:
    """Turns connection, timeout and cluster-down errors into ``StoreUnavailableError``."""

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
        unavailable = (
            RedisConnectionError,
            RedisTimeoutError,
            ClusterDownError,
            ClusterError,
            MasterDownError,
            SlotNotCoveredError,
        )
        if isinstance(error, unavailable):
            raise StoreUnavailableError(self.url, error) from error
