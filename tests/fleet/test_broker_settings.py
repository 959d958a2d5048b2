"""Settings and Celery configuration per broker: limits, queues, confirms, the pool."""

from __future__ import annotations

import time
from typing import Any

import pytest
from amqp.exceptions import PreconditionFailed

import agentworker.fleet.queues as queues
from agentworker.fleet.app import app_from_environment
from agentworker.fleet.queues import QueueTypeMismatchError, default_pool, mismatch, task_queues
from agentworker.settings import BrokerLimitError, Settings
from agentworker.wiring import celery_config
from runner_core import ConfigurationError

REDIS = "redis://127.0.0.1:6379/1"
AMQP = "amqp://guest:guest@127.0.0.1:5672//"


def settings(broker: str, **values: Any) -> Settings:
    return Settings(redis_url="redis://127.0.0.1:6379/0", broker_url=broker, **values)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STEP_TIME_LIMIT", "VISIBILITY_TIMEOUT", "BROKER_CONSUMER_TIMEOUT"):
        monkeypatch.delenv(f"AGENTWORKER_{name}", raising=False)
    monkeypatch.delenv("AGENTWORKER_QUEUE_TYPE", raising=False)


def test_redis_checks_the_visibility_timeout_and_names_both_fields() -> None:
    with pytest.raises(BrokerLimitError) as caught:
        settings(REDIS, step_time_limit=3600, visibility_timeout=3600)
    assert caught.value.fields == ("step_time_limit", "visibility_timeout")
    assert caught.value.broker == "redis"
    assert "AGENTWORKER_VISIBILITY_TIMEOUT (3600 s)" in str(caught.value)
    assert isinstance(caught.value, ConfigurationError)


def test_redis_ignores_the_consumer_timeout() -> None:
    s = settings(REDIS, step_time_limit=2000, broker_consumer_timeout=1800)
    assert s.step_time_limit == 2000


def test_amqp_checks_the_consumer_timeout_and_names_both_fields() -> None:
    with pytest.raises(BrokerLimitError) as caught:
        settings(AMQP, step_time_limit=1800)  # the default consumer_timeout: 30 minutes
    assert caught.value.fields == ("step_time_limit", "broker_consumer_timeout")
    assert caught.value.broker == "amqp"
    assert "AGENTWORKER_BROKER_CONSUMER_TIMEOUT (1800 s)" in str(caught.value)
    assert "RabbitMQ closes the channel" in str(caught.value)


def test_amqp_ignores_the_visibility_timeout() -> None:
    s = settings(AMQP, step_time_limit=5000, visibility_timeout=60, broker_consumer_timeout=7200)
    assert s.step_time_limit == 5000


@pytest.mark.parametrize("scheme", ["amqp", "amqps", "pyamqp"])
def test_every_amqp_scheme_is_checked_as_rabbitmq(scheme: str) -> None:
    with pytest.raises(BrokerLimitError, match="amqp broker"):
        settings(f"{scheme}://h//", step_time_limit=2000, visibility_timeout=9000)


def test_the_broker_defaults_to_the_store_url_and_is_checked_as_redis() -> None:
    with pytest.raises(BrokerLimitError, match="redis broker"):
        Settings(redis_url="redis://h:1/0", broker_url=None, step_time_limit=4000)


def test_quorum_queues_need_rabbitmq() -> None:
    with pytest.raises(ConfigurationError, match="AGENTWORKER_QUEUE_TYPE=quorum needs a Rabbit"):
        settings(REDIS, queue_type="quorum")


def test_an_unknown_queue_type_is_refused() -> None:
    with pytest.raises(ValueError, match="queue_type"):
        settings(AMQP, queue_type="stream")


def test_invalid_limits_from_the_environment_exit_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTWORKER_BROKER_URL", AMQP)
    monkeypatch.setenv("AGENTWORKER_STEP_TIME_LIMIT", "3600")
    with pytest.raises(SystemExit) as caught:
        app_from_environment()
    message = str(caught.value)
    assert message.startswith("agentworker: invalid settings: AGENTWORKER_STEP_TIME_LIMIT")
    assert "AGENTWORKER_BROKER_CONSUMER_TIMEOUT" in message and "\n" not in message


def test_redis_config_has_the_visibility_timeout_and_no_confirms() -> None:
    config = celery_config(settings(REDIS, visibility_timeout=900, step_time_limit=60))
    assert config["broker_transport_options"] == {"visibility_timeout": 900}


def test_amqp_config_confirms_publishes() -> None:
    config = celery_config(settings(AMQP))
    assert config["broker_transport_options"] == {"confirm_publish": True}


def test_classic_queues_are_durable_with_their_own_direct_exchange() -> None:
    steps, sweeps = celery_config(settings(AMQP))["task_queues"]
    assert (steps.name, sweeps.name) == ("agentworker.steps", "agentworker.sweep")
    for queue in (steps, sweeps):
        assert queue.durable and not queue.auto_delete and not queue.exclusive
        assert queue.exchange.name == queue.name == queue.routing_key
        assert queue.exchange.type == "direct"
        # no argument: a queue declared before this option existed stays equivalent
        assert not queue.queue_arguments


def test_quorum_queues_carry_the_queue_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queues, "celery_version", lambda: (5, 5))
    config = celery_config(settings(AMQP, queue_type="quorum"))
    for queue in config["task_queues"]:
        assert queue.queue_arguments == {"x-queue-type": "quorum"}
        assert queue.durable and queue.max_priority is None
    assert config["worker_detect_quorum_queues"] is True


def test_quorum_queues_are_refused_below_celery_5_5(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queues.celery, "__version__", "5.4.0")
    with pytest.raises(ConfigurationError, match="needs Celery 5.5 or newer"):
        task_queues("s", "w", "quorum")
    assert len(task_queues("s", "w", "classic")) == 2


@pytest.mark.parametrize(
    ("received", "current", "expected"),
    [
        ("none", "the value 'quorum' of type 'longstr'", "quorum"),
        ("the value 'quorum' of type 'longstr'", "none", "classic"),
        ("'quorum'", "'classic'", "classic"),
    ],
)
def test_a_queue_type_mismatch_becomes_a_typed_error(
    received: str, current: str, expected: str
) -> None:
    text = (
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue "
        f"'agentworker.steps' in vhost 'prod': received {received} but current is {current}"
    )
    error = mismatch(PreconditionFailed(text, (50, 10), 406), "whatever")
    assert isinstance(error, QueueTypeMismatchError)
    assert isinstance(error, ConfigurationError)
    assert (error.queue, error.vhost, error.current) == ("agentworker.steps", "prod", expected)
    assert "rabbitmqctl delete_queue -p prod agentworker.steps" in str(error)
    assert f"AGENTWORKER_QUEUE_TYPE={expected}" in str(error)


def test_other_precondition_failures_are_not_translated() -> None:
    other = PreconditionFailed("inequivalent arg 'durable' for queue 'q'", (50, 10), 406)
    assert mismatch(other, "classic") is None
    assert mismatch(RuntimeError("x-queue-type"), "classic") is None


def test_the_pool_suits_the_broker() -> None:
    assert default_pool(AMQP) == "prefork"
    assert default_pool("amqps://h//") == "prefork"
    assert default_pool(REDIS) == "solo"


def test_declaring_at_start_leaves_an_unreachable_broker_to_celery() -> None:
    from agentworker.fleet.queues import declare_queues
    from agentworker.wiring import create_app
    from tests.support.servers import free_port

    app = create_app(settings(f"amqp://guest:guest@127.0.0.1:{free_port()}//"))
    started = time.monotonic()
    declare_queues(app, "classic")  # no error: Celery's own connection retries take over
    assert time.monotonic() - started < 2.0


def test_declaring_at_start_is_for_amqp_only() -> None:
    from agentworker.fleet.queues import declare_queues
    from agentworker.wiring import create_app

    app = create_app(settings("redis://127.0.0.1:1/0"))
    declare_queues(app, "classic")  # never connects


def test_celery_limits_come_after_the_runners_deadline_and_backstop() -> None:
    s = settings(REDIS, step_time_limit=60, step_chain_seconds=0.5, visibility_timeout=900)
    config = celery_config(s)
    backstop = 60 + 0.5 + s.step_grace_seconds
    assert s.step_grace_seconds == 2.0
    assert config["task_soft_time_limit"] > backstop
    assert config["task_time_limit"] > config["task_soft_time_limit"]
    assert config["task_time_limit"] == s.task_time_limit < 900


def test_the_broker_check_counts_celerys_hard_limit_not_the_step_alone() -> None:
    # 3597 s of step fits under the hour, its hard limit (after grace and margins) does not
    with pytest.raises(BrokerLimitError) as caught:
        settings(REDIS, step_time_limit=3597, visibility_timeout=3600)
    assert "Celery's hard time limit" in str(caught.value)


def test_the_workers_runner_gets_the_step_time_limit() -> None:
    from agentworker.wiring import create_app, make_runner

    s = settings(REDIS, step_time_limit=42, agent_loader="tests.support.fleet_agents:loader")
    runner = make_runner(s, create_app(s))
    assert runner.kernel.step_time_limit == 42
    assert runner._keeper.step_time_limit == 42
