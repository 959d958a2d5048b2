"""The model protocol: requests, responses, usage, streaming events and errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from runner_core.errors import AgentWorkerError
from runner_core.messages import AiMessage, Message


class Usage(BaseModel):
    """Tokens used by one model call, or summed over a turn (or a turn tree)."""

    model_config = ConfigDict(frozen=True)

    #: Every input token, cached ones included.
    input_tokens: int = 0
    #: Every output token, reasoning ones included.
    output_tokens: int = 0
    #: The part of ``input_tokens`` read from the provider's prompt cache.
    cached_input_tokens: int = 0
    #: The part of ``output_tokens`` the model spent reasoning.
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        # frozen, so adding nothing can give back this very object (most steps add a zero)
        if not (
            other.input_tokens
            or other.output_tokens
            or other.cached_input_tokens
            or other.reasoning_tokens
        ):
            return self
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


#: A call that used nothing: frozen, so every response without usage shares it.
NO_USAGE = Usage()


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool: name, description, JSON schema of arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """The JSON schema a model's answer text must match: native structured output.

    Sent only to a model that declares ``native_output = True`` (see ``ChatModel``).
    ``schema`` is a JSON object schema; ``name`` is a short identifier for it.
    """

    name: str
    schema: dict[str, Any]
    description: str = ""


@dataclass(slots=True)
class ModelRequest:
    """One request to a chat model."""

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    #: Answer as JSON text matching this schema (None: free text); docs/output.md.
    output: OutputSchema | None = None


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A model's answer and what it cost."""

    message: AiMessage
    usage: Usage = NO_USAGE


class ModelError(AgentWorkerError):
    """Raised by a model adapter; ``retryable`` decides between RETRY_SCHEDULED and FAILED.

    ``retry_after`` (seconds), when given, is the least delay before the next attempt.
    """

    def __init__(
        self, message: str, retryable: bool = False, *, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of answer text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of reasoning text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a tool call: ``index`` groups pieces; id and name come with the first."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class StreamDone:
    """The end of a stream, carrying the complete response."""

    response: ModelResponse


ModelStreamEvent = TextDelta | ReasoningDelta | ToolCallDelta | StreamDone


@runtime_checkable
class ChatModel(Protocol):
    """Anything that turns a ``ModelRequest`` into a ``ModelResponse``.

    Optional capability: a model whose provider constrains the answer text to a JSON
    schema sets the attribute ``native_output = True`` and honours
    ``ModelRequest.output``; ``supports_native_output`` reads it.
    """

    def generate(self, request: ModelRequest) -> ModelResponse:
        """Answer one request; raise ``ModelError`` on failure."""
        ...


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A model that can also stream; the last event of a stream is ``StreamDone``."""

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Yield deltas, then ``StreamDone``."""
        ...


@runtime_checkable
class AsyncChatModel(Protocol):
    """A model answering on the process event loop: ``await model.agenerate(request)``.

    A model may offer both forms; the runner uses the sync one unless the model sets
    ``prefers_async = True`` (an async-native model whose sync form only waits on the loop).
    """

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        """Answer one request; raise ``ModelError`` on failure."""
        ...


@runtime_checkable
class AsyncStreamingChatModel(AsyncChatModel, Protocol):
    """An async model that can also stream; the last event of a stream is ``StreamDone``."""

    def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Yield deltas, then ``StreamDone`` (an async generator)."""
        ...


AnyChatModel = ChatModel | AsyncChatModel
"""What an ``Agent`` takes as its model: either protocol (or both)."""


def supports_native_output(model: object) -> bool:
    """Whether the model declares native structured output (``native_output = True``)."""
    return getattr(model, "native_output", False) is True


def prefers_async(model: object) -> bool:
    """Whether the runner should call the model's async form: it has no sync one, or says so.

    Plain attribute reads: this runs on every model call.
    """
    if getattr(model, "generate", None) is None:
        return True
    return bool(getattr(model, "prefers_async", False)) and hasattr(model, "agenerate")
