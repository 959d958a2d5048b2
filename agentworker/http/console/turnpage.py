"""The turn page: what a turn did (transcript, waterfall, cost) and what can be done to it.

``read`` gathers what the page shows from the store in one pass (the snapshot, the tree,
the tree's committed events); the functions below render it. The live parts are
fragments the script fetches again when a committed event arrives over SSE.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentworker.http.auth import Caller
from agentworker.http.console import views, work
from agentworker.http.console.views import _e
from agentworker.http.console.waterfall import Row, Totals, rows_of, totals
from agentworker.ops.costs import Prices
from agentworker.ops.transcript import Entry, entries
from runner_core import AgentEvent, AgentRunner, AgentTurnSnapshot

Tree = list[tuple[int, AgentTurnSnapshot]]
#: A tree's events read for one page (the store keeps at most this many per tree anyway).
MAX_EVENTS = 20_000
#: Committed events listed under the waterfall when the page opens; newer ones stream in.
RECENT_EVENTS = 100


@dataclass(frozen=True, slots=True)
class TurnView:
    """Everything the turn page shows, read once."""

    snapshot: AgentTurnSnapshot
    tree: Tree
    entries: list[Entry]
    rows: list[Row]
    totals: dict[str, Totals]
    recent: list[AgentEvent]


def read(runner: AgentRunner, snapshot: AgentTurnSnapshot, tree: Tree, prices: Prices) -> TurnView:
    """The page's data: one read of the tree's events, the turn's own for its waterfall."""
    events = runner.store.read_events(snapshot.root_turn_id, MAX_EVENTS)
    visible = {t.id for _, t in tree}
    events = [e for e in events if e.turn_id in visible]
    own = [e for e in events if e.turn_id == snapshot.id]
    now = runner.store.now()
    return TurnView(
        snapshot,
        tree,
        entries(snapshot, instructions_of(runner, snapshot)),
        rows_of(own, prices, now),
        totals(events, prices),
        events[-RECENT_EVENTS:],
    )


def instructions_of(runner: AgentRunner, s: AgentTurnSnapshot) -> str:
    """The agent's system instructions, when this process can load the agent."""
    try:
        return runner.loader.load(s.agent_id, s.agent_version).instructions
    except Exception:  # the HTTP app need not have the agents; the page goes without
        return ""


def page(caller: Caller, v: TurnView, waterfall_page: int, after: str, base_url: str) -> str:
    """The whole page."""
    s = v.snapshot
    live = not s.status.is_terminal
    fragment = f"/console/fragments/turns/{_e(s.id)}"
    body = (
        f'<h1>Turn <span class="turn-id">{_e(s.id)}</span></h1>'
        f'<div id="turn-body" {"data-live" if live else "data-refresh"}="{fragment}">'
        f"{body_of(caller, v, base_url)}</div>"
        '<section id="transcript-section"><h2 id="transcript">Transcript</h2>'
        f'<div id="transcript-body" data-refresh="{fragment}/transcript">'
        f"{work.transcript(v.entries)}</div></section>"
        '<section id="waterfall-section"><h2 id="waterfall">Waterfall</h2>'
        '<p class="legend"><span class="committed">committed</span> '
        '<span class="provisional">provisional (running)</span></p>'
        f'<div id="waterfall-body" data-turn="{_e(s.id)}" '
        f'data-refresh="{fragment}/waterfall?page={waterfall_page}">'
        f"{work.waterfall(s.id, v.rows, waterfall_page, live)}</div></section>"
        '<section><h2>Timeline</h2><p class="legend"><span class="committed">committed</span> '
        '<span class="provisional">provisional</span></p>'
        f'<ol id="timeline" data-stream="/turns/{_e(s.root_turn_id)}/events?after={_e(after)}" '
        f'data-types="{_e(views.EVENT_TYPES)}">{timeline(v.recent)}</ol></section>'
    )
    return views._page(f"Turn {s.id[:12]}", body, caller)


def body_of(caller: Caller, v: TurnView, base_url: str) -> str:
    """Status, result, actions, what it waits for, the tree with its usage and cost."""
    s = v.snapshot
    return (
        views.turn_body(caller, s, v.tree, _tree_extra(v))
        + work.actions(caller, s, base_url)
        + "<h2>Usage and cost</h2>"
        + work.usage_table(v.tree, v.totals, s.id)
    )


def _tree_extra(v: TurnView) -> dict[str, str]:
    """Per turn of the tree: how long it ran (so far, while it lives) and its steps."""
    out = {}
    for _, t in v.tree:
        steps = f"{t.step_count} step" + ("" if t.step_count == 1 else "s")
        out[t.id] = f"{work.duration(views.turn_seconds(t))} · {steps}"
    return out


def timeline(events: list[AgentEvent]) -> str:
    """Committed events as the live timeline lists them."""
    return "".join(
        f'<li class="committed" data-type="{_e(e.type.value)}" data-key="{_e(e.turn_id)}:'
        f'{e.sequence}">#{e.sequence} {_e(e.type.value)} · {_e(e.turn_id[:12])}</li>'
        for e in events
    )
