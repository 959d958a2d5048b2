"""The console's HTML: small functions returning escaped markup (no template engine needed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import urlencode

from agentworker.http.auth import Caller
from agentworker.http.listing import ListQuery
from runner_core import AgentTurnSnapshot, AgentTurnStatus
from runner_core.events import AgentEventType
from runner_core.resume import approval_calls, waiting_calls
from runner_core.snapshot import SuspensionType

EVENT_TYPES = json.dumps([t.value for t in AgentEventType])


def _e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _page(title: str, body: str, caller: Caller | None = None) -> str:
    who = ""
    if caller is not None:
        scopes = ", ".join(sorted(caller.scopes))
        who = (
            f'<span class="who">tenant <b>{_e(caller.tenant)}</b> ({_e(scopes)}) '
            '<a href="/console/logout">sign out</a></span>'
        )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{_e(title)} · agentworker</title>"
        '<link rel=stylesheet href="/console/static/console.css">'
        '<script defer src="/console/static/console.js"></script></head><body>'
        '<header><a href="/console" class="brand">agentworker</a>'
        '<nav><a href="/console">turns</a> <a href="/console/overview">overview</a></nav>'
        f"{who}</header>"
        f"<main>{body}</main></body></html>"
    )


def login(error: str | None) -> str:
    """The sign-in form: paste an API token."""
    problem = f'<p class="error">{_e(error)}</p>' if error else ""
    form = (
        '<form method="post" action="/console/login" class="login">'
        "<h1>Sign in</h1>"
        f"{problem}"
        '<label>API token <input type="password" name="token" id="token" required '
        'autocomplete="off"></label>'
        '<button type="submit" id="sign-in">Sign in</button></form>'
    )
    return _page("Sign in", form)


def status_badge(status: AgentTurnStatus) -> str:
    """A status as a coloured label."""
    kind = "ended" if status.is_terminal else "blocked" if status.is_blocked else "running"
    return f'<span class="status {kind}" data-status="{_e(status.value)}">{_e(status.value)}</span>'


def home(
    caller: Caller,
    query: ListQuery,
    waiting: list[AgentTurnSnapshot],
    turns: list[AgentTurnSnapshot],
    next_cursor: str | None,
    sort: str = "",
) -> str:
    """The inbox, the filters and the turns list."""
    options = "".join(
        f'<option value="{s.value}"{" selected" if query.status is s else ""}>{s.value}</option>'
        for s in AgentTurnStatus
    )
    tenant = (
        f'<input name="tenant" placeholder="tenant" value="{_e(query.tenant)}">'
        if caller.every_tenant
        else ""
    )
    filters = (
        '<form class="filters" method="get" action="/console">'
        f'<select name="status"><option value="">any status</option>{options}</select>'
        f'<input name="agent" placeholder="agent" value="{_e(query.agent)}">'
        f'<input name="conversation" placeholder="conversation" value="{_e(query.conversation)}">'
        f"{tenant}"
        f'<label><input type="checkbox" name="root_only" value="true"'
        f"{' checked' if query.root_only else ''}> roots only</label>"
        "<button>Filter</button></form>"
    )
    params = urlencode(
        {k: v for k, v in query.model_dump(exclude_none=True).items() if k != "limit" and v}
    )
    live = f"/console/fragments/turns?{_with_sort(params, sort)}"
    body = (
        '<section id="inbox" data-live="/console/fragments/inbox">'
        f"{inbox(caller, waiting)}</section>"
        f"<section><h2>Turns</h2>{filters}"
        f'<table class="turns"><thead><tr><th>turn</th><th>agent</th><th>status</th>'
        f"<th>phase</th><th>tenant</th>{_sort_heads(params, sort)}</tr></thead>"
        f'<tbody id="turn-rows" data-live="{_e(live)}">'
        f"{turn_rows(turns, next_cursor, query, sort)}</tbody></table></section>"
    )
    return _page("Turns", body, caller)


#: The columns the turns list sorts by (within the page shown), largest first.
SORTS = {
    "duration": lambda s: turn_seconds(s),
    "steps": lambda s: float(s.step_count),
    "tokens": lambda s: float(s.usage.total_tokens),
    "updated": lambda s: s.updated_at,
}


def turn_seconds(s: AgentTurnSnapshot, now: float | None = None) -> float:
    """How long the turn ran: to its end, or until now while it lives."""
    end = s.updated_at if s.status.is_terminal else (now or datetime.now(UTC).timestamp())
    return max(0.0, end - s.created_at)


def sorted_turns(turns: list[AgentTurnSnapshot], sort: str) -> list[AgentTurnSnapshot]:
    """The page's turns by ``sort`` (a key of ``SORTS``), else as listed (newest first)."""
    key = SORTS.get(sort)
    return sorted(turns, key=key, reverse=True) if key is not None else turns


def _with_sort(params: str, sort: str) -> str:
    extra = urlencode({"sort": sort}) if sort in SORTS else ""
    return "&".join(p for p in (params, extra) if p)


def _sort_heads(params: str, sort: str) -> str:
    heads = []
    for name in ("duration", "steps", "tokens", "updated"):
        mark = " ▼" if name == sort else ""
        link = f"/console?{_with_sort(params, name)}"
        heads.append(
            f'<th><a class="sort" data-sort="{name}" href="{_e(link)}">{name}{mark}</a></th>'
        )
    return "".join(heads)


def turn_rows(
    turns: list[AgentTurnSnapshot], next_cursor: str | None, query: ListQuery, sort: str = ""
) -> str:
    """The rows of the turns table (and a link to the next page)."""
    rows = "".join(
        f'<tr data-turn="{_e(s.id)}"><td><a href="/console/turns/{_e(s.id)}">{_e(s.id[:12])}</a>'
        f"{' ↳' if s.parent_turn_id else ''}</td><td>{_e(s.agent_id)}</td>"
        f"<td>{status_badge(s.status)}</td><td>{_e(s.phase.value)}</td>"
        f"<td>{_e(s.metadata.get('tenant_id', ''))}</td>"
        f'<td class="duration">{_e(_short(turn_seconds(s)))}</td>'
        f'<td class="steps">{s.step_count}</td><td class="tokens">{s.usage.total_tokens}</td>'
        f"<td>{_when(s.updated_at)}</td></tr>"
        for s in sorted_turns(turns, sort)
    )
    if not turns:
        rows = '<tr><td colspan="9" class="empty">no turns</td></tr>'
    if next_cursor:
        params = {k: v for k, v in query.model_dump(exclude_none=True).items() if v}
        params["cursor"] = next_cursor
        if sort in SORTS:
            params["sort"] = sort
        rows += (
            f'<tr><td colspan="9"><a href="/console?{_e(urlencode(params))}">next page</a>'
            "</td></tr>"
        )
    return rows


def _short(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def inbox(caller: Caller, waiting: list[AgentTurnSnapshot]) -> str:
    """What waits for a person: each turn with its calls, their arguments and the actions."""
    ids = " ".join(_waiting_key(s) for s in waiting)
    items = "".join(f'<li class="card">{waiting_card(caller, s, link=True)}</li>' for s in waiting)
    if not waiting:
        items = '<li class="empty">nothing waits for a person</li>'
    return f'<h2>Inbox ({len(waiting)})</h2><ul class="inbox" data-ids="{_e(ids)}">{items}</ul>'


def _waiting_key(s: AgentTurnSnapshot) -> str:
    """A turn and the calls it still waits on: changes when a partial answer lands."""
    return ":".join([s.id, *(str(c["call_id"]) for c in waiting_calls(s))])


def waiting_card(caller: Caller, s: AgentTurnSnapshot, link: bool = False) -> str:
    """A blocked turn's question and, with the approve scope, its answer controls."""
    sus = s.suspension
    if sus is None or sus.type not in (SuspensionType.TOOL_APPROVAL, SuspensionType.USER_INPUT):
        return ""
    head = f'<a href="/console/turns/{_e(s.id)}">{_e(s.id[:12])}</a>' if link else _e(s.id[:12])
    may_answer = "approve" in caller.scopes
    if sus.type is SuspensionType.TOOL_APPROVAL:
        calls = waiting_calls(s)
        asked = _approval_title(calls, len(approval_calls(sus)))
        title = f'<div class="what">{head} · {_e(s.agent_id)} · {asked}</div>'
        return title + _approval_calls(s.id, calls, may_answer)
    tool = sus.metadata.get("tool", "")
    title = (
        f'<div class="what">{head} · {_e(s.agent_id)} · tool '
        f'<code class="tool">{_e(tool)}</code></div>'
    )
    body = f'<p class="prompt">{_e(sus.message)}</p>'
    schema = json.dumps(sus.metadata.get("schema") or {}, ensure_ascii=False)
    attrs = f'data-turn="{_e(s.id)}" data-call="{_e(sus.correlation_id)}"'
    actions = f'<form class="user-input" {attrs} data-schema="{_e(schema)}"></form>'
    if not may_answer:
        actions = _NO_SCOPE
    return title + body + f'<p class="error" hidden></p>{actions}'


_NO_SCOPE = '<p class="note">your credential may look, not answer (no approve scope)</p>'


def _approval_title(calls: list[dict[str, Any]], listed: int) -> str:
    if listed > len(calls):
        return f"{len(calls)} of {listed} calls still wait for approval"
    return "approval" if len(calls) == 1 else f"{len(calls)} calls wait for approval"


def _approval_calls(turn_id: str, calls: list[dict[str, Any]], may_answer: bool) -> str:
    """Each waiting call with its arguments and its own approve/reject; "approve all"."""
    parts = []
    for call in calls:
        call_id = str(call["call_id"])
        args = json.dumps(call.get("arguments", {}), indent=2, ensure_ascii=False)
        name = f'<code class="tool">{_e(call.get("tool"))}</code> '
        actions = (
            f'<div class="actions" data-turn="{_e(turn_id)}" data-call="{_e(call_id)}">'
            '<input class="reason" placeholder="reason">'
            '<button class="approve" data-command="approve_tool">Approve</button>'
            '<button class="reject" data-command="reject_tool">Reject</button></div>'
        )
        parts.append(
            f'<div class="call" data-call="{_e(call_id)}">{name}<span class="call-id">'
            f'{_e(call_id)}</span><pre class="arguments">{_e(args)}</pre>'
            f'<p class="error" hidden></p>{actions if may_answer else ""}</div>'
        )
    if not may_answer:
        parts.append(_NO_SCOPE)
    elif len(calls) > 1:
        ids = " ".join(str(c["call_id"]) for c in calls)
        parts.append(
            f'<div class="batch" data-turn="{_e(turn_id)}" data-calls="{_e(ids)}">'
            '<p class="error" hidden></p>'
            f'<button class="approve-all">Approve all {len(calls)}</button> '
            '<input class="reason-all" placeholder="reason">'
            f'<button class="reject-all">Reject all {len(calls)}</button></div>'
        )
    return "".join(parts)


def turn_body(
    caller: Caller,
    s: AgentTurnSnapshot,
    tree: list[tuple[int, AgentTurnSnapshot]],
    extra: dict[str, str] | None = None,
) -> str:
    """The parts of the turn page that change: status, waiting card, the tree.

    ``extra``: per turn of the tree, more to show in its row (duration and steps).
    """
    extra = extra or {}
    rows = "".join(_tree_row(depth, t, t.id == s.id, extra.get(t.id, "")) for depth, t in tree)
    waiting = waiting_card(caller, s)
    result = ""
    if s.status is AgentTurnStatus.COMPLETED:
        result = f'<pre class="output">{_e(s.final_output)}</pre>'
    elif s.error is not None:
        result = (
            f'<p class="error turn-error"><b class="error-type">{_e(s.error.type)}</b>: '
            f'<span class="error-message">{_e(s.error.message)}</span></p>'
        )
    if s.status is AgentTurnStatus.RETRY_SCHEDULED and s.next_runnable_at is not None:
        result += (
            f'<p class="next-run">next attempt ({s.retry_count}) at '
            f'<time data-at="{s.next_runnable_at:.3f}">{_when(s.next_runnable_at)} UTC</time></p>'
        )
    if waiting:
        waiting = f'<div class="card waiting">{waiting}</div>'
    return (
        f"<p>Status {status_badge(s.status)} phase <b>{_e(s.phase.value)}</b> · "
        f"agent {_e(s.agent_id)} · v{s.version}</p>{result}{waiting}"
        '<h2>Tree</h2><table class="tree"><thead><tr><th>turn</th><th>status</th>'
        "<th>phase</th><th>tokens (with children)</th><th>duration · steps</th><th>plan</th>"
        "<th>transcript</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _tree_row(depth: int, t: AgentTurnSnapshot, current: bool, extra: str) -> str:
    plan = t.task_plan
    progress = ""
    if plan is not None:
        done = sum(1 for task in plan.tasks if task.status.value == "COMPLETED")
        progress = f"{done}/{len(plan.tasks)} {_e(plan.goal)}"
    pad = "&nbsp;&nbsp;" * depth + ("↳ " if depth else "")
    mark = ' class="current"' if current else ""
    return (
        f'<tr{mark} data-turn="{_e(t.id)}"><td>{pad}<a href="/console/turns/{_e(t.id)}">'
        f"{_e(t.id[:12])}</a> {_e(t.agent_id)}</td><td>{status_badge(t.status)}</td>"
        f"<td>{_e(t.phase.value)}</td><td>{t.usage.total_tokens}</td><td>{_e(extra)}</td>"
        f'<td>{progress}</td><td><a class="transcript-link" '
        f'href="/console/turns/{_e(t.id)}#transcript">transcript</a></td></tr>'
    )
