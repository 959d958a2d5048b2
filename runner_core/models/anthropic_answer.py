"""Anthropic answers (a message or its stream of events) as our deltas and one response.

Both paths go through ``AnswerAssembler``: a complete message is fed as if it had streamed,
so the checks (unknown blocks, a tool call cut by ``max_tokens``, an empty answer) are the
same. Everything arrives as plain JSON dicts (the SDK's objects dumped), so the assembler
does not depend on the SDK version's classes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from runner_core.messages import AiMessage, ToolCall
from runner_core.models.anthropic_wire import PROVIDER
from runner_core.models.base import (
    ModelError,
    ModelResponse,
    ModelStreamEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from runner_core.models.function import INVALID_ARGUMENTS_KEY, parse_arguments

Block = dict[str, Any]

#: The delta types each block type takes while it streams (citations are not kept).
DELTAS = {
    "text": frozenset({"text_delta", "citations_delta"}),
    "thinking": frozenset({"thinking_delta", "signature_delta"}),
    "redacted_thinking": frozenset[str](),
    "tool_use": frozenset({"input_json_delta"}),
}

#: The field of each delta type that holds its piece (the block's field of the same name).
DELTA_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
    "input_json_delta": "partial_json",
}

#: Stop reasons that cut the answer short: a tool call in such an answer is incomplete.
CUT_SHORT = frozenset({"max_tokens", "model_context_window_exceeded"})

#: The fields of a thinking block that the API wants back, per block type.
THINKING_FIELDS = {
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}


def dumped(value: Any) -> Any:
    """An SDK object as plain JSON (dicts and lists); plain values as they are."""
    dump = getattr(value, "model_dump", None)
    if not callable(dump):
        return [dumped(v) for v in value] if isinstance(value, list) else value
    try:
        return dump(mode="json", warnings=False)
    except TypeError:  # pydantic before 2.8 cannot dump a model the SDK built unvalidated
        return {k: dumped(v) for k, v in vars(value).items() if not k.startswith("_")}


class AnswerAssembler:
    """Joins the events of one answer into deltas for listeners and one ``ModelResponse``."""

    def __init__(self) -> None:
        self._blocks: dict[int, Block] = {}
        self._json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._stopped = False

    def message(self, message: Mapping[str, Any]) -> ModelResponse:
        """A complete (non-streamed) message as a response."""
        content = message.get("content")
        if message.get("type") != "message" or not isinstance(content, list):
            raise ModelError(
                f"{PROVIDER}: the server answered something other than a message: "
                f"{json.dumps(message)[:200]}",
                retryable=True,
            )
        self._start(message)
        for index, block in enumerate(content):
            for _ in self._block_start(index, block):
                pass
        self._stop_reason = message.get("stop_reason")
        self._stopped = True
        return self.response()

    def event(self, event: Mapping[str, Any]) -> Iterator[ModelStreamEvent]:
        """Take one stream event into account and yield the deltas it carries."""
        kind = event.get("type")
        if kind == "message_start":
            self._start(event.get("message") or {})
        elif kind == "content_block_start":
            yield from self._block_start(_index(event), event.get("content_block") or {})
        elif kind == "content_block_delta":
            yield from self._block_delta(_index(event), event.get("delta") or {})
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self._stop_reason = delta.get("stop_reason") or self._stop_reason
            self._add_usage(event.get("usage"))
        elif kind == "message_stop":
            self._stopped = True
        # content_block_stop needs nothing; unknown event types are skipped, as the API's
        # versioning policy asks of clients.

    def response(self) -> ModelResponse:
        """The assembled answer; raise ``ModelError`` when it is cut, empty or unusable."""
        if not self._stopped:
            raise ModelError(f"{PROVIDER}: the stream ended before message_stop", retryable=True)
        blocks = [block for _, block in sorted(self._blocks.items())]
        texts = [b.get("text") or "" for b in blocks if b["type"] == "text"]
        calls = [self._call(index, b) for index, b in sorted(self._blocks.items())
                 if b["type"] == "tool_use"]  # fmt: skip
        thinking = [_thinking(b) for b in blocks if b["type"] in THINKING_FIELDS]
        text = "".join(texts) or None
        self._check(text, calls)
        data: dict[str, Any] = {"stop_reason": self._stop_reason}
        if thinking:
            data["thinking"] = thinking
        placement = _calls_before_thinking(blocks)
        if any(placement):
            data["thinking_after_calls"] = placement
        reasoning = [b["thinking"] for b in thinking if b.get("thinking")]
        message = AiMessage(
            text=text,
            tool_calls=calls,
            reasoning="\n".join(reasoning) or None,
            provider_data={PROVIDER: data},
        )
        return ModelResponse(message, self._our_usage())

    def _check(self, text: str | None, calls: list[ToolCall]) -> None:
        stop = self._stop_reason
        if calls and stop in CUT_SHORT:
            raise ModelError(
                f"{PROVIDER}: the answer was cut at {stop} with the tool call "
                f"{calls[-1].name!r} in it; raise max_tokens"
            )
        if text is None and not calls:
            if stop == "refusal":
                raise ModelError(f"{PROVIDER}: the model refused to answer (stop_reason refusal)")
            raise ModelError(
                f"{PROVIDER}: the answer holds no text and no tool call (stop_reason {stop})",
                retryable=True,
            )

    def _start(self, message: Mapping[str, Any]) -> None:
        self._add_usage(message.get("usage"))

    def _block_start(self, index: int, block: Mapping[str, Any]) -> Iterator[ModelStreamEvent]:
        kind = block.get("type")
        if kind not in DELTAS:
            raise ModelError(
                f"{PROVIDER}: the answer holds a block of unknown type {kind!r} (block {index})"
            )
        if index in self._blocks:
            raise ModelError(f"{PROVIDER}: block {index} started twice", retryable=True)
        self._blocks[index] = dict(block)
        if kind == "text" and block.get("text"):
            yield TextDelta(block["text"])
        elif kind == "thinking" and block.get("thinking"):
            yield ReasoningDelta(block["thinking"])
        elif kind == "tool_use":
            yield ToolCallDelta(index, block.get("id") or None, block.get("name") or None)

    def _block_delta(self, index: int, delta: Mapping[str, Any]) -> Iterator[ModelStreamEvent]:
        block = self._blocks.get(index)
        if block is None:
            raise ModelError(f"{PROVIDER}: a delta for block {index}, never started", True)
        kind = delta.get("type")
        if kind not in DELTAS[block["type"]]:
            raise ModelError(
                f"{PROVIDER}: a delta of unknown type {kind!r} for the {block['type']} "
                f"block {index}"
            )
        if kind == "citations_delta":
            return
        field = DELTA_FIELDS[kind]
        piece = delta.get(field)
        if not isinstance(piece, str):
            raise ModelError(f"{PROVIDER}: a {kind} without its {field} (block {index})", True)
        if kind == "input_json_delta":
            self._json.setdefault(index, []).append(piece)
            yield ToolCallDelta(index, arguments=piece)
            return
        block[field] = (block.get(field) or "") + piece
        if kind == "text_delta":
            yield TextDelta(piece)
        elif kind == "thinking_delta":
            yield ReasoningDelta(piece)

    def _call(self, index: int, block: Block) -> ToolCall:
        """A tool use as our call; a call without an id keeps ``""`` for the runner to name."""
        pieces = self._json.get(index)
        if pieces is None:
            arguments = block.get("input")
            if not isinstance(arguments, dict):
                arguments = {INVALID_ARGUMENTS_KEY: json.dumps(arguments)}
        else:
            arguments = parse_arguments("".join(pieces))
        return ToolCall(id=block.get("id") or "", name=block.get("name") or "", arguments=arguments)

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, Mapping):
            self._usage.update((k, v) for k, v in usage.items() if v is not None)

    def _our_usage(self) -> Usage:
        u = self._usage
        cache_read = _count(u.get("cache_read_input_tokens"))
        written = _count(u.get("cache_creation_input_tokens"))
        details = u.get("output_tokens_details")
        thinking = details.get("thinking_tokens") if isinstance(details, Mapping) else None
        return Usage(
            input_tokens=_count(u.get("input_tokens")) + written + cache_read,
            output_tokens=_count(u.get("output_tokens")),
            cached_input_tokens=cache_read,
            reasoning_tokens=_count(thinking),
        )


def _index(event: Mapping[str, Any]) -> int:
    index = event.get("index")
    if not isinstance(index, int):
        raise ModelError(f"{PROVIDER}: a {event.get('type')} event without an index", True)
    return index


def _calls_before_thinking(blocks: list[Block]) -> list[int]:
    """For each thinking block, how many tool uses came before it (interleaved thinking)."""
    placement: list[int] = []
    calls = 0
    for block in blocks:
        if block["type"] == "tool_use":
            calls += 1
        elif block["type"] in THINKING_FIELDS:
            placement.append(calls)
    return placement


def _thinking(block: Block) -> Block:
    return {key: block.get(key) or "" for key in THINKING_FIELDS[block["type"]]}


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0
