"""A scripted local server speaking the Chat Completions protocol (JSON and SSE), for tests.

Each POST to ``/v1/chat/completions`` takes the next scripted ``Reply`` and records the
request body, so a test can assert on what reached the wire. A reply may ``require``
something of the request and answer 400 without it, as DeepSeek and Gemini refuse a tool
loop whose reasoning or signatures were dropped. SSE chunks with a ``type`` go out as
named events when ``named`` is set (the Responses API's stream). Nothing here talks to a
hosted service.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: a JSON body, raw bytes, or SSE chunks (``[DONE]`` is appended)."""

    status: int = 200
    body: Any = None
    raw: bytes | None = None
    chunks: list[Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    #: ``require(body)``: why the request is refused (answered 400), or None to answer.
    require: Callable[[dict[str, Any]], str | None] | None = None
    #: Send each SSE chunk's ``type`` as its ``event:`` line, and no ``[DONE]``.
    named: bool = False


@dataclass
class Received:
    """One request as the server saw it (header names lower-cased)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ChatServer:
    """A ``ThreadingHTTPServer`` on a free loopback port, answering from a script."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> ChatServer:
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
            if self.replies:
                return self.replies.popleft()
        return error(599, "chat_server: no scripted reply left")

    @property
    def last_body(self) -> dict[str, Any]:
        return self.requests[-1].body


def _handler_for(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            body = json.loads(raw) if raw else {}
            reply = server.take(
                Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            refused = reply.require(body) if reply.require else None
            if refused is not None:
                reply = error(400, refused, code="invalid_request_error")
            time.sleep(reply.delay)
            try:
                if reply.chunks is not None:
                    self._send_sse(reply)
                else:
                    self._send_json(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def _send_json(self, reply: Reply) -> None:
            payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def _send_sse(self, reply: Reply) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            chunks = reply.chunks or []
            for chunk in chunks if reply.named else [*chunks, "[DONE]"]:
                data = chunk if isinstance(chunk, str) else json.dumps(chunk)
                named = reply.named and isinstance(chunk, dict) and "type" in chunk
                event = f"event: {chunk['type']}\n" if named else ""
                self.wfile.write(f"{event}data: {data}\n\n".encode())
                self.wfile.flush()

    return Handler


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- wire payloads ----------------------------------------------------------------------


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(
    text: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    **message_extra: Any,
) -> Reply:
    """A JSON chat completion with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": text, **message_extra}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }
    return Reply(body=body)


def chunk(
    delta: dict[str, Any] | None = None, *, finish_reason: str | None = None, **extra: Any
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` gives the usage-only final chunk."""
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    choices = [] if delta is None else [choice]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "test-model",
        "choices": choices,
        **extra,
    }


def finish(reason: str = "stop") -> dict[str, Any]:
    """The chunk that ends a streamed answer (before the usage chunk, if one is asked for)."""
    return chunk({}, finish_reason=reason)


def tool_delta(
    index: int, arguments: str, call_id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """A delta carrying one piece of a tool call (id and name only on the first piece)."""
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        call.update(id=call_id, type="function")
        call["function"]["name"] = name
    return {"tool_calls": [call]}


def error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    type: str = "error",  # noqa: A002
    headers: dict[str, str] | None = None,
) -> Reply:
    """An error reply in OpenAI's ``{"error": {...}}`` shape."""
    body = {"error": {"message": message, "type": type, "param": None, "code": code}}
    return Reply(status=status, body=body, headers=headers or {})
