"""Prometheus metrics of turns and of the fleet (names and labels: docs/observability.md).

Every label has a bounded set of values (outcomes, statuses, agent ids, model and tool
names, queue names); no turn id is ever a label. ``prometheus_client`` is optional: without
it every recording function does nothing. In a prefork worker each process writes its own
files under ``PROMETHEUS_MULTIPROC_DIR`` and the port of the main process serves their sum
(``serve``); the metric objects are therefore built on first use, after that variable is
set.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner_core import AgentTurn, AgentTurnStatus, Middleware, ToolCall, ToolMessage
from runner_core.models.base import ModelRequest, ModelResponse
from runner_core.telemetry import model_name

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from runner_core.store import AgentTurnStore

log = logging.getLogger("agentworker.metrics")

#: The multiprocess directory variable of ``prometheus_client``.
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
_LATENCY = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_CALLS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def available() -> bool:
    """Whether ``prometheus_client`` is installed (without importing it)."""
    return importlib.util.find_spec("prometheus_client") is not None


def use_multiprocess_values() -> None:
    """Metrics built from now on write to ``PROMETHEUS_MULTIPROC_DIR``, set just now.

    ``prometheus_client`` picks its value class when first imported, and Celery's command
    line imports it before any app code runs (it loads Flower's command, which imports it).
    """
    from prometheus_client import values

    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Metrics:
    """Every metric this package records (built once per process by ``metrics()``)."""

    steps: Any
    step_seconds: Any
    fenced: Any
    wakeup_latency: Any
    turns_ended: Any
    model_seconds: Any
    model_errors: Any
    tokens: Any
    cached_input_tokens: Any
    reasoning_tokens: Any
    tool_seconds: Any
    tool_errors: Any
    sweep_seconds: Any
    swept: Any
    queue_depth: Any
    webhooks: Any
    abandoned_threads: Any
    leases_cut: Any


# Once per process: the metrics live in prometheus_client's default registry, which refuses
# a second metric of the same name, so the library makes them process-global.
@functools.cache
def metrics() -> Metrics | None:
    """The metric objects, registered in the default registry; None without the package."""
    if not available():
        return None
    from prometheus_client import Counter, Gauge, Histogram

    return Metrics(
        steps=Counter(
            "agentworker_steps", "Step tasks run, by outcome (status after the step).", ["outcome"]
        ),
        step_seconds=Histogram(
            "agentworker_step_duration_seconds",
            "Claim to release of one step.",
            ["agent"],
            buckets=_CALLS,
        ),
        fenced=Counter(
            "agentworker_fenced_steps",
            "Steps whose writes were refused: lease lost or version moved on.",
            ["reason"],
        ),
        wakeup_latency=Histogram(
            "agentworker_wakeup_latency_seconds",
            "From the commit that made a turn runnable (and dispatched it) to its claim.",
            buckets=_LATENCY,
        ),
        turns_ended=Counter(
            "agentworker_turns_ended",
            "Turns a worker's step ended, by status.",
            ["agent", "status"],
        ),
        model_seconds=Histogram(
            "agentworker_model_call_duration_seconds",
            "One model call.",
            ["agent", "model"],
            buckets=_CALLS,
        ),
        model_errors=Counter(
            "agentworker_model_call_errors", "Model calls that raised.", ["agent", "model", "error"]
        ),
        tokens=Counter(
            "agentworker_tokens", "Tokens used by model calls.", ["agent", "model", "direction"]
        ),
        # Parts of the input and output directions, so their own series: a sum over
        # ``direction`` stays the total.
        cached_input_tokens=Counter(
            "agentworker_cached_input_tokens",
            "Input tokens read from the provider's prompt cache.",
            ["agent", "model"],
        ),
        reasoning_tokens=Counter(
            "agentworker_reasoning_tokens",
            "Output tokens the model spent reasoning.",
            ["agent", "model"],
        ),
        tool_seconds=Histogram(
            "agentworker_tool_call_duration_seconds",
            "One tool execution.",
            ["agent", "tool"],
            buckets=_CALLS,
        ),
        tool_errors=Counter(
            "agentworker_tool_call_errors",
            "Tool executions that raised or answered an error.",
            ["agent", "tool", "error"],
        ),
        sweep_seconds=Histogram(
            "agentworker_sweep_duration_seconds", "One sweep.", buckets=_LATENCY
        ),
        swept=Counter("agentworker_sweep_woken", "Turns a sweep woke, by why.", ["kind"]),
        queue_depth=Gauge(
            "agentworker_queue_depth",
            "Messages waiting in a broker queue (read by sweeps).",
            ["queue"],
            multiprocess_mode="mostrecent",
        ),
        webhooks=Counter(
            "agentworker_webhook_deliveries", "Webhook deliveries, by outcome.", ["outcome"]
        ),
        abandoned_threads=Counter(
            "agentworker_abandoned_tool_threads",
            "Sync tool calls abandoned past their timeout (their threads run on).",
        ),
        leases_cut=Counter(
            "agentworker_leases_cut",
            "Steps whose lease was cut: still running after the step time limit and its grace.",
        ),
    )


# -- recording -----------------------------------------------------------------------------
def step_done(outcome: str, turn: AgentTurn | None, seconds: float) -> None:
    """A step task finished with ``outcome`` (``step_once``'s answer)."""
    m = metrics()
    if m is None:
        return
    m.steps.labels(outcome).inc()
    if turn is None:
        return
    m.step_seconds.labels(turn.agent_id).observe(seconds)
    if turn.status.is_terminal:
        m.turns_ended.labels(turn.agent_id, turn.status.value).inc()


def fenced(reason: str) -> None:
    """A step's write was refused (``lease_lost`` or ``version``)."""
    m = metrics()
    if m is not None:
        m.fenced.labels(reason).inc()


def claimed(turn: AgentTurn, now: float) -> None:
    """A turn was claimed at ``now``: how long it waited since it became runnable."""
    m = metrics()
    st = turn.state
    if m is None or st.status is AgentTurnStatus.WAITING_FOR_CHILD:
        return  # a woken parent: when its last child reported is not recorded
    since = st.updated_at
    if st.status is AgentTurnStatus.RETRY_SCHEDULED and st.next_runnable_at is not None:
        since = st.next_runnable_at
    m.wakeup_latency.observe(max(0.0, now - since))


def swept(seconds: float, due: int, lost: int, repaired: int) -> None:
    """One sweep took ``seconds`` and woke these."""
    m = metrics()
    if m is None:
        return
    m.sweep_seconds.observe(seconds)
    for kind, count in (("due", due), ("lost", lost), ("repaired", repaired)):
        if count:
            m.swept.labels(kind).inc(count)


def queue_depth(queue: str, depth: int) -> None:
    """Messages waiting in ``queue``."""
    m = metrics()
    if m is not None:
        m.queue_depth.labels(queue).set(depth)


def webhook_delivered(outcome: str) -> None:
    """A webhook delivery ended (``delivered``, ``failed``, ``gave_up``...)."""
    m = metrics()
    if m is not None:
        m.webhooks.labels(outcome).inc()


def lease_cut(turn_id: str) -> None:
    """A step ran past the step time limit and its grace: its lease was cut (any thread)."""
    m = metrics()
    if m is not None:
        m.leases_cut.inc()


class _Abandoned:
    """The abandoned-thread count of this process already added to the counter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid, self._seen = os.getpid(), 0

    def add(self, total: int) -> int:
        """The part of ``total`` (this process's count so far) not counted yet."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child counts from its own zero
                self._pid, self._seen = os.getpid(), 0
            new, self._seen = max(0, total - self._seen), max(total, self._seen)
            return new


_ABANDONED = _Abandoned()


def tool_threads_abandoned(total: int) -> None:
    """Count the new ones of the ``total`` sync tool threads this process has abandoned."""
    m = metrics()
    new = _ABANDONED.add(total)
    if m is not None and new:
        m.abandoned_threads.inc(new)


def middleware() -> tuple[Middleware, ...]:
    """The runner middleware of a fleet process: ``MetricsMiddleware`` when it can record."""
    return (MetricsMiddleware(),) if available() else ()


class MetricsMiddleware(Middleware):
    """Times model and tool calls, counts their errors and the tokens used."""

    def wrap_model(
        self,
        turn: AgentTurn,
        request: ModelRequest,
        call_next: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        """Time the call; count tokens, or the error."""
        m = metrics()
        if m is None:
            return call_next(request)
        agent, model = turn.agent_id, model_name(turn.agent.model, request.settings)
        started = time.perf_counter()
        try:
            response = call_next(request)
        except Exception as exc:
            m.model_errors.labels(agent, model, type(exc).__name__).inc()
            raise
        finally:
            m.model_seconds.labels(agent, model).observe(time.perf_counter() - started)
        usage = getattr(response, "usage", None)
        if usage is not None:
            m.tokens.labels(agent, model, "input").inc(usage.input_tokens)
            m.tokens.labels(agent, model, "output").inc(usage.output_tokens)
            m.cached_input_tokens.labels(agent, model).inc(usage.cached_input_tokens)
            m.reasoning_tokens.labels(agent, model).inc(usage.reasoning_tokens)
        return response

    def wrap_tool(
        self, turn: AgentTurn, call: ToolCall, call_next: Callable[[ToolCall], ToolMessage]
    ) -> ToolMessage:
        """Time the call; count an exception or an error answer."""
        m = metrics()
        if m is None:
            return call_next(call)
        agent = turn.agent_id
        started = time.perf_counter()
        try:
            message = call_next(call)
        except Exception as exc:
            m.tool_errors.labels(agent, call.name, type(exc).__name__).inc()
            raise
        finally:
            m.tool_seconds.labels(agent, call.name).observe(time.perf_counter() - started)
        if message.is_error:
            m.tool_errors.labels(agent, call.name, "tool_error").inc()
        return message


# -- exposition ----------------------------------------------------------------------------
class TurnCountCollector:
    """``agentworker_turns{state}``: turns per store index, read at scrape (cached briefly)."""

    def __init__(self, store: AgentTurnStore, max_age: float = 5.0) -> None:
        self.store = store
        self.max_age = max_age
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, int]] | None = None

    def counts(self) -> dict[str, int]:
        """The store's counts, at most ``max_age`` seconds old."""
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] > self.max_age:
                self._cached = (now, store_turn_counts(self.store))
            return self._cached[1]

    def collect(self) -> Iterator[Any]:
        """One gauge family (nothing when the store cannot be read)."""
        from prometheus_client.core import GaugeMetricFamily

        try:
            counts = self.counts()
        except Exception as exc:  # a scrape must not fail because Redis is away
            log.warning("turn counts unavailable: %s", exc)
            return
        family = GaugeMetricFamily(
            "agentworker_turns", "Turns per store index (live, runnable, ...).", labels=["state"]
        )
        for state, count in counts.items():
            family.add_metric([state], count)
        yield family


def store_turn_counts(store: AgentTurnStore) -> dict[str, int]:
    """The store's index sizes: the Redis store's partitions, the memory store's dicts."""
    own = getattr(store, "turn_counts", None)
    if callable(own):
        return dict(own())
    from stores.redis import RedisAgentTurnStore, turn_counts

    if isinstance(store, RedisAgentTurnStore):
        return turn_counts(store)
    return {}


def registry(store: AgentTurnStore | None = None) -> CollectorRegistry:
    """What to expose: every process's metrics (multiprocess mode) or this one's, and turns."""
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    if os.environ.get(MULTIPROC_DIR):
        reg = CollectorRegistry()
        MultiProcessCollector(reg)  # type: ignore[no-untyped-call]
    else:
        reg = CollectorRegistry()
        reg.register(_Forward(REGISTRY))
    if store is not None:
        reg.register(TurnCountCollector(store))
    return reg


class _Forward:
    """The default registry's metrics inside another registry (with extra collectors)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        """What the default registry collects."""
        yield from self.source.collect()


def exposition(reg: CollectorRegistry) -> tuple[bytes, str]:
    """The text format of ``reg`` and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(reg), CONTENT_TYPE_LATEST


def serve(port: int, addr: str, store: AgentTurnStore | None) -> None:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread of this process."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=addr, registry=registry(store))
    log.info("metrics on http://%s:%d/metrics", addr, port)


def process_ended(pid: int) -> None:
    """A prefork child exits: its live gauges go (multiprocess mode only)."""
    if os.environ.get(MULTIPROC_DIR) and available():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def queue_size(app: Any, queue: str) -> int:
    """Messages waiting in ``queue`` on the app's broker (declared as the app declares it)."""
    with app.connection_for_read() as conn:
        ok = app.amqp.queues[queue].bind(conn.default_channel).queue_declare()
        return int(ok.message_count)
