"""A scripted local server speaking Anthropic's Messages API (JSON and SSE), for tests.

Each POST to ``/v1/messages`` takes the next scripted ``Reply``, records the request body,
and runs the reply's ``expect`` on it first: a failed expectation is answered with a 400
``invalid_request_error`` naming it, as the real API refuses a thinking block whose
signature does not verify. Payloads follow the API reference: a message object, or the
events ``message_start``, ``content_block_start``/``_delta``/``_stop``, ``message_delta``,
``message_stop`` (and ``ping``, ``error``) with ``event:`` names. Nothing here talks to a
hosted service.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.chat_server import Received

Expect = Callable[[dict[str, Any]], None]


@dataclass
class Reply:
    """One scripted answer: a JSON body, raw bytes, or SSE events (``(name, data)`` pairs)."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    events: list[tuple[str, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Runs on the request body; an ``AssertionError`` becomes a 400 answer.
    expect: Expect | None = None
    #: Seconds to wait before answering (a timeout test).
    delay: float = 0.0


class AnthropicServer:
    """A ``ThreadingHTTPServer`` on a free loopback port, answering from a script."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        #: The expectations that failed, in order (a test asserts this stays empty).
        self.refused: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> AnthropicServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def take(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            reply = self.replies.popleft() if self.replies else None
        if reply is None:
            return error(500, "api_error", "anthropic_server: no scripted reply left")
        if reply.expect is not None:
            try:
                reply.expect(received.body)
            except AssertionError as failed:
                self.refused.append(str(failed) or "expectation failed")
                return error(400, "invalid_request_error", f"refused: {failed}")
        return reply

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]


def _handler_for(server: AnthropicServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            body = json.loads(raw) if raw else {}
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = server.take(Received(self.path, headers, body))
            time.sleep(reply.delay)
            try:
                if reply.events is not None:
                    self._send_sse(reply)
                else:
                    self._send_json(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _send_json(self, reply: Reply) -> None:
            payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("request-id", "req_test")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def _send_sse(self, reply: Reply) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            for name, data in reply.events or []:
                text = data if isinstance(data, str) else json.dumps(data)
                self.wfile.write(f"event: {name}\ndata: {text}\n\n".encode())
                self.wfile.flush()

    return Handler


# --- wire payloads ----------------------------------------------------------------------


def usage(
    input_tokens: int = 10, output_tokens: int = 5, *, cache_read: int = 0, cache_write: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": cache_write,
        "cache_read_input_tokens": cache_read,
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def thinking(value: str, signature: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": signature}


def redacted(data: str) -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": data}


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def message_body(
    *blocks: dict[str, Any], stop_reason: str | None = None, use: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A message object; ``stop_reason`` defaults to tool_use or end_turn by its blocks."""
    if stop_reason is None:
        calls = any(b["type"] == "tool_use" for b in blocks)
        stop_reason = "tool_use" if calls else "end_turn"
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": use or usage(),
    }


def message(
    *blocks: dict[str, Any], stop_reason: str | None = None, use: dict[str, Any] | None = None,
    expect: Expect | None = None,
) -> Reply:  # fmt: skip
    """A JSON message answer."""
    return Reply(body=message_body(*blocks, stop_reason=stop_reason, use=use), expect=expect)


def stream_events(
    *blocks: dict[str, Any], stop_reason: str | None = None, use: dict[str, Any] | None = None
) -> list[tuple[str, Any]]:
    """The SSE events streaming ``message(*blocks)``, each block's content in two deltas."""
    body = message_body(*blocks, stop_reason=stop_reason, use=use)
    use = body["usage"]
    start_usage = {k: v for k, v in use.items() if k != "output_tokens_details"}
    start_usage["output_tokens"] = 1
    end_usage = {k: v for k, v in use.items() if k in ("output_tokens", "output_tokens_details")}
    events: list[tuple[str, Any]] = [
        ("message_start", {"type": "message_start",
                           "message": {**body, "content": [], "stop_reason": None,
                                       "usage": start_usage}}),
        ("ping", {"type": "ping"}),
    ]  # fmt: skip
    for index, block in enumerate(blocks):
        events.extend(_block_events(index, block))
    events.append(
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                           "usage": end_usage})
    )  # fmt: skip
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def stream(
    *blocks: dict[str, Any], stop_reason: str | None = None, use: dict[str, Any] | None = None,
    expect: Expect | None = None,
) -> Reply:  # fmt: skip
    """A streamed answer."""
    return Reply(events=stream_events(*blocks, stop_reason=stop_reason, use=use), expect=expect)


def _block_events(index: int, block: dict[str, Any]) -> list[tuple[str, Any]]:
    kind = block["type"]
    if kind == "text":
        start, deltas = (
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": piece} for piece in _halves(block["text"])],
        )
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _halves(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        start = {**block, "input": {}}
        raw = json.dumps(block["input"])
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _halves(raw)]
    else:  # redacted_thinking and unknown blocks arrive whole
        start, deltas = block, []
    return [
        ("content_block_start", {"type": "content_block_start", "index": index,
                                 "content_block": start}),
        *[("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
          for d in deltas],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]  # fmt: skip


def _halves(value: str) -> list[str]:
    middle = len(value) // 2
    return [value[:middle], value[middle:]] if middle else [value]


def error(status: int, kind: str, message: str, *, headers: dict[str, str] | None = None) -> Reply:
    """An error answer in Anthropic's ``{"type": "error", "error": {...}}`` shape."""
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_t"}
    return Reply(status=status, body=body, headers=headers or {})


def error_event(kind: str, message: str) -> tuple[str, Any]:
    """An ``error`` event inside a stream."""
    return ("error", {"type": "error", "error": {"type": kind, "message": message}})
