"""Payloads of OpenAI's Responses API (``POST /v1/responses``), as its reference documents.

``ChatServer`` serves them: a JSON ``Reply`` for a response object, a ``named`` SSE reply
for a stream of events.
"""

from __future__ import annotations

import itertools
from typing import Any

from tests.support.chat_server import Reply


def reasoning(item_id: str, summary: str, encrypted: str) -> dict[str, Any]:
    """A reasoning item with a summary and its encrypted content."""
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": summary}],
        "encrypted_content": encrypted,
        "status": "completed",
    }


def function_call(item_id: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def message(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def usage(inp: int, out: int, cached: int = 0, reasoning_tokens: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": inp + out,
    }


def response_body(
    output: list[dict[str, Any]],
    *,
    status: str = "completed",
    use: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A response object (``store`` false, as the adapter asks)."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "model": "test-model",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "store": False,
        "error": None,
        "incomplete_details": None,
        "usage": use or usage(10, 5),
        **extra,
    }


def response(output: list[dict[str, Any]], **kwargs: Any) -> Reply:
    """A JSON reply holding one response object."""
    return Reply(body=response_body(output, **kwargs))


def stream(output: list[dict[str, Any]], *, complete: bool = True, **kwargs: Any) -> Reply:
    """The events streaming ``output``: each item added, its deltas, done; then completed.

    ``complete=False`` cuts the stream before ``response.completed``.
    """
    seq = itertools.count()
    body = response_body(output, **kwargs)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": next(seq),
         "response": {**body, "status": "in_progress", "output": []}},
    ]  # fmt: skip
    for index, item in enumerate(output):
        events.extend(_item_events(index, item, seq))
    if complete:
        events.append({"type": "response.completed", "sequence_number": next(seq),
                       "response": body})  # fmt: skip
    return Reply(chunks=events, named=True)


def _item_events(index: int, item: dict[str, Any], seq: itertools.count[int]) -> list[Any]:
    at = {"output_index": index, "item_id": item["id"]}
    added: dict[str, Any] = {**item}
    deltas: list[dict[str, Any]] = []
    if item["type"] == "function_call":
        added["arguments"] = ""
        for piece in _halves(item["arguments"]):
            deltas.append({"type": "response.function_call_arguments.delta", **at,
                           "delta": piece})  # fmt: skip
    elif item["type"] == "message":
        added["content"] = []
        for piece in _halves(item["content"][0]["text"]):
            deltas.append({"type": "response.output_text.delta", **at, "content_index": 0,
                           "delta": piece, "logprobs": []})  # fmt: skip
    elif item["type"] == "reasoning":
        added["summary"] = []
        for piece in _halves(item["summary"][0]["text"]):
            deltas.append({"type": "response.reasoning_summary_text.delta", **at,
                           "summary_index": 0, "delta": piece})  # fmt: skip
    events = [{"type": "response.output_item.added", "output_index": index, "item": added}]
    events += deltas
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    for event in events:
        event["sequence_number"] = next(seq)
    return events


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [p for p in (text[:middle], text[middle:]) if p]
