"""Selecting a cluster: the URL, its seeds and credentials, and errors that hide passwords."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from redis.cluster import RedisCluster

from agentworker.settings import Settings
from runner_core import ConfigurationError, StoreUnavailableError
from stores import RedisAgentTurnStore
from stores.redis.connection import cluster_seeds, is_cluster, make_client, redact
from tests.support.cluster import LocalCluster, cluster_port
from tests.support.commits import save
from tests.support.stores import snap


def test_a_cluster_url_names_its_seed_nodes_and_credentials() -> None:
    seeds, options = cluster_seeds("rediss+cluster://ops:s%40cret@a:7000,b:7001,[::1]:7002/0")
    assert seeds == [("a", 7000), ("b", 7001), ("::1", 7002)]
    assert options == {"username": "ops", "password": "s@cret", "ssl": True}
    assert cluster_seeds("redis+cluster://a")[0] == [("a", 6379)]


def test_redact_hides_the_password_of_every_url_shape() -> None:
    assert redact("redis+cluster://ops:secret@a:1,b:2/0") == "redis+cluster://ops:***@a:1,b:2/0"
    assert redact("redis://:secret@h:6379/0") == "redis://:***@h:6379/0"
    assert redact("redis://h:6379/0") == "redis://h:6379/0"


@pytest.mark.parametrize(
    "url",
    [
        "redis+cluster://ops:secret@a:notaport",
        "redis+cluster://ops:secret@a:1/3",
        "redis+cluster://ops:secret@a:1?ssl_cert_reqs=none",
        "redis+cluster://ops:secret@:1",
        "ftp://ops:secret@a:1",
    ],
)
def test_a_malformed_url_is_a_configuration_error_without_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make_client(url)
    assert "secret" not in str(caught.value) and "***" in str(caught.value)


def test_an_unreachable_cluster_is_store_unavailable_without_the_password() -> None:
    url = f"redis+cluster://ops:secret@127.0.0.1:{cluster_port()}"
    with pytest.raises(StoreUnavailableError) as caught:
        RedisAgentTurnStore(url)
    assert "secret" not in str(caught.value) and "ops:***@127.0.0.1" in str(caught.value)


def test_the_broker_must_not_default_to_a_cluster() -> None:
    with pytest.raises(ValidationError, match="AGENTWORKER_BROKER_URL"):
        Settings(redis_url="redis+cluster://a:7000")
    with pytest.raises(ValidationError, match="does not speak Cluster"):
        Settings(redis_url="redis+cluster://a:7000", broker_url="redis+cluster://a:7000")
    assert Settings(redis_url="redis+cluster://a:7000", broker_url="amqp://h//").broker


def test_the_store_takes_a_cluster_url_or_a_cluster_client(
    redis_cluster: LocalCluster, namespace: str
) -> None:
    by_url = RedisAgentTurnStore(redis_cluster.url, namespace=namespace)
    assert is_cluster(by_url.redis) and by_url.scripts.cluster
    s = snap()
    save(by_url, s, -1)
    client = RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    given = RedisAgentTurnStore(client, namespace=namespace)  # type: ignore[arg-type]
    assert given.load(s.id).id == s.id
    assert given.url.startswith("redis+cluster://127.0.0.1:")
    given.close()
    by_url.close()
