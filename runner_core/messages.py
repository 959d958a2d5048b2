"""Model-protocol messages: pydantic models with stable ids and exact JSON round trips.

Messages are deeply immutable (frozen models, tuples, read-only arguments): a turn, its
snapshots, the stores and listeners share them without copying.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

from runner_core._engine.frozen import FrozenDict, freeze_dict
from runner_core._engine.jsonvalues import validate_json


def _provider_data(value: dict[str, Any] | None) -> FrozenDict | None:
    """Read-only and JSON only (the snapshot stores it as it is); ``{}`` reads as None."""
    if not value:
        return None
    return freeze_dict(validate_json(value, "provider_data"))


#: Opaque data of the provider whose adapter made a message or a call (reasoning text,
#: signatures, encrypted reasoning items, item ids): JSON only, read-only, persisted in
#: the snapshot, replayed only by an adapter of that provider (docs/models.md). An adapter
#: keys it by its provider's name, ``{"openai": {...}}``, so another adapter can tell that
#: it is not its own.
ProviderData = Annotated[dict[str, Any] | None, AfterValidator(_provider_data)]


def new_id() -> str:
    """A fresh random id (hex, 32 chars): 128 random bits, a fifth of what ``uuid4`` costs."""
    return os.urandom(16).hex()


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextPart(_Frozen):
    """A text part of a multimodal user message."""

    type: Literal["text"] = "text"
    text: str


class ImagePart(_Frozen):
    """An image part: an URL (``https:`` or ``data:``) and an optional detail hint."""

    type: Literal["image"] = "image"
    url: str
    detail: str | None = None
    media_type: str | None = None


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ToolCall(_Frozen):
    """One tool call requested by the model."""

    id: str
    name: str
    #: Read-only (a ``FrozenDict``): the record, listeners and tools share it.
    arguments: Annotated[dict[str, Any], AfterValidator(freeze_dict)] = Field(
        default_factory=FrozenDict
    )
    #: The id the model gave, when the runner had to replace it (missing or reused).
    original_id: str | None = None
    #: The provider's own data for this call (a signature, an item id); see ``ProviderData``.
    provider_data: ProviderData = None


class _Message(_Frozen):
    id: str = Field(default_factory=new_id)


class SystemMessage(_Message):
    """Instructions for the model; never stored as part of a turn's history."""

    role: Literal["system"] = "system"
    text: str

    def __init__(self, text: str | None = None, /, **data: Any) -> None:
        if text is not None:
            data["text"] = text
        super().__init__(**data)


class UserMessage(_Message):
    """Input from a user: plain text or a list of text and image parts."""

    role: Literal["user"] = "user"
    #: Text, or the parts (a list is accepted; read back as a tuple: messages are shared).
    content: str | tuple[ContentPart, ...]

    def __init__(self, content: str | list[Any] | None = None, /, **data: Any) -> None:
        if content is not None:
            data["content"] = content
        super().__init__(**data)

    @property
    def text(self) -> str:
        """The text of the message, parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))


class AiMessage(_Message):
    """A model response: text, tool calls, or both; reasoning text where a model gives it."""

    role: Literal["assistant"] = "assistant"
    text: str | None = None
    #: A list is accepted; read back as a tuple (snapshots, caches and listeners share it).
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    #: The provider's own data for this answer (reasoning items, signatures, ids).
    provider_data: ProviderData = None

    def __init__(self, text: str | None = None, /, **data: Any) -> None:
        if text is not None:
            data["text"] = text
        super().__init__(**data)


class ToolMessage(_Message):
    """The result of one tool call, sent back to the model."""

    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: str
    is_error: bool = False


Message = Annotated[
    SystemMessage | UserMessage | AiMessage | ToolMessage, Field(discriminator="role")
]
MESSAGE_LIST: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)
