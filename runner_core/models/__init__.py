"""Chat models: the protocol, FunctionModel, and real adapters."""

from typing import TYPE_CHECKING, Any

from runner_core.models.base import (
    AnyChatModel,
    AsyncChatModel,
    AsyncStreamingChatModel,
    ChatModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    OutputSchema,
    ReasoningDelta,
    StreamDone,
    StreamingChatModel,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
    supports_native_output,
)
from runner_core.models.function import INVALID_ARGUMENTS_KEY, FunctionModel, StreamAssembler

if TYPE_CHECKING:
    from runner_core.models.anthropic import AnthropicChatModel
    from runner_core.models.openai import OpenAIChatModel
    from runner_core.models.openai_responses import OpenAIResponsesModel


def __getattr__(name: str) -> Any:
    # The adapters import their SDKs; load one only when asked for.
    if name == "AnthropicChatModel":
        from runner_core.models.anthropic import AnthropicChatModel

        return AnthropicChatModel
    if name == "OpenAIChatModel":
        from runner_core.models.openai import OpenAIChatModel

        return OpenAIChatModel
    if name == "OpenAIResponsesModel":
        from runner_core.models.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AnthropicChatModel",
    "INVALID_ARGUMENTS_KEY",
    "AnyChatModel",
    "AsyncChatModel",
    "AsyncStreamingChatModel",
    "ChatModel",
    "FunctionModel",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "OutputSchema",
    "ReasoningDelta",
    "StreamAssembler",
    "StreamDone",
    "StreamingChatModel",
    "TextDelta",
    "ToolCallDelta",
    "ToolSpec",
    "Usage",
    "supports_native_output",
]
