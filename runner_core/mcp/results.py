"""An MCP ``tools/call`` result as the text of our ToolMessage.

Text blocks are joined; a result with ``structuredContent`` is that value as JSON (servers
mirror it in a text block, which is then left out); images, audio and resources are
described in one line each, never dropped silently.
"""

from __future__ import annotations

import base64
import binascii
import json

from mcp import types


def result_text(result: types.CallToolResult) -> str:
    """The ToolMessage content of ``result`` (``isError`` is the caller's to read)."""
    structured = result.structured_content is not None
    parts: list[str] = []
    if structured:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    for block in result.content:
        if isinstance(block, types.TextContent):
            if not structured:
                parts.append(block.text)
        else:
            parts.append(describe(block))
    return "\n".join(parts)


def describe(block: types.ContentBlock) -> str:
    """One line saying what a non-text block holds."""
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, types.ResourceLink):
        about = f" ({block.description})" if block.description else ""
        return f"[resource link: {block.uri} {block.name}{about}]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return f"[resource: {res.uri}]\n{res.text}"
        mime = res.mime_type or "application/octet-stream"
        return f"[resource: {res.uri}, {mime}, {_decoded_size(res.blob)} bytes]"
    if isinstance(block, types.TextContent):
        return block.text
    return f"[{type(block).__name__}]"  # a block type of a newer protocol


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
