"""The turn page's account of the work: transcript, waterfall, usage and cost, actions."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from agentworker.http.auth import Caller
from agentworker.http.console.views import _e, _when
from agentworker.http.console.waterfall import Row, Totals
from agentworker.ops.costs import dollars
from agentworker.ops.transcript import Entry
from runner_core import AgentTurnSnapshot, AgentTurnStatus, Usage

#: Bodies longer than this are folded (the first lines shown, the rest behind a toggle).
FOLD_CHARS = 600
#: A transcript longer than both is drawn as its first and last messages and a note.
KEEP_FIRST, KEEP_LAST = 50, 300
#: Waterfall rows per page: a tree of 10,000 events is read once, but drawn a page at a time.
PAGE_ROWS = 200


def transcript(items: Sequence[Entry]) -> str:
    """The conversation: the final answer (or the error) first, then every message in order."""
    ends = [i for i in items if i.kind == "final" or (i.kind == "error" and i.call_id is None)]
    top = "".join(f'<div class="final {i.kind}">{_entry(i)}</div>' for i in ends[-1:])
    system = [i for i in items if i.kind == "system"]
    rest = [i for i in items if i.kind != "system" and i not in ends[-1:]]
    hidden = ""
    if system:
        inner = "".join(f"<li>{_entry(i)}</li>" for i in system)
        hidden = (
            '<details class="system"><summary>system instructions</summary>'
            f'<ol class="messages">{inner}</ol></details>'
        )
    lines = "".join(_item(i, len(rest)) for i in _shown(rest))
    if not rest:
        lines = '<li class="empty">no messages yet</li>'
    return f'{top}{hidden}<ol class="messages">{lines}</ol>'


def _shown(rest: Sequence[Entry]) -> list[Entry | None]:
    """The entries drawn: all, or the first and the last with a gap (None) between."""
    if len(rest) <= KEEP_FIRST + KEEP_LAST:
        return list(rest)
    return [*rest[:KEEP_FIRST], None, *rest[-KEEP_LAST:]]


def _item(i: Entry | None, total: int) -> str:
    if i is None:
        cut = total - KEEP_FIRST - KEEP_LAST
        return (
            f'<li class="cut note">{cut} messages not shown here '
            "(<code>agentworker turns show</code> prints them all)</li>"
        )
    return f'<li class="entry {i.kind}">{_entry(i)}</li>'


def _entry(i: Entry) -> str:
    call = f' <span class="call-id">{_e(i.call_id)}</span>' if i.call_id else ""
    head = f'<div class="who">{_e(i.title)}{call}</div>'
    if len(i.body) <= FOLD_CHARS:
        return f'{head}<pre class="body">{_e(i.body)}</pre>'
    return (
        f'{head}<details class="fold"><summary><pre class="body">{_e(i.body[:FOLD_CHARS])} …'
        f"</pre> ({len(i.body)} characters)</summary>"
        f'<pre class="body">{_e(i.body)}</pre></details>'
    )


def tokens(u: Usage) -> str:
    """Input/output tokens, with the cached and reasoning parts where known."""
    parts = [f"{u.input_tokens} in", f"{u.output_tokens} out"]
    if u.cached_input_tokens:
        parts.append(f"{u.cached_input_tokens} cached")
    if u.reasoning_tokens:
        parts.append(f"{u.reasoning_tokens} reasoning")
    return " · ".join(parts)


def duration(seconds: float | None) -> str:
    """``12 ms``, ``3.4 s``, ``5 min 2 s``; empty when unknown."""
    if seconds is None:
        return ""
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{seconds / 3600:.1f} h"


def waterfall(turn_id: str, rows: Sequence[Row], page: int, live: bool) -> str:
    """One page of rows, each with its bar placed within the page's time span."""
    pages = max(1, -(-len(rows) // PAGE_ROWS))
    page = min(max(page, 1), pages)
    shown = rows[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]
    if not shown:
        body = '<tr><td colspan="5" class="empty">nothing has run yet</td></tr>'
        return _table(turn_id, body, 0.0, 0.0, page, pages, live)
    t0 = min(r.start for r in shown)
    t1 = max(r.start + (r.seconds or 0.0) for r in shown)
    body = "".join(_bar_row(r, t0) for r in shown)
    return _table(turn_id, body, t0, t1, page, pages, live)


def _table(turn_id: str, body: str, t0: float, t1: float, page: int, pages: int, live: bool) -> str:
    nav = ""
    if pages > 1:
        link = f"/console/turns/{_e(turn_id)}?page="
        prev = f'<a class="prev" href="{link}{page - 1}#waterfall">earlier</a> ' if page > 1 else ""
        nxt = (
            f' <a class="next" href="{link}{page + 1}#waterfall">later</a>' if page < pages else ""
        )
        nav = f'<p class="pages">{prev}page {page} of {pages}{nxt}</p>'
    return (
        f'<div class="waterfall-page" data-page="{page}" data-t0="{t0:.3f}" data-t1="{t1:.3f}" '
        f'data-live="{"1" if live else ""}">{nav}'
        '<table class="waterfall"><thead><tr><th>what</th><th>start</th><th>duration</th>'
        '<th class="span">time</th><th>outcome · tokens · cost</th></tr></thead>'
        f'<tbody id="waterfall-rows">{body}</tbody></table></div>'
    )


def _bar_row(r: Row, t0: float) -> str:
    info = r.outcome
    if r.usage is not None:
        info = f"{info} · {tokens(r.usage)}" + (
            f" · {dollars(r.cost)}" if r.cost is not None else ""
        )
    if r.due is not None:
        info = f"{info} at {_when(r.due)}"
    detail = f'<div class="detail">{_e(r.detail)}</div>' if r.detail else ""
    seconds = r.seconds if r.seconds is not None else 0.0
    return (
        f'<tr class="row {_e(r.kind)} {_e(r.outcome.split(" ")[0])}" data-kind="{_e(r.kind)}">'
        f'<td class="what">{_e(r.label)}</td><td class="start">{_clock(r.start)}</td>'
        f'<td class="duration">{_e(duration(r.seconds))}</td>'
        f'<td class="span"><div class="bar" data-start="{r.start - t0:.3f}" '
        f'data-seconds="{seconds:.3f}"></div></td>'
        f'<td class="info">{_e(info)}{detail}</td></tr>'
    )


def _clock(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S.%f")[:-3]


def usage_table(
    tree: Sequence[tuple[int, AgentTurnSnapshot]], totals: dict[str, Totals], current: str
) -> str:
    """Tokens and cost per turn of the tree (its own model calls) and for the whole tree.

    From the committed events; without them (a store that keeps none), from the turns'
    counters, where a parent's include its children's, so the tree is the root's.
    """
    rows, whole = [], Totals()
    for depth, t in tree:
        got = totals.get(t.id, Totals())
        usage = got.usage if totals else t.usage
        if totals or depth == 0:
            whole.usage = whole.usage + usage
        if got.cost is not None:
            whole.cost = (whole.cost or 0.0) + got.cost
        mark = ' class="current"' if t.id == current else ""
        rows.append(
            f'<tr{mark} data-turn="{_e(t.id)}"><td>{"&nbsp;&nbsp;" * depth}{_e(t.id[:12])}</td>'
            f"<td>{got.calls}</td><td>{_e(tokens(usage))}</td><td>{dollars(got.cost)}</td></tr>"
        )
    rows.append(
        f'<tr class="total"><td>tree</td><td></td><td class="tree-tokens">'
        f"{_e(tokens(whole.usage))}</td><td>{dollars(whole.cost)}</td></tr>"
    )
    return (
        '<table class="usage"><thead><tr><th>turn</th><th>model calls</th><th>tokens</th>'
        f"<th>cost</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def actions(caller: Caller, s: AgentTurnSnapshot, base_url: str) -> str:
    """Cancel (write scope), retry now (approve scope), copy the id and commands."""
    parts = []
    if not s.status.is_terminal:
        if "write" in caller.scopes:
            parts.append(
                f'<div class="cancel" data-turn="{_e(s.id)}"><input class="cancel-reason" '
                'placeholder="why cancel"><button class="cancel-turn">Cancel turn</button></div>'
            )
        else:
            parts.append('<p class="note">cancelling needs the write scope</p>')
    if s.status is AgentTurnStatus.RETRY_SCHEDULED:
        if "approve" in caller.scopes:
            parts.append(
                f'<div class="retry" data-turn="{_e(s.id)}">'
                '<button class="retry-now">Retry now</button></div>'
            )
        else:
            parts.append('<p class="note">retrying now needs the approve scope</p>')
    curl = f"curl -H 'Authorization: Bearer $TOKEN' {shlex.quote(base_url + '/turns/' + s.id)}"
    cli = f"agentworker turns show {shlex.quote(s.id)}"
    copies = "".join(
        f'<button class="copy" data-copy="{_e(text)}" title="{_e(text)}">{label}</button>'
        for label, text in (("copy id", s.id), ("copy curl", curl), ("copy CLI", cli))
    )
    return (
        f'<div class="turn-actions">{"".join(parts)}<p class="error" hidden></p>'
        f'<div class="copies">{copies}<code class="copied" hidden></code></div></div>'
    )
