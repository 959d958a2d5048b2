"""Our messages and tools in the block format of Anthropic's Messages API.

Thinking blocks (and redacted ones) that an Anthropic model gave are kept in
``AiMessage.provider_data["anthropic"]["thinking"]`` exactly as they came and are sent back
first in that assistant message: the API checks their signatures on a follow-up request.
Data of other providers is never sent.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any, assert_never

from runner_core._engine.frozen import thaw
from runner_core.messages import (
    AiMessage,
    ContentPart,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from runner_core.models.base import ModelError, ToolSpec

PROVIDER = "anthropic"
"""The key of this provider's entry in ``provider_data``."""

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
"""Blocks replayed verbatim: the API verifies their ``signature`` / ``data``."""

_DATA_URL = re.compile(r"^data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)

Block = dict[str, Any]
WireMessage = dict[str, Any]


def to_wire_system(
    messages: Sequence[Message], cache_control: Mapping[str, Any] | None
) -> list[Block]:
    """The system instructions as text blocks, the last one marked for caching."""
    texts = [m.text for m in messages if isinstance(m, SystemMessage) and m.text]
    blocks = [{"type": "text", "text": value} for value in texts]
    _mark_last(blocks, cache_control)
    return blocks


def to_wire_messages(
    messages: Sequence[Message], cache_control: Mapping[str, Any] | None = None
) -> list[WireMessage]:
    """The conversation as alternating user/assistant messages of content blocks.

    Consecutive messages of one role are merged into one (so consecutive tool results go
    back in one user message, before any user text that follows them); an assistant
    message with nothing to send is left out. With ``cache_control`` the last block of the
    last message is a cache breakpoint.
    """
    wire: list[WireMessage] = []
    for message in messages:
        role, blocks = _blocks_of(message)
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    if wire:
        _mark_last(wire[-1]["content"], cache_control)
    return wire


def to_wire_tools(
    specs: Sequence[ToolSpec], cache_control: Mapping[str, Any] | None = None
) -> list[Block]:
    """Tool specs as Anthropic tool definitions, the last one marked for caching."""
    tools: list[Block] = []
    for spec in specs:
        tool: Block = {
            "name": spec.name,
            "input_schema": spec.parameters or {"type": "object", "properties": {}},
        }
        if spec.description:
            tool["description"] = spec.description
        tools.append(tool)
    _mark_last(tools, cache_control)
    return tools


def own_data(provider_data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The Anthropic entry of a message's ``provider_data`` (a plain copy), or ``{}``."""
    entry = (provider_data or {}).get(PROVIDER)
    return thaw(entry) if isinstance(entry, Mapping) else {}


def _blocks_of(message: Message) -> tuple[str, list[Block]]:
    if isinstance(message, SystemMessage):
        return "system", []  # sent as ``system``, see to_wire_system
    if isinstance(message, UserMessage):
        return "user", _user_blocks(message.content)
    if isinstance(message, AiMessage):
        return "assistant", _assistant_blocks(message)
    if isinstance(message, ToolMessage):
        result: Block = {"type": "tool_result", "tool_use_id": message.call_id}
        if message.content:
            result["content"] = message.content
        if message.is_error:
            result["is_error"] = True
        return "user", [result]
    assert_never(message)


def _user_blocks(content: str | Sequence[ContentPart]) -> list[Block]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[Block] = []
    for part in content:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        else:
            blocks.append({"type": "image", "source": _image_source(part)})
    return blocks


def _image_source(part: ImagePart) -> Block:
    """A ``data:`` URL as a base64 source, any other URL as an url source."""
    match = _DATA_URL.match(part.url)
    if match is None:
        return {"type": "url", "url": part.url}
    data = match["data"]
    try:
        base64.b64decode(data, validate=True)
    except ValueError as err:
        raise ModelError(f"{PROVIDER}: an image's data URL is not base64: {err}") from err
    return {"type": "base64", "media_type": part.media_type or match["media"], "data": data}


def _assistant_blocks(message: AiMessage) -> list[Block]:
    """Own thinking blocks first (as they came), then text, then tool uses.

    Thinking that came between tool uses (interleaved thinking) goes back after the same
    number of tool uses (``thinking_after_calls``).
    """
    data = own_data(message.provider_data)
    thinking = [
        block
        for block in data.get("thinking", ())
        if isinstance(block, dict) and block.get("type") in THINKING_TYPES
    ]
    placement = data.get("thinking_after_calls")
    if not isinstance(placement, list) or len(placement) != len(thinking):
        placement = [0] * len(thinking)
    last = len(message.tool_calls)
    after = [min(n, last) if isinstance(n, int) else 0 for n in placement]
    blocks = [block for block, n in zip(thinking, after, strict=True) if n == 0]
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    for number, call in enumerate(message.tool_calls, start=1):
        arguments = thaw(call.arguments)
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
        blocks.extend(block for block, n in zip(thinking, after, strict=True) if n == number)
    return blocks


def _mark_last(blocks: list[Block], cache_control: Mapping[str, Any] | None) -> None:
    if cache_control and blocks:
        blocks[-1] = {**blocks[-1], "cache_control": dict(cache_control)}
