"""Settings of workers, beat and producers, from ``AGENTWORKER_*`` environment variables."""

from __future__ import annotations

import importlib
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from runner_core import Agent, AgentLimits, AgentLoader, ConfigurationError
from runner_core.errors import shorten
from runner_core.worker import step_grace

SOFT_LIMIT_MARGIN = 1.0
"""Celery's soft time limit comes this long after the lease backstop of a task's last step."""
HARD_LIMIT_MARGIN = 2.0
"""Celery's hard time limit comes this long after its soft one (time to unwind and release)."""

MISSING_LOADER = (
    "AGENTWORKER_AGENT_LOADER is not set: set it to 'package.module:attribute' naming your "
    "AgentLoader (or a function returning one), e.g. my_agents:loader"
)


class Settings(BaseSettings):
    """Everything a worker, the sweeper and a producer need to agree on."""

    #: No setting is infinite or NaN: a sweep every inf seconds is a typo, not a schedule.
    model_config = SettingsConfigDict(
        env_prefix="AGENTWORKER_", extra="ignore", populate_by_name=True, allow_inf_nan=False
    )

    #: The Redis holding the turns (the single source of truth).
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: The Celery broker; defaults to ``redis_url``. ``amqp://`` works too.
    broker_url: str | None = None
    #: Key prefix, so several deployments can share one Redis.
    namespace: str = "agentworker"
    #: Buckets of the store's global partition sets (1 to 256), each in its own hash slot
    #: of a Redis Cluster; every process of a deployment uses the same value.
    partition_buckets: int = Field(default=16, ge=1, le=256)
    #: Ended turns are deleted this many seconds after they ended, by the housekeeping
    #: task; 0 keeps them forever.
    retention_seconds: float = Field(default=7 * 24 * 3600.0, ge=0)
    #: How often beat sends the housekeeping task (retention and partition pruning).
    housekeeping_interval: float = Field(default=300.0, gt=0)
    #: ``package.module:attribute``: an AgentLoader, or a function returning one. No
    #: default: a worker never serves agents nobody chose.
    agent_loader: str | None = None
    #: Lease length; a heartbeat renews it every third of it while a step runs.
    lease_seconds: float = Field(default=30.0, gt=0)
    #: How often beat runs the sweeper.
    sweep_interval: float = Field(default=1.0, gt=0)
    #: A runnable turn that nobody serves this long, and whose wake-up is not known to be
    #: queued, is presumed to have lost its wake-up.
    lost_wakeup_seconds: float = Field(default=10.0, gt=0)
    #: How long a queued wake-up is trusted before the sweeper sends another.
    requeue_after_seconds: float = Field(default=300.0, gt=0)
    #: How long a turn may wait for a worker that can load its agent version (a rolling
    #: deploy) before it is failed.
    unloadable_grace_seconds: float = Field(default=600.0, ge=0)
    #: Seconds one step may take: its tool and async model calls stop at that deadline (the
    #: model is told), and a step still running ``step_grace_seconds`` later loses its lease
    #: to another worker. On prefork Celery's soft and hard limits come after both.
    step_time_limit: float = Field(default=300.0, gt=0)
    #: A step task goes on with the next step of its turn while the turn can run at once
    #: and less than this many seconds have passed since it began (each step claimed and
    #: committed on its own); 0: one step per message.
    step_chain_seconds: float = Field(default=0.1, ge=0, le=60)
    #: Redis-broker visibility timeout; must exceed the step time limit on ``redis://``.
    visibility_timeout: float = Field(default=3600.0, gt=0)
    #: RabbitMQ's ``consumer_timeout`` on the broker in use, in seconds (its default: 30
    #: minutes): a delivery unacked longer closes the channel. Must exceed the step time
    #: limit on ``amqp://``; set it to what the broker is configured with.
    broker_consumer_timeout: float = Field(default=1800.0, gt=0)
    step_queue: str = "agentworker.steps"
    sweep_queue: str = "agentworker.sweep"
    #: RabbitMQ queue type of both queues: ``classic``, or ``quorum`` (replicated, durable;
    #: Celery 5.5+). A broker refuses to change the type of an existing queue.
    queue_type: Literal["classic", "quorum"] = "classic"
    #: Append every event to a Redis Stream per turn tree (``AGENTWORKER_EVENTS``).
    events_enabled: bool = Field(default=True, validation_alias="AGENTWORKER_EVENTS")
    #: HMAC-SHA256 secret of signed calls to the HTTP API (webhooks).
    webhook_secret: SecretStr | None = None
    #: Bearer token of the HTTP API: required for reads, an alternative to signing.
    api_token: SecretStr | None = None
    #: How far a signed call's timestamp may be from the server's clock, in seconds.
    webhook_window_seconds: float = Field(default=300.0, gt=0)
    #: The HTTP API's credentials, JSON: ``[{"token" | "secret": ..., "tenant": ...,
    #: "scopes": ["read", "write", "approve"]}, ...]`` (docs/http.md, Authentication).
    credentials: SecretStr | None = None
    #: Largest request body the HTTP API reads (413 beyond it, before reading it).
    http_max_body_bytes: int = Field(default=1_048_576, gt=0)
    #: Largest ``input`` of a new turn, in characters (422 beyond it).
    http_max_input_chars: int = Field(default=200_000, gt=0)
    #: Largest ``metadata`` of a start or resume, as compact JSON bytes (422 beyond it).
    http_max_metadata_bytes: int = Field(default=16_384, gt=0)
    #: Failed credentials a client address may present per minute before the HTTP API and
    #: the console's sign-in answer it 429 (per process); 0: no limit.
    http_auth_failures_per_minute: int = Field(default=30, ge=0)
    #: How long the HTTP API waits for the rest of an announced body (408 after it).
    http_body_timeout_seconds: float = Field(default=30.0, gt=0)
    #: How long a request id or ``Idempotency-Key`` is remembered with its answer.
    http_idempotency_seconds: int = Field(default=86_400, gt=0)
    #: Outbound webhooks, JSON: ``[{"url": ..., "secret": "whsec_...", "agent"?: ...,
    #: "tenant"?: ..., "events"?: [...]}, ...]`` (docs/webhooks.md).
    webhooks: SecretStr | None = None
    #: Delivery attempts of one outbound webhook before it is dead-lettered.
    webhook_max_attempts: int = Field(default=8, ge=1)
    #: Signs the webhooks given on ``POST /turns`` (``whsec_<base64>``); none: refused.
    webhook_start_secret: SecretStr | None = None
    #: Backoff of webhook retries: first delay and cap, seconds (tenacity, doubling).
    webhook_retry_initial_seconds: float = Field(default=5.0, gt=0)
    webhook_retry_max_seconds: float = Field(default=900.0, gt=0)
    #: How long one delivery may take (connect and answer), seconds.
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    #: A worker serves Prometheus metrics of all its processes on this port (unset: none).
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    #: The address the metrics port listens on.
    metrics_addr: str = "127.0.0.1"
    #: Prices per model for the console's cost column: a JSON object, or the path of a
    #: JSON file, mapping a model name to USD per million tokens, e.g.
    #: ``{"gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10}}`` (docs/console.md).
    prices: str | None = None
    #: ``json``: workers, beat and the HTTP app log one JSON object per line.
    log_format: Literal["text", "json"] = "text"
    #: The library's size limits (docs/limits.md), in bytes: a new turn's input; the
    #: messages of its ``history=`` (how many, and their bytes); the metadata of a start or
    #: resume (and a cancel or reject reason); a resume's data; one tool result; one model
    #: answer.
    max_input_bytes: int = Field(default=1_048_576, gt=0)
    max_history_messages: int = Field(default=1_000, gt=0)
    max_history_bytes: int = Field(default=8_388_608, gt=0)
    max_metadata_bytes: int = Field(default=65_536, gt=0)
    max_resume_data_bytes: int = Field(default=1_048_576, gt=0)
    max_tool_result_bytes: int = Field(default=1_048_576, gt=0)
    max_model_answer_bytes: int = Field(default=1_048_576, gt=0)
    #: A tool result or model answer over its limit: ``truncate`` (cut, with a marker) or
    #: ``fail`` (an error of the call; a model's fails the turn).
    oversized_output: Literal["truncate", "fail"] = "truncate"

    @property
    def limits(self) -> AgentLimits:
        """The ``AGENTWORKER_MAX_*`` limits as the runner's ``AgentLimits``."""
        return AgentLimits(
            max_input_bytes=self.max_input_bytes,
            max_history_messages=self.max_history_messages,
            max_history_bytes=self.max_history_bytes,
            max_metadata_bytes=self.max_metadata_bytes,
            max_resume_data_bytes=self.max_resume_data_bytes,
            max_tool_result_bytes=self.max_tool_result_bytes,
            max_model_answer_bytes=self.max_model_answer_bytes,
            oversized_output=self.oversized_output,
        )

    @property
    def step_grace_seconds(self) -> float:
        """How long a step may run past its deadline before its lease is cut."""
        return step_grace(self.step_time_limit)

    @property
    def task_soft_time_limit(self) -> float:
        """Celery's soft limit of one step task: after its last step's lease backstop.

        A chain's last step starts before ``step_chain_seconds`` have passed, so its deadline
        and grace end before this; a ``SoftTimeLimitExceeded`` then finds the lease already
        cut, and the step's writes fenced: it never fails the turn.
        """
        backstop = self.step_time_limit + self.step_chain_seconds + self.step_grace_seconds
        return backstop + SOFT_LIMIT_MARGIN

    @property
    def task_time_limit(self) -> float:
        """Celery's hard limit of one step task (prefork kills the child): the last resort."""
        return self.task_soft_time_limit + HARD_LIMIT_MARGIN

    @model_validator(mode="after")
    def _limits_in_order(self) -> Settings:
        check_broker_limits(self)
        return self

    @model_validator(mode="after")
    def _broker_beside_a_cluster(self) -> Settings:
        if self.redis_url.partition("://")[0].lower() in ("redis+cluster", "rediss+cluster"):
            if self.broker_url is None or "+cluster://" in self.broker_url.lower():
                raise ValueError(
                    "AGENTWORKER_REDIS_URL names a Redis Cluster: set AGENTWORKER_BROKER_URL "
                    "to a standalone Redis or RabbitMQ (kombu's Redis transport does not "
                    "speak Cluster)"
                )
        return self

    @property
    def broker(self) -> str:
        """The broker URL actually used."""
        return self.broker_url or self.redis_url

    def load_agent_loader(self) -> AgentLoader:
        """Import the configured loader (an instance, or a callable returning one)."""
        if not self.agent_loader:
            raise ConfigurationError(MISSING_LOADER)
        return import_loader(self.agent_loader)


AMQP_SCHEMES = ("amqp", "amqps", "pyamqp", "librabbitmq")


def is_amqp(broker_url: str) -> bool:
    """Whether ``broker_url`` names a RabbitMQ (AMQP 0-9-1) broker."""
    return broker_url.partition("://")[0].lower() in AMQP_SCHEMES


class BrokerLimitError(ConfigurationError):
    """Raised when a step may run longer than the broker holds its message unacked.

    ``fields`` names the two settings; ``broker`` is ``amqp`` or ``redis``.
    """

    def __init__(self, broker: str, limit_field: str, limit: float, step: float) -> None:
        consequence = (
            "or RabbitMQ closes the channel of a step still running and redelivers it"
            if broker == "amqp"
            else "or the broker redelivers steps that are still running"
        )
        super().__init__(
            f"AGENTWORKER_STEP_TIME_LIMIT plus AGENTWORKER_STEP_CHAIN_SECONDS and the step "
            f"task's grace ({step:g} s, Celery's hard time limit) must be below "
            f"AGENTWORKER_{limit_field.upper()} ({limit:g} s) on a {broker} broker, {consequence}"
        )
        self.broker = broker
        self.fields = ("step_time_limit", limit_field)


def check_broker_limits(settings: Settings) -> None:
    """Celery's hard time limit against the limit of the broker in use; quorum on AMQP only.

    RabbitMQ closes a channel whose delivery stays unacked past its ``consumer_timeout``;
    the Redis transport hands a message unacked past ``visibility_timeout`` to another
    worker. Each broker is checked against its own limit only.
    """
    step = settings.task_time_limit
    if is_amqp(settings.broker):
        if not step < settings.broker_consumer_timeout:
            raise BrokerLimitError(
                "amqp", "broker_consumer_timeout", settings.broker_consumer_timeout, step
            )
        return
    if settings.queue_type != "classic":
        raise ConfigurationError(
            f"AGENTWORKER_QUEUE_TYPE={settings.queue_type} needs a RabbitMQ broker "
            "(amqp://); the Redis broker has one kind of queue"
        )
    if not step < settings.visibility_timeout:
        raise BrokerLimitError("redis", "visibility_timeout", settings.visibility_timeout, step)


class UnsetAgentLoader:
    """Stands in for a missing loader where reading turns needs none (the CLI)."""

    def load(self, agent_id: str, version: str | None = None) -> Agent:
        """Raise ``ConfigurationError`` saying what to set."""
        raise ConfigurationError(f"cannot load agent {shorten(agent_id)}: {MISSING_LOADER}")


def import_loader(path: str) -> AgentLoader:
    """Resolve ``package.module:attribute`` to an AgentLoader."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"AGENTWORKER_AGENT_LOADER={path!r}: expected 'package.module:attribute'"
        )
    try:
        target: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"AGENTWORKER_AGENT_LOADER={path!r}: {exc}") from exc
    loader = target if hasattr(target, "load") else target()
    if not hasattr(loader, "load"):
        raise ConfigurationError(f"AGENTWORKER_AGENT_LOADER={path!r} is not an AgentLoader")
    return loader  # type: ignore[no-any-return]


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


def problems(exc: ValidationError) -> str:
    """One line naming each invalid ``AGENTWORKER_*`` setting."""
    return "; ".join(_problem(e["loc"], e["msg"]) for e in exc.errors())


def _problem(loc: tuple[int | str, ...], message: str) -> str:
    name = "AGENTWORKER_" + "_".join(str(p) for p in loc).upper()
    return f"{name}: {message}" if loc else message
