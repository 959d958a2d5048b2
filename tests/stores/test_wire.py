"""The store's packed exchanges on a single server: replies in place, dropped connections.

A commit and the index write after it go as one write on a pooled connection; what a
pipeline did must still hold: an error reply stands in its place, a connection the server
dropped is replaced (the commit lands once), one lost mid-exchange is sent again or given
up as the client's own commands would be, a client set to an encoding other than UTF-8
sends text as its own commands do, and a client bound to one connection keeps the pipeline.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import redis
from redis.exceptions import ResponseError

from runner_core import Commit
from stores import RedisAgentTurnStore
from stores.redis.connection import make_client
from stores.redis.wire import Wire
from tests.support.commits import save
from tests.support.dropping_proxy import DroppingProxy
from tests.support.servers import RedisServer
from tests.support.stores import snap

pytestmark = pytest.mark.redis


def test_an_error_reply_stands_in_its_place(redis_server: RedisServer, namespace: str) -> None:
    wire = Wire(redis.Redis.from_url(redis_server.url))
    key = f"{namespace}:wire"

    replies = wire.exchange([("SET", key, "text"), ("INCR", key), ("GET", key)])

    assert replies[0] == b"OK" and replies[2] == b"text"
    assert isinstance(replies[1], ResponseError) and "not an integer" in str(replies[1])


def test_a_commit_over_a_dropped_connection_lands_once(
    redis_server: RedisServer, namespace: str
) -> None:
    # Given a store whose pooled connection the server has since dropped
    store = RedisAgentTurnStore(make_client(redis_server.url), namespace=namespace)
    turn = snap()
    save(store, turn, -1)
    current = store.load(turn.id)
    admin = redis_server.client()
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1

    # When the holder commits through the pool that holds it
    result = store.commit(Commit(current, current.version, uuid.uuid4().hex))

    # Then the pool gave the exchange a new connection and the write landed once
    assert result.version == current.version + 1
    assert store.load(turn.id).version == current.version + 1


def test_a_client_in_another_encoding_packs_as_its_commands_do(
    redis_server: RedisServer, namespace: str
) -> None:
    # the text goes as the client's own commands send it (redis-py's packer decides)
    client = redis.Redis.from_url(redis_server.url, encoding="latin-1")
    ours, theirs = f"{namespace}:ours", f"{namespace}:theirs"

    Wire(client).exchange([("SET", ours, "café")])
    client.set(theirs, "café")

    raw = redis_server.client()
    assert raw.get(ours) == raw.get(theirs) is not None


def test_a_single_connection_client_keeps_the_pipeline(
    redis_server: RedisServer, namespace: str
) -> None:
    client = redis.Redis.from_url(redis_server.url, single_connection_client=True)
    store = RedisAgentTurnStore(client, namespace=namespace)
    assert not store.scripts.direct

    turn = snap()
    save(store, turn, -1)
    assert store.load(turn.id).version == 0


@pytest.mark.parametrize("drops", [1, 5])
def test_a_connection_lost_mid_exchange_goes_as_the_clients_own_commands_go(
    redis_server: RedisServer, namespace: str, drops: int
) -> None:
    # Given the store's kind of client behind a proxy that drops the connection carrying
    # a marked command, ``drops`` times in a row, before the server sees it
    def attempt(send: Callable[[redis.Redis, str], object], marker: str) -> object:
        with DroppingProxy(redis_server.port, marker.encode(), drops) as proxy:
            client = make_client(proxy.url)
            try:
                return send(client, marker)
            except redis.ConnectionError as exc:
                return type(exc)
            finally:
                client.close()

    # When one goes through the client's own command and one through the packed exchange
    theirs = attempt(lambda c, key: c.incr(key), f"{namespace}:theirs")
    ours = attempt(lambda c, key: Wire(c).exchange([("INCR", key)])[0], f"{namespace}:ours")

    # Then both fail alike, or both were sent again and ran once
    assert ours == theirs, (ours, theirs)
    raw = redis_server.client()
    assert raw.get(f"{namespace}:ours") == raw.get(f"{namespace}:theirs")
    assert ours in (1, redis.ConnectionError)
