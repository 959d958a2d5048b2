"""The overview page: turns by status, the longest waits, the latest failures, fleet figures.

Counts come from the store's indexes (operators: the whole fleet) and from the newest
turns the caller may see. Step rate and wake-up latency come from the workers' metrics
endpoint (``AGENTWORKER_METRICS_PORT``), read when the page is drawn; without it the page
says so.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from agentworker.http.auth import Caller
from agentworker.http.console.views import _e, _page, _when, status_badge
from agentworker.http.listing import ListQuery, list_page
from agentworker.ops.metrics import store_turn_counts
from agentworker.settings import Settings
from runner_core import AgentTurnSnapshot, AgentTurnStatus
from runner_core.store import AgentTurnStore

#: Turns read to count statuses by (the newest the caller may see; a list page's most).
COUNTED = 200
#: Rows in the "waiting longest" and "latest failures" lists.
SHOWN = 10
WAITING = (
    AgentTurnStatus.WAITING_FOR_APPROVAL,
    AgentTurnStatus.WAITING_FOR_USER,
    AgentTurnStatus.WAITING_FOR_CHILD,
    AgentTurnStatus.RETRY_SCHEDULED,
)
FAILED = (AgentTurnStatus.FAILED, AgentTurnStatus.BUDGET_EXCEEDED)


@dataclass(frozen=True, slots=True)
class Fleet:
    """Figures from the workers' metrics; ``step_rate`` needs two readings."""

    steps: float
    step_rate: float | None
    wakeups: float
    wakeup_mean: float | None


@dataclass(frozen=True, slots=True)
class Overview:
    """What the page shows."""

    indexes: dict[str, int]
    statuses: Counter[str]
    counted: int
    waiting: list[AgentTurnSnapshot]
    failures: list[AgentTurnSnapshot]
    fleet: Fleet | None
    fleet_problem: str


class FleetReader:
    """Reads the workers' metrics endpoint; remembers the last reading for the step rate."""

    def __init__(self, settings: Settings, fetch: Callable[[str], str] | None = None) -> None:
        port = settings.metrics_port
        self.url = f"http://{settings.metrics_addr}:{port}/metrics" if port else None
        self._fetch = fetch or _get
        self._last: tuple[float, float] | None = None
        self._lock = threading.Lock()

    def read(self) -> tuple[Fleet | None, str]:
        """The figures, or None and why not."""
        if self.url is None:
            return None, "set AGENTWORKER_METRICS_PORT to see step rate and wake-up latency"
        try:
            text = self._fetch(self.url)
        except OSError as exc:
            return None, f"metrics endpoint {self.url} unavailable: {exc}"
        samples = _samples(text)
        steps = sum(v for k, v in samples.items() if k.startswith("agentworker_steps_total"))
        count = samples.get("agentworker_wakeup_latency_seconds_count", 0.0)
        total = samples.get("agentworker_wakeup_latency_seconds_sum", 0.0)
        now = time.monotonic()
        with self._lock:
            rate = None
            if self._last is not None and now > self._last[0]:
                rate = max(0.0, steps - self._last[1]) / (now - self._last[0])
            self._last = (now, steps)
        mean = total / count if count else None
        return Fleet(steps, rate, count, mean), ""


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 (our own setting)
        return str(answer.read().decode("utf-8", "replace"))


def _samples(text: str) -> dict[str, float]:
    """Samples of the text format summed by name and labels' absence (enough here)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def read(store: AgentTurnStore, caller: Caller, fleet: FleetReader) -> Overview:
    """Gather the page from the store (and the metrics endpoint, for operators)."""
    tenant = None if caller.every_tenant else caller.tenant
    newest = list_page(store, ListQuery(limit=COUNTED), tenant, store.load).turns
    statuses = Counter(s.status.value for s in newest)
    waiting: list[AgentTurnSnapshot] = []
    for status in WAITING:
        waiting += list_page(store, ListQuery(status=status, limit=50), tenant, store.load).turns
    waiting.sort(key=lambda s: s.updated_at)
    failures: list[AgentTurnSnapshot] = []
    for status in FAILED:
        failures += list_page(
            store, ListQuery(status=status, limit=SHOWN), tenant, store.load
        ).turns
    failures.sort(key=lambda s: s.updated_at, reverse=True)
    indexes = store_turn_counts(store) if caller.every_tenant else {}
    figures, problem = (None, "fleet figures are for operator credentials")
    if caller.every_tenant:
        figures, problem = fleet.read()
    return Overview(
        indexes, statuses, len(newest), waiting[:SHOWN], failures[:SHOWN], figures, problem
    )


def page(caller: Caller, o: Overview, now: float) -> str:
    """The overview's HTML."""
    counts = "".join(
        f'<tr data-status="{_e(k)}"><td>{status_badge(AgentTurnStatus(k))}</td>'
        f'<td class="count">{v}</td></tr>'
        for k, v in sorted(o.statuses.items())
    )
    indexes = "".join(
        f'<tr data-index="{_e(k)}"><td>{_e(k)}</td><td class="count">{v}</td></tr>'
        for k, v in o.indexes.items()
    )
    index_part = (
        f'<h3>Store indexes (all tenants)</h3><table class="indexes">{indexes}</table>'
        if indexes
        else ""
    )
    waits = (
        "".join(
            f'<tr data-turn="{_e(s.id)}"><td>{_link(s)}</td><td>{_e(s.agent_id)}</td>'
            f"<td>{status_badge(s.status)}</td>"
            f'<td class="waited">{_e(_since(now - s.updated_at))}</td></tr>'
            for s in o.waiting
        )
        or '<tr><td colspan="4" class="empty">nothing waits</td></tr>'
    )
    fails = (
        "".join(
            f'<tr data-turn="{_e(s.id)}"><td>{_link(s)}</td><td>{_e(s.agent_id)}</td>'
            f'<td class="error-type">{_e(s.error.type if s.error else s.status.value)}</td>'
            f"<td>{_e(s.error.message if s.error else s.terminal_reason or '')}</td>"
            f"<td>{_when(s.updated_at)}</td></tr>"
            for s in o.failures
        )
        or '<tr><td colspan="5" class="empty">no failures</td></tr>'
    )
    body = (
        "<h1>Overview</h1>"
        f'<section><h2>Turns by status</h2><p class="note">the newest {o.counted} turns '
        f'you may see</p><table class="statuses">{counts}</table>{index_part}</section>'
        '<section><h2>Waiting longest</h2><table class="waiting"><thead><tr><th>turn</th>'
        f"<th>agent</th><th>status</th><th>waiting for</th></tr></thead>{waits}</table></section>"
        '<section><h2>Latest failures</h2><table class="failures"><thead><tr><th>turn</th>'
        "<th>agent</th><th>error type</th><th>message</th><th>when</th></tr></thead>"
        f"{fails}</table></section>"
        f"<section><h2>Fleet</h2>{_fleet(o)}</section>"
    )
    return _page("Overview", body, caller)


def _fleet(o: Overview) -> str:
    if o.fleet is None:
        return f'<p class="note fleet-missing">{_e(o.fleet_problem)}</p>'
    f = o.fleet
    rate = f"{f.step_rate:.2f}/s" if f.step_rate is not None else "(reload to measure)"
    mean = f"{f.wakeup_mean * 1000:.1f} ms" if f.wakeup_mean is not None else "none yet"
    return (
        '<table class="fleet">'
        f'<tr><td>steps run</td><td class="steps">{f.steps:.0f}</td></tr>'
        f'<tr><td>step rate</td><td class="step-rate">{_e(rate)}</td></tr>'
        f"<tr><td>wake-up latency (mean of {f.wakeups:.0f})</td>"
        f'<td class="wakeup-latency">{_e(mean)}</td></tr></table>'
    )


def _link(s: AgentTurnSnapshot) -> str:
    return f'<a href="/console/turns/{_e(s.id)}">{_e(s.id[:12])}</a>'


def _since(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172_800 else f"{seconds / 86400:.0f} days"
