"""The turn console: server-rendered pages over the same API, credentials and tenant rules.

``/console`` lists turns (filters, live status) and the inbox of what waits for a person;
``/console/turns/{id}`` shows a turn's tree and its live event timeline, with approve,
reject and the user-input form. The pages are HTML from ``views``; the small
script in ``static/console.js`` polls fragments, follows the SSE stream and posts resumes
to the API itself. Signing in stores the bearer token in an HttpOnly, SameSite=Strict
cookie; read scope sees, approve scope acts (the API checks, not the page).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from agentworker.http.auth import COOKIE_NAME, Caller
from agentworker.http.console import overview, turnpage, views, work
from agentworker.http.console.waterfall import rows_of
from agentworker.http.errors import ApiError, retry_after
from agentworker.http.guard import caller_of
from agentworker.http.listing import ListQuery, Page, list_page
from agentworker.http.throttle import client_of
from agentworker.ops.costs import prices_of
from agentworker.ops.transcript import entries
from runner_core import AgentTurnSnapshot, AgentTurnStatus, TurnNotFoundError
from stores.redis import AsyncEventStreams, Keyspace

if TYPE_CHECKING:
    from agentworker.http.api import TurnsApi

STATIC = Path(__file__).parent / "static"
INBOX = (AgentTurnStatus.WAITING_FOR_APPROVAL, AgentTurnStatus.WAITING_FOR_USER)
LOGIN_BODY_BYTES = 4096
#: The console's cookie lives this long (seconds); signing in again renews it.
COOKIE_SECONDS = 8 * 3600


class Console:
    """The console's handlers; reads go through the same store and tenant checks as the API."""

    def __init__(self, api: TurnsApi) -> None:
        self.api = api
        self.prices = prices_of(api.settings.prices)
        self.fleet = overview.FleetReader(api.settings)

    async def login_form(self, request: Request) -> Response:
        """``GET /console/login``."""
        return _html(views.login(error=None))

    async def login(self, request: Request) -> Response:
        """``POST /console/login``: check the token, then keep it in the session cookie."""
        throttle, client = request.app.state.throttle, client_of(request.scope)
        try:
            throttle.check(client)
        except ApiError as exc:
            refused = _html(views.login(error=exc.message), status_code=429)
            refused.headers["Retry-After"] = retry_after(exc.retry_after or 1)
            return refused
        token = (await _login_form(request)).strip()
        auth = request.app.state.auth
        try:
            found = auth.identify({"authorization": f"Bearer {token}"})
            assert isinstance(found, Caller)
            found.need("read")
        except ApiError as exc:
            throttle.failed(client)
            return _html(views.login(error=exc.message), status_code=401)
        response = RedirectResponse("/console", status_code=303)
        response.set_cookie(
            COOKIE_NAME,
            token,
            max_age=COOKIE_SECONDS,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    async def logout(self, request: Request) -> Response:
        """``GET /console/logout``: forget the cookie."""
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE_NAME, path="/")
        return response

    async def home(self, request: Request) -> Response:
        """``GET /console``: the inbox and the turns list."""
        caller = caller_of(request)
        query = ListQuery.of(_list_params(request))
        sort = request.query_params.get("sort", "")
        inbox, page = await run_in_threadpool(self._home, caller, query)
        return _html(views.home(caller, query, inbox, page.turns, page.next_cursor, sort))

    async def turns_fragment(self, request: Request) -> Response:
        """``GET /console/fragments/turns``: the list's rows, for live status."""
        caller = caller_of(request)
        query = ListQuery.of(_list_params(request))
        sort = request.query_params.get("sort", "")
        _, page = await run_in_threadpool(self._home, caller, query, False)
        return _html(views.turn_rows(page.turns, page.next_cursor, query, sort))

    async def inbox_fragment(self, request: Request) -> Response:
        """``GET /console/fragments/inbox``."""
        caller = caller_of(request)
        inbox, _ = await run_in_threadpool(self._home, caller, ListQuery(limit=1), True)
        return _html(views.inbox(caller, inbox))

    async def turn(self, request: Request) -> Response:
        """``GET /console/turns/{id}``: what the turn did and does, live."""
        caller = caller_of(request)
        turn_id = request.path_params["turn_id"]
        snapshot = await self.api.turn(caller, turn_id)
        after = await self._stream_end(snapshot.root_turn_id)
        view = await run_in_threadpool(self._view, caller, snapshot)
        if not view.recent:
            after = "0-0"  # a store that keeps no events: the stream tells them all
        base = str(request.base_url).rstrip("/")
        return _html(turnpage.page(caller, view, _page_of(request), after, base))

    async def turn_fragment(self, request: Request) -> Response:
        """``GET /console/fragments/turns/{id}``: status, actions, tree and usage again."""
        caller = caller_of(request)
        snapshot = await self.api.turn(caller, request.path_params["turn_id"])
        view = await run_in_threadpool(self._view, caller, snapshot)
        base = str(request.base_url).rstrip("/")
        return _html(turnpage.body_of(caller, view, base))

    async def transcript_fragment(self, request: Request) -> Response:
        """``GET /console/fragments/turns/{id}/transcript``."""
        caller = caller_of(request)
        snapshot = await self.api.turn(caller, request.path_params["turn_id"])
        runner = self.api.runner
        instructions = await run_in_threadpool(turnpage.instructions_of, runner, snapshot)
        return _html(work.transcript(entries(snapshot, instructions)))

    async def waterfall_fragment(self, request: Request) -> Response:
        """``GET /console/fragments/turns/{id}/waterfall?page=n``."""
        caller = caller_of(request)
        snapshot = await self.api.turn(caller, request.path_params["turn_id"])

        def rows() -> str:
            store = self.api.runner.store
            events = store.read_events(snapshot.root_turn_id, turnpage.MAX_EVENTS)
            own = [e for e in events if e.turn_id == snapshot.id]
            found = rows_of(own, self.prices, store.now())
            live = not snapshot.status.is_terminal
            return work.waterfall(snapshot.id, found, _page_of(request), live)

        return _html(await run_in_threadpool(rows))

    async def overview(self, request: Request) -> Response:
        """``GET /console/overview``: counts, the longest waits, failures, fleet figures."""
        caller = caller_of(request)
        store = self.api.runner.store
        found = await run_in_threadpool(overview.read, store, caller, self.fleet)
        now = await run_in_threadpool(store.now)
        return _html(overview.page(caller, found, now))

    def _view(self, caller: Caller, snapshot: AgentTurnSnapshot) -> turnpage.TurnView:
        tree = self._tree(caller, snapshot.root_turn_id)
        return turnpage.read(self.api.runner, snapshot, tree, self.prices)

    async def _stream_end(self, root_id: str) -> str:
        """The tree's newest stream id: the page lists what came before, SSE what follows."""
        client = self.api.redis
        if client is None:
            return "0-0"
        streams = AsyncEventStreams(client, Keyspace(self.api.namespace))
        key = Keyspace(self.api.namespace).events(await streams.tag(root_id), root_id)
        newest = await client.xrevrange(key, count=1)
        if not newest:
            return "0-0"
        raw = newest[0][0]
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    # -- reads ---------------------------------------------------------------------------
    def _tenant(self, caller: Caller) -> str | None:
        return None if caller.every_tenant else caller.tenant

    def _home(
        self, caller: Caller, query: ListQuery, with_inbox: bool = True
    ) -> tuple[list[AgentTurnSnapshot], Page]:
        store = self.api.runner.store
        tenant = query.tenant if caller.every_tenant else caller.tenant
        inbox: list[AgentTurnSnapshot] = []
        if with_inbox:
            for status in INBOX:
                waiting = ListQuery(status=status, limit=100)
                inbox += list_page(store, waiting, self._tenant(caller), store.load).turns
            inbox.sort(key=lambda s: s.updated_at)
        page = list_page(store, query, tenant, store.load)
        return inbox, page

    def _tree(self, caller: Caller, root_id: str) -> list[tuple[int, AgentTurnSnapshot]]:
        """The turns of a tree, depth first, with their depth (the caller's tenant only)."""
        store = self.api.runner.store
        out: list[tuple[int, AgentTurnSnapshot]] = []
        stack = [(0, root_id)]
        while stack and len(out) < 500:
            depth, turn_id = stack.pop()
            try:
                snapshot = store.load(turn_id)
            except TurnNotFoundError:
                continue
            if not caller.may_see(snapshot.metadata):
                continue
            out.append((depth, snapshot))
            children = store.children_of(turn_id)
            stack.extend((depth + 1, child) for child in reversed(children))
        return out


#: Console pages load only their own script and style, and no other site may frame them
#: (an Approve button under someone else's page would be clickjacking).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _html(content: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(content, status_code=status_code, headers=SECURITY_HEADERS)


async def _login_form(request: Request) -> str:
    """The token of the sign-in form (urlencoded); the route is public, so read 4 KiB at most."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > LOGIN_BODY_BYTES:
            raise ApiError(413, "the sign-in form is too large")
    try:
        values = parse_qs(raw.decode("utf-8", "replace"), max_num_fields=5)
    except ValueError:
        raise ApiError(422, "the sign-in form has too many fields") from None
    return values.get("token", [""])[0]


def _page_of(request: Request) -> int:
    """The waterfall page asked for (1 when none or not a number)."""
    raw = request.query_params.get("page", "1")
    return int(raw) if raw.isdigit() and 0 < int(raw) < 1_000_000 else 1


def _list_params(request: Request) -> dict[str, str]:
    """The list filters of the page's query string (empty ones dropped)."""
    keep = ("status", "agent", "tenant", "conversation", "root_only", "cursor")
    return {k: v for k, v in request.query_params.items() if k in keep and v}


def console_routes(api: TurnsApi) -> list[BaseRoute]:
    """The console's routes; the guard lets only login, logout and static files through."""
    console = Console(api)
    return [
        Route("/console/login", console.login_form, methods=["GET"]),
        Route("/console/login", console.login, methods=["POST"]),
        Route("/console/logout", console.logout, methods=["GET"]),
        Route("/console", console.home, methods=["GET"]),
        Route("/console/turns/{turn_id}", console.turn, methods=["GET"]),
        Route("/console/fragments/turns", console.turns_fragment, methods=["GET"]),
        Route("/console/fragments/inbox", console.inbox_fragment, methods=["GET"]),
        Route("/console/overview", console.overview, methods=["GET"]),
        Route("/console/fragments/turns/{turn_id}", console.turn_fragment, methods=["GET"]),
        Route(
            "/console/fragments/turns/{turn_id}/transcript",
            console.transcript_fragment,
            methods=["GET"],
        ),
        Route(
            "/console/fragments/turns/{turn_id}/waterfall",
            console.waterfall_fragment,
            methods=["GET"],
        ),
        Mount("/console/static", StaticFiles(directory=STATIC), name="console-static"),
    ]
