"""FunctionModel: a model backed by a Python function, for tests and offline demos."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from runner_core.messages import AiMessage, ToolCall
from runner_core.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ReasoningDelta,
    StreamDone,
    TextDelta,
    ToolCallDelta,
    Usage,
)

GenerateFn = Callable[[ModelRequest], "AiMessage | ModelResponse | str"]
StreamFn = Callable[[ModelRequest], Iterable["str | TextDelta | ReasoningDelta | ToolCallDelta"]]


class FunctionModel:
    """A deterministic model: ``fn(request)`` returns an ``AiMessage``, ``ModelResponse`` or text.

    The streaming form takes ``stream_fn(request)``, which yields text (``str`` or
    ``TextDelta``), ``ReasoningDelta`` and ``ToolCallDelta`` pieces; the model assembles the
    complete response (tool-call arguments are JSON text, joined across pieces).
    """

    def __init__(self, fn: GenerateFn | None = None, *, stream_fn: StreamFn | None = None) -> None:
        if fn is None and stream_fn is None:
            raise ValueError("FunctionModel needs fn or stream_fn")
        self._fn = fn
        self._stream_fn = stream_fn

    def generate(self, request: ModelRequest) -> ModelResponse:
        """Call ``fn`` (or drain the stream) and normalise the result."""
        if self._fn is None:
            for event in self.stream(request):
                if isinstance(event, StreamDone):
                    return event.response
            raise ModelError("stream ended without a response", retryable=True)
        return _to_response(self._fn(request))

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Yield the pieces of ``stream_fn`` (or one text delta of ``fn``), then ``StreamDone``."""
        if self._stream_fn is None:
            response = self.generate(request)
            if response.message.text:
                yield TextDelta(response.message.text)
            yield StreamDone(response)
            return
        assembler = StreamAssembler()
        for piece in self._stream_fn(request):
            event: ModelStreamEvent = TextDelta(piece) if isinstance(piece, str) else piece
            assembler.add(event)
            yield event
        yield StreamDone(ModelResponse(assembler.message(), Usage()))


class StreamAssembler:
    """Joins stream deltas into one ``AiMessage`` (tool-call arguments parsed as JSON)."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}

    def add(self, event: ModelStreamEvent) -> None:
        """Take one delta into account."""
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = self._calls.setdefault(event.index, {"id": None, "name": "", "args": []})
            call["id"] = call["id"] or event.id
            call["name"] = call["name"] or (event.name or "")
            call["args"].append(event.arguments)

    def message(self) -> AiMessage:
        """The assembled message."""
        calls = [
            ToolCall(id=c["id"] or "", name=c["name"], arguments=_parse_args("".join(c["args"])))
            for _, c in sorted(self._calls.items())
        ]
        return AiMessage(
            text="".join(self._text) or None,
            tool_calls=calls,
            reasoning="".join(self._reasoning) or None,
        )


def _parse_args(raw: str) -> dict[str, Any]:
    """Parse streamed JSON arguments; malformed JSON is kept for the runner to reject."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {INVALID_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS_KEY: raw}


INVALID_ARGUMENTS_KEY = "__invalid_json__"
"""Marks tool-call arguments that were not a JSON object; the runner answers with an error."""


def _to_response(result: AiMessage | ModelResponse | str) -> ModelResponse:
    if isinstance(result, ModelResponse):
        return result
    if isinstance(result, AiMessage):
        return ModelResponse(result, Usage())
    if isinstance(result, str):
        return ModelResponse(AiMessage(result), Usage())
    raise ModelError(f"FunctionModel returned {type(result).__name__}, not a response")
