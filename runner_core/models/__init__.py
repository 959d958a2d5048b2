"""Chat models: the protocol, FunctionModel, and real adapters."""

from runner_core.models.base import (
    ChatModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ReasoningDelta,
    StreamDone,
    StreamingChatModel,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from runner_core.models.function import INVALID_ARGUMENTS_KEY, FunctionModel, StreamAssembler
from runner_core.models.openai import OpenAIChatModel

__all__ = [
    "INVALID_ARGUMENTS_KEY",
    "ChatModel",
    "FunctionModel",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "OpenAIChatModel",
    "ReasoningDelta",
    "StreamAssembler",
    "StreamDone",
    "StreamingChatModel",
    "TextDelta",
    "ToolCallDelta",
    "ToolSpec",
    "Usage",
]
