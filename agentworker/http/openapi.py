"""``GET /openapi.json``: the API described from the same pydantic models that validate it.

Request bodies are the models the routes validate with; answers are the models the typed
client (``agentworker.client``) parses them into.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentworker.client import TurnPage, TurnView
from agentworker.http.listing import ListQuery
from agentworker.http.schemas import CancelBody, ResumeBody, StartBody


class ErrorDetail(BaseModel):
    """What went wrong."""

    type: str
    message: str
    field: str | None = None


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {...}}``."""

    error: ErrorDetail


MODELS: tuple[type[BaseModel], ...] = (
    StartBody,
    ResumeBody,
    CancelBody,
    TurnView,
    TurnPage,
    ErrorBody,
)
ERRORS = {
    "401": "missing or bad credentials",
    "403": "the credential lacks the scope",
    "404": "no such turn for this tenant",
    "409": "conflict (see docs/http.md)",
    "413": "body too large",
    "422": "invalid request",
    "503": "store unavailable (Retry-After)",
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": _ref(model)}}}


def _op(summary: str, ok: str, answer: type[BaseModel] | None, body: Any = None) -> Any:
    responses: dict[str, Any] = {ok: {"description": summary, **(_json(answer) if answer else {})}}
    responses.update(
        {code: {"description": text, **_json(ErrorBody)} for code, text in ERRORS.items()}
    )
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": body is not CancelBody, **_json(body)}
    return op


def _path_param() -> list[dict[str, Any]]:
    return [{"name": "turn_id", "in": "path", "required": True, "schema": {"type": "string"}}]


def _query_params() -> list[dict[str, Any]]:
    schema = ListQuery.model_json_schema()
    return [
        {"name": name, "in": "query", "required": False, "schema": prop}
        for name, prop in schema["properties"].items()
    ]


@cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API."""
    _, defs = models_json_schema(
        [(m, "validation") for m in MODELS], ref_template="#/components/schemas/{model}"
    )
    turn = "/turns/{turn_id}"
    wait = _op("the turn once it blocks or ends, or at the timeout", "200", TurnView)
    wait["parameters"] = [
        *_path_param(),
        {"name": "until", "in": "query", "schema": {"enum": ["blocked", "ended"]}},
        {"name": "timeout", "in": "query", "schema": {"type": "number", "maximum": 60}},
    ]
    listing = _op("turns, newest first", "200", TurnPage)
    listing["parameters"] = _query_params()
    paths: dict[str, Any] = {
        "/turns": {"post": _op("start a turn", "201", TurnView, StartBody), "get": listing},
        turn: {"get": {**_op("a turn", "200", TurnView), "parameters": _path_param()}},
        turn + "/wait": {"get": wait},
        turn + "/resume": {
            "post": {
                **_op("resume a turn", "200", TurnView, ResumeBody),
                "parameters": _path_param(),
            }
        },
        turn + "/cancel": {
            "post": {
                **_op("cancel a turn", "200", TurnView, CancelBody),
                "parameters": _path_param(),
            }
        },
        turn + "/events": {
            "get": {
                "summary": "the tree's events (text/event-stream)",
                "parameters": _path_param(),
                "responses": {"200": {"description": "SSE"}, "204": {"description": "over"}},
            }
        },
        "/healthz": {"get": {"summary": "alive", "responses": {"200": {"description": "ok"}}}},
        "/readyz": {
            "get": {
                "summary": "the store answers",
                "responses": {"200": {"description": "ready"}, "503": {"description": "not"}},
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentworker", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": defs["$defs"],
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "webhook": {"type": "apiKey", "in": "header", "name": "webhook-signature"},
            },
        },
        "security": [{"bearer": []}, {"webhook": []}],
    }


async def _serve(request: Request) -> JSONResponse:
    return JSONResponse(openapi_document())


def openapi_route() -> Route:
    """The route of the document (public: it describes, it grants nothing)."""
    return Route("/openapi.json", _serve, methods=["GET"])


if __name__ == "__main__":  # python -m agentworker.http.openapi > docs/openapi.json
    import json
    import sys

    sys.stdout.write(json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n")
