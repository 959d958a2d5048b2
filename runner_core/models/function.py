"""FunctionModel: a model backed by a Python function, for tests and offline demos."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import Any

from runner_core._engine import aio
from runner_core.messages import AiMessage, ToolCall
from runner_core.models.base import (
    NO_USAGE,
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

GenerateFn = Callable[[ModelRequest], Any]
"""``fn(request)``: an ``AiMessage``, ``ModelResponse`` or text (or a coroutine of one)."""
StreamFn = Callable[[ModelRequest], Any]
"""``stream_fn(request)``: an iterable or async iterable of text and delta pieces."""

Piece = str | TextDelta | ReasoningDelta | ToolCallDelta


class FunctionModel:
    """A deterministic model: ``fn(request)`` returns an ``AiMessage``, ``ModelResponse`` or text.

    The streaming form takes ``stream_fn(request)``, which yields text (``str`` or
    ``TextDelta``), ``ReasoningDelta`` and ``ToolCallDelta`` pieces; the model assembles the
    complete response (tool-call arguments are JSON text, joined across pieces).

    Either may be async (``async def fn``, an async generator ``stream_fn``): then the
    runner awaits it on the process event loop (``prefers_async``), bounded by the step's
    deadline; the sync methods still work for direct callers and wait on that loop.
    """

    def __init__(self, fn: GenerateFn | None = None, *, stream_fn: StreamFn | None = None) -> None:
        if fn is None and stream_fn is None:
            raise ValueError("FunctionModel needs fn or stream_fn")
        self._fn = fn
        self._stream_fn = stream_fn
        #: True when ``fn`` or ``stream_fn`` is async: the runner uses ``agenerate``/``astream``.
        self.prefers_async = aio.is_async_callable(fn) or aio.is_async_generator_callable(stream_fn)

    def generate(self, request: ModelRequest) -> ModelResponse:
        """Call ``fn`` (or drain the stream) and normalise the result."""
        if self.prefers_async:
            return aio.run(self.agenerate(request))
        if self._fn is None:
            return _drained(self.stream(request))
        result = self._fn(request)
        if not isinstance(result, AiMessage | ModelResponse | str) and inspect.isawaitable(result):
            result = aio.run(_awaited(result))  # a sync function handing back a coroutine
        return _to_response(result)

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Yield the pieces of ``stream_fn`` (or one text delta of ``fn``), then ``StreamDone``."""
        if self.prefers_async:
            yield from aio.iterate(self.astream(request))
            return
        if self._stream_fn is None:
            yield from _single(self.generate(request))
            return
        assembler = StreamAssembler()
        for piece in self._stream_fn(request):
            yield assembler.take(piece)
        yield StreamDone(ModelResponse(assembler.message(), Usage()))

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        """Await ``fn`` (or drain the stream) and normalise the result."""
        if self._fn is None:
            async for event in self.astream(request):
                if isinstance(event, StreamDone):
                    return event.response
            raise ModelError("stream ended without a response", retryable=True)
        result = self._fn(request)
        if inspect.isawaitable(result):
            result = await result
        return _to_response(result)

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """The async form of ``stream``: pieces of a sync or async ``stream_fn``."""
        if self._stream_fn is None:
            for event in _single(await self.agenerate(request)):
                yield event
            return
        assembler = StreamAssembler()
        pieces = self._stream_fn(request)
        if isinstance(pieces, AsyncIterable):
            async for piece in pieces:
                yield assembler.take(piece)
        else:
            for piece in pieces:
                yield assembler.take(piece)
        yield StreamDone(ModelResponse(assembler.message(), Usage()))


async def _awaited(value: Any) -> Any:
    return await value


def _single(response: ModelResponse) -> Iterator[ModelStreamEvent]:
    if response.message.text:
        yield TextDelta(response.message.text)
    yield StreamDone(response)


def _drained(events: Iterable[ModelStreamEvent]) -> ModelResponse:
    for event in events:
        if isinstance(event, StreamDone):
            return event.response
    raise ModelError("stream ended without a response", retryable=True)


class StreamAssembler:
    """Joins stream deltas into one ``AiMessage`` (tool-call arguments parsed as JSON)."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}

    def take(self, piece: Piece) -> ModelStreamEvent:
        """Take one piece (text is a ``TextDelta``) into account and return it as an event."""
        event: ModelStreamEvent = TextDelta(piece) if isinstance(piece, str) else piece
        self.add(event)
        return event

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
            ToolCall(
                id=c["id"] or "", name=c["name"], arguments=parse_arguments("".join(c["args"]))
            )
            for _, c in sorted(self._calls.items())
        ]
        return AiMessage(
            text="".join(self._text) or None,
            tool_calls=calls,
            reasoning="".join(self._reasoning) or None,
        )


def parse_arguments(raw: str) -> dict[str, Any]:
    """Streamed JSON arguments; anything but an object is kept for the runner to reject."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {INVALID_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS_KEY: raw}


INVALID_ARGUMENTS_KEY = "__invalid_json__"
"""Marks tool-call arguments that were not a JSON object; the runner answers with an error."""


def _to_response(result: Any) -> ModelResponse:
    if isinstance(result, ModelResponse):
        return result
    if isinstance(result, AiMessage):
        return ModelResponse(result, NO_USAGE)
    if isinstance(result, str):
        return ModelResponse(AiMessage(result), NO_USAGE)
    if inspect.iscoroutine(result):
        result.close()
    raise ModelError(f"FunctionModel returned {type(result).__name__}, not a response")
