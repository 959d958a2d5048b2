"""A small typed client of the HTTP API (docs/http.md), on the standard library only.

    client = AgentworkerClient("http://localhost:8000", token="...")
    turn = client.start("order-support", "Where is order 42?", turn_id="order-42-q1")
    turn = client.wait(turn.id)                      # until it blocks or ends
    if turn.status == "WAITING_FOR_APPROVAL":        # every call of a response at once
        waiting = [c["call_id"] for c in turn.suspension["waiting_calls"]]
        client.approve_tools(turn.id, waiting)       # or reject_tools({id: reason})

With ``secret=`` instead of ``token=``, writes are signed (Standard Webhooks, bound to the
method and path). Errors raise ``HttpApiError`` with the status, the error's type, message
and field, and ``retry_after`` when the server sent one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from runner_core.errors import AgentWorkerError

T = TypeVar("T")


class Counters(BaseModel):
    """How far a turn went."""

    iterations: int
    steps: int
    tool_calls: int
    retries: int


class Usage(BaseModel):
    """Tokens a turn used."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    #: The part of ``input_tokens`` read from the provider's prompt cache.
    cached_input_tokens: int = 0
    #: The part of ``output_tokens`` the model spent reasoning.
    reasoning_tokens: int = 0


class TurnView(BaseModel):
    """A turn as the API shows it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    root_turn_id: str
    parent_turn_id: str | None
    agent_id: str
    agent_version: str | None
    conversation_id: str | None
    status: str
    phase: str
    version: int
    suspension: dict[str, Any] | None
    next_runnable_at: float | None
    counters: Counters
    usage: Usage
    progress: dict[str, Any] | None
    final_output: str | None
    output: Any = Field(
        default=None,
        description="The validated final output as JSON (an agent with an output_type).",
    )
    error: dict[str, Any] | None
    terminal_reason: str | None
    cancel_requested: bool
    metadata: dict[str, Any]
    children: list[str]
    created_at: float
    updated_at: float

    def output_as(self, output_type: type[T]) -> T | None:
        """``output`` validated into ``output_type`` (None before the turn completed)."""
        if self.output is None:
            return None
        return TypeAdapter(output_type).validate_python(self.output)


class TurnPage(BaseModel):
    """``GET /turns``: one page and the cursor of the next (None at the end)."""

    turns: list[TurnView]
    next_cursor: str | None


class HttpApiError(AgentWorkerError):
    """Raised when the HTTP API answers with an error status."""

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"HTTP {status} {type}: {message}")
        self.status = status
        self.type = type
        self.message = message
        self.field = field
        self.retry_after = retry_after


class AgentworkerClient:
    """Calls the HTTP API with a bearer token (reads and writes) or a signing secret (writes)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        secret: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.secret = secret
        self.timeout = timeout

    # -- writes -------------------------------------------------------------------------
    def start(
        self,
        agent: str,
        input: str,
        *,
        turn_id: str | None = None,
        conversation_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        streaming: bool = False,
        idempotency_key: str | None = None,
    ) -> TurnView:
        """``POST /turns``; with ``turn_id`` a retried start answers the same turn."""
        body: dict[str, Any] = {"agent": agent, "input": input, "streaming": streaming}
        if turn_id is not None:
            body["turn_id"] = turn_id
        if conversation_id is not None:
            body["conversation_id"] = conversation_id
        if metadata:
            body["metadata"] = dict(metadata)
        return TurnView.model_validate(self._post("/turns", body, idempotency_key))

    def resume(
        self,
        turn_id: str,
        command: str,
        *,
        call_id: str | None = None,
        reason: str = "",
        data: str | Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        call_ids: Iterable[str] | None = None,
        reasons: Mapping[str, str] | None = None,
    ) -> TurnView:
        """``POST /turns/{id}/resume`` with one of the resume commands."""
        body: dict[str, Any] = {"command": command}
        if reason:
            body["reason"] = reason
        if call_id is not None:
            body["call_id"] = call_id
        if call_ids is not None:
            body["call_ids"] = list(call_ids)
        if reasons is not None:
            body["reasons"] = dict(reasons)
        if data is not None:
            body["data"] = data if isinstance(data, str) else dict(data)
        if metadata:
            body["metadata"] = dict(metadata)
        path = f"/turns/{_quote(turn_id)}/resume"
        return TurnView.model_validate(self._post(path, body, request_id))

    def approve(self, turn_id: str, call_id: str, reason: str = "") -> TurnView:
        """Approve the waiting tool call."""
        return self.resume(turn_id, "approve_tool", call_id=call_id, reason=reason)

    def reject(self, turn_id: str, call_id: str, reason: str) -> TurnView:
        """Reject the waiting tool call, telling the model why."""
        return self.resume(turn_id, "reject_tool", call_id=call_id, reason=reason)

    def approve_tools(
        self, turn_id: str, call_ids: Iterable[str], request_id: str | None = None
    ) -> TurnView:
        """Approve some or all of the calls the turn waits on (the others keep it waiting)."""
        return self.resume(turn_id, "approve_tools", call_ids=call_ids, request_id=request_id)

    def reject_tools(
        self, turn_id: str, reasons: Mapping[str, str], request_id: str | None = None
    ) -> TurnView:
        """Reject some or all of the calls the turn waits on, each with what the model hears."""
        return self.resume(turn_id, "reject_tools", reasons=reasons, request_id=request_id)

    def cancel(self, turn_id: str, reason: str | None = None) -> TurnView:
        """``POST /turns/{id}/cancel``."""
        body = {"reason": reason} if reason is not None else {}
        return TurnView.model_validate(self._post(f"/turns/{_quote(turn_id)}/cancel", body))

    # -- reads --------------------------------------------------------------------------
    def get(self, turn_id: str) -> TurnView:
        """``GET /turns/{id}``."""
        return TurnView.model_validate(self._get(f"/turns/{_quote(turn_id)}"))

    def wait(self, turn_id: str, until: str = "blocked", timeout: float = 30.0) -> TurnView:
        """``GET /turns/{id}/wait``: the turn once it blocks (or ends), or at the timeout."""
        query = urllib.parse.urlencode({"until": until, "timeout": timeout})
        answer = self._get(f"/turns/{_quote(turn_id)}/wait?{query}", timeout + 10)
        return TurnView.model_validate(answer)

    def list(self, **filters: str | float | bool | None) -> TurnPage:
        """``GET /turns`` with filters (status, agent, tenant, tree, root_only, ...)."""
        query = {k: _param(v) for k, v in filters.items() if v is not None}
        suffix = "?" + urllib.parse.urlencode(query) if query else ""
        return TurnPage.model_validate(self._get("/turns" + suffix))

    def iter_turns(self, **filters: str | float | bool | None) -> Iterator[TurnView]:
        """Every turn matching the filters, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = self.list(**filters, cursor=cursor)
            yield from page.turns
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- plumbing -----------------------------------------------------------------------
    def _post(self, path: str, body: dict[str, Any], request_id: str | None = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.token is not None:
            raw = json.dumps(body).encode()
            headers["Authorization"] = f"Bearer {self.token}"
            if request_id is not None:
                headers["Idempotency-Key"] = request_id
        elif self.secret is not None:
            from agentworker.http.auth import signed_headers, target_of

            raw = json.dumps({**body, "target": target_of("POST", path)}).encode()
            headers.update(signed_headers(self.secret, raw, request_id or uuid.uuid4().hex))
        else:
            raise HttpApiError(401, "Unauthorized", "the client has no token or secret")
        return self._call("POST", path, raw, headers, self.timeout)

    def _get(self, path: str, timeout: float | None = None) -> Any:
        if self.token is None:
            raise HttpApiError(401, "Unauthorized", "reads need a token")
        headers = {"Authorization": f"Bearer {self.token}"}
        return self._call("GET", path, None, headers, timeout or self.timeout)

    def _call(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float
    ) -> Any:
        request = urllib.request.Request(
            self.base_url + path, data=body, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            raise _error_of(error) from None


def _error_of(error: urllib.error.HTTPError) -> HttpApiError:
    try:
        detail = json.loads(error.read()).get("error", {})
    except ValueError:
        detail = {}
    retry = error.headers.get("Retry-After")
    return HttpApiError(
        error.code,
        str(detail.get("type", "Error")),
        str(detail.get("message", error.reason)),
        detail.get("field"),
        float(retry) if retry else None,
    )


def _quote(turn_id: str) -> str:
    return urllib.parse.quote(turn_id, safe="")


def _param(value: str | float | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
