"""OpenAIChatModel: the OpenAI-compatible Chat Completions adapter, on the official SDK.

It speaks to OpenAI and to every server that serves ``/v1/chat/completions`` (Azure OpenAI,
vLLM, Ollama, llama.cpp, DeepSeek, gateways). The SDK's own retries are off: the runner's
RETRY_SCHEDULED is the one retry layer, fed by ``ModelError.retryable`` and ``retry_after``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, assert_never

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

from runner_core._engine import aio
from runner_core._engine.frozen import thaw
from runner_core.messages import (
    AiMessage,
    ContentPart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from runner_core.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    OutputSchema,
    ReasoningDelta,
    StreamDone,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from runner_core.models.function import StreamAssembler
from runner_core.models.http_errors import parse_retry_after
from runner_core.models.openai_errors import malformed_answer, to_model_error

DEFAULT_MODEL = "gpt-4o-mini"
PLACEHOLDER_API_KEY = "not-needed"
"""Sent to a server given only by URL: the SDK insists on a key, local servers ignore it."""

REQUEST_SETTINGS = frozenset(
    {
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed",
        "presence_penalty", "frequency_penalty", "logit_bias", "response_format",
        "reasoning_effort", "user", "service_tier", "extra_headers", "extra_query",
        "extra_body",
    }
)  # fmt: skip
"""Keys of ``ModelRequest.settings`` passed to the server; others are for someone else."""

TOOL_SETTINGS = frozenset({"parallel_tool_calls", "tool_choice"})
"""Settings sent only with tools: servers reject them on a request without any."""

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where servers put reasoning text (DeepSeek and vLLM; OpenRouter and Ollama)."""

PROVIDER = "openai_chat"
"""The key of this adapter's ``provider_data``: it replays only data under this key."""


class OpenAIChatModel:
    """A chat model speaking the OpenAI Chat Completions protocol through the ``openai`` SDK.

    ``model`` falls back to ``AGENTWORKER_MODEL``, ``api_key`` to ``OPENAI_API_KEY`` and
    ``base_url`` to ``OPENAI_BASE_URL``. ``timeout`` (seconds) applies to the client built
    here; an injected ``client`` keeps its own. ``settings`` are defaults that
    ``ModelRequest.settings`` overrides.

    ``client`` may be an ``openai.AsyncOpenAI``: the runner then awaits it on the process
    event loop (``prefers_async``), where its connection pool lives for the process; the
    sync methods still work for a direct caller and wait on that loop.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: openai.OpenAI | openai.AsyncOpenAI | None = None,
        timeout: float = 60.0,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model or os.environ.get("AGENTWORKER_MODEL") or DEFAULT_MODEL
        self.settings = dict(settings or {})
        self.client = _make_client(client, api_key, base_url, timeout)
        #: True over an ``AsyncOpenAI`` client: the runner calls ``agenerate``/``astream``.
        self.prefers_async = isinstance(self.client, openai.AsyncOpenAI)
        #: ``ModelRequest.output`` is sent as ``response_format`` (type ``json_schema``).
        self.native_output = True

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={str(self.client.base_url)!r})"

    def generate(self, request: ModelRequest) -> ModelResponse:
        """Send one request and return the complete answer; raise ``ModelError`` on failure."""
        client = self.client
        if isinstance(client, openai.AsyncOpenAI):
            return aio.run(self.agenerate(request))
        try:
            completion = client.chat.completions.create(**self._params(request), stream=False)
        except openai.OpenAIError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        return _answer(completion)

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        """``generate`` over the async client (a sync client's call runs in a thread)."""
        client = self.client
        if not isinstance(client, openai.AsyncOpenAI):
            return await asyncio.to_thread(self.generate, request)
        try:
            completion = await client.chat.completions.create(**self._params(request), stream=False)
        except openai.OpenAIError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        return _answer(completion)

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Yield text, reasoning and tool-call deltas as they arrive, then ``StreamDone``."""
        client = self.client
        if isinstance(client, openai.AsyncOpenAI):
            yield from aio.iterate(self.astream(request))
            return
        assembler, slots, usage = StreamAssembler(), _CallSlots(), Usage()
        try:
            chunks = client.chat.completions.create(
                **self._params(request), stream=True, stream_options={"include_usage": True}
            )
            with chunks:
                for chunk in chunks:
                    usage = _usage(chunk.usage) if chunk.usage else usage
                    for event in _chunk_events(chunk, slots):
                        assembler.add(event)
                        yield event
        except openai.OpenAIError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        yield StreamDone(_streamed(assembler, usage, slots))

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """``stream`` over the async client (a sync client's stream is read in a thread)."""
        client = self.client
        if not isinstance(client, openai.AsyncOpenAI):
            events = self.stream(request)
            while (event := await asyncio.to_thread(next, events, None)) is not None:
                yield event
            return
        assembler, slots, usage = StreamAssembler(), _CallSlots(), Usage()
        try:
            chunks = await client.chat.completions.create(
                **self._params(request), stream=True, stream_options={"include_usage": True}
            )
            async with chunks:
                async for chunk in chunks:
                    usage = _usage(chunk.usage) if chunk.usage else usage
                    for event in _chunk_events(chunk, slots):
                        assembler.add(event)
                        yield event
        except openai.OpenAIError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        yield StreamDone(_streamed(assembler, usage, slots))

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one request."""
        settings = {**self.settings, **request.settings}
        params: dict[str, Any] = {
            "model": settings.get("model", self.model),
            "messages": to_wire_messages(request),
        }
        params.update((k, v) for k, v in settings.items() if k in REQUEST_SETTINGS)
        if request.output is not None:
            params["response_format"] = to_wire_response_format(request.output)
        if request.tools:
            params["tools"] = [to_wire_tool(spec) for spec in request.tools]
            params.update((k, v) for k, v in settings.items() if k in TOOL_SETTINGS)
        return params


def _answer(completion: object) -> ModelResponse:
    """A complete (non-streamed) answer as a response."""
    if not isinstance(completion, ChatCompletion):
        raise ModelError(f"server returned no chat completion: {completion!r:.200}", True)
    assembler, extras = StreamAssembler(), _Extras()
    for event in _completion_events(completion, extras):
        assembler.add(event)
    return _response(assembler, _usage(completion.usage), extras)


def _make_client(
    client: openai.OpenAI | openai.AsyncOpenAI | None,
    api_key: str | None,
    base_url: str | None,
    timeout: float,
) -> openai.OpenAI | openai.AsyncOpenAI:
    """The SDK client to use, with its retries off."""
    if client is not None:
        return client.with_options(max_retries=0)
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
    if api_key is None and base_url is not None:
        api_key = PLACEHOLDER_API_KEY
    return openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)


# --- our messages and tools -> the wire ---------------------------------------------------


def to_wire_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request's messages as Chat Completions message objects."""
    return [to_wire_message(message) for message in request.messages]


def to_wire_message(message: Message) -> dict[str, Any]:
    """One message as a Chat Completions message object."""
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.text}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": _wire_content(message.content)}
    if isinstance(message, AiMessage):
        return _wire_assistant(message)
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    assert_never(message)


def _wire_content(content: str | Sequence[ContentPart]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        else:
            image: dict[str, Any] = {"url": part.url}
            if part.detail:
                image["detail"] = part.detail
            parts.append({"type": "image_url", "image_url": image})
    return parts


def _wire_assistant(message: AiMessage) -> dict[str, Any]:
    """An assistant message, with what this adapter recorded to replay.

    Reasoning goes back in the field the server sent it in: DeepSeek's thinking mode
    refuses a conversation with tool calls whose answers lack it (every answer of such
    a user turn, the last one too) and ignores it elsewhere. Data of another provider,
    and reasoning this adapter did not record, are never sent.
    """
    wire: dict[str, Any] = {"role": "assistant", "content": message.text}
    if message.tool_calls:
        wire["tool_calls"] = [_wire_call(call) for call in message.tool_calls]
    elif message.text is None:
        wire["content"] = ""
    own = _own(message.provider_data)
    field = own.get("reasoning_field")
    if field in REASONING_FIELDS and message.reasoning:
        wire[field] = message.reasoning
    if isinstance(own.get("extra_content"), Mapping):
        wire["extra_content"] = thaw(own["extra_content"])
    return wire


def _wire_call(call: ToolCall) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }
    extra = _own(call.provider_data).get("extra_content")
    if isinstance(extra, Mapping):  # Gemini's thought signature rides here
        wire["extra_content"] = thaw(extra)
    return wire


def _own(provider_data: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The part of a message's or call's provider data that is ours (empty if none)."""
    own = (provider_data or {}).get(PROVIDER)
    return own if isinstance(own, Mapping) else {}


def to_wire_tool(spec: ToolSpec) -> dict[str, Any]:
    """A tool spec as a Chat Completions function tool."""
    function: dict[str, Any] = {
        "name": spec.name,
        "parameters": spec.parameters or {"type": "object", "properties": {}},
    }
    if spec.description:
        function["description"] = spec.description
    return {"type": "function", "function": function}


def to_wire_response_format(output: OutputSchema) -> dict[str, Any]:
    """Native structured output as a Chat Completions ``json_schema`` response format."""
    schema: dict[str, Any] = {"name": output.name, "schema": output.schema}
    if output.description:
        schema["description"] = output.description
    return {"type": "json_schema", "json_schema": schema}


# --- the wire -> our messages -------------------------------------------------------------


def _completion_events(completion: ChatCompletion, extras: _Extras) -> Iterator[ModelStreamEvent]:
    """A complete answer as deltas, so that one assembler serves both paths."""
    if not completion.choices:
        return
    message = completion.choices[0].message
    if message is None:  # a server or proxy that answered something else than a completion
        raise ModelError("server returned a choice without a message", retryable=True)
    extras.message(message)
    yield from _text_events(message, message.content or message.refusal, extras)
    for index, call in enumerate(message.tool_calls or ()):
        function = getattr(call, "function", None)
        if function is not None:
            extras.call(index, call)
            yield ToolCallDelta(index, call.id, function.name, function.arguments or "")


def _chunk_events(chunk: ChatCompletionChunk, slots: _CallSlots) -> Iterator[ModelStreamEvent]:
    """The deltas of one streamed chunk (first choice only)."""
    if chunk.usage is not None:
        slots.ended = True  # the usage chunk comes last
    if not chunk.choices:
        return
    if getattr(chunk.choices[0], "finish_reason", None):
        slots.ended = True
    delta = chunk.choices[0].delta
    slots.extras.message(delta)
    yield from _text_events(delta, delta.content or delta.refusal, slots.extras)
    for call in delta.tool_calls or ():
        call_id = call.id or None
        index = slots.slot(getattr(call, "index", None), call_id)
        slots.extras.call(index, call)
        function = call.function
        name = function.name if function else None
        yield ToolCallDelta(index, call_id, name, (function.arguments if function else "") or "")


class _CallSlots:
    """Tool-call indexes in a stream, inferred where a server (Gemini's) leaves them out."""

    def __init__(self) -> None:
        self._by_id: dict[str, int] = {}
        self._last = 0
        self._next = 0
        #: What the stream carries to replay beside the deltas.
        self.extras = _Extras()
        #: Whether a chunk said the answer is over (a finish reason, or the usage).
        self.ended = False

    def slot(self, index: int | None, call_id: str | None) -> int:
        """The given index; else the slot of this id, a new one, or the last one."""
        if index is None:
            index = self._by_id.get(call_id, self._next) if call_id else self._last
        if call_id:
            self._by_id.setdefault(call_id, index)
        self._last, self._next = index, max(self._next, index + 1)
        return index


class _Extras:
    """What an answer carries to replay: its reasoning field and extras, each call's extras."""

    def __init__(self) -> None:
        self.reasoning_field: str | None = None
        #: The answer's own ``extra_content``.
        self.answer: dict[str, Any] = {}
        #: Every call index seen (in the assembled order) and the calls' ``extra_content``.
        self.indexes: set[int] = set()
        self.calls: dict[int, dict[str, Any]] = {}

    def message(self, source: object) -> None:
        """Keep a message's or delta's ``extra_content``."""
        extra = getattr(source, "extra_content", None)
        if isinstance(extra, dict) and extra:
            self.answer.update(extra)

    def call(self, index: int, call: object) -> None:
        """Keep a call's ``extra_content`` (Gemini: ``{"google": {"thought_signature"}}``)."""
        self.indexes.add(index)
        extra = getattr(call, "extra_content", None)
        if isinstance(extra, dict) and extra:
            self.calls.setdefault(index, {}).update(extra)

    def applied(self, message: AiMessage) -> AiMessage:
        """The message with this adapter's provider data on it and its calls."""
        own: dict[str, Any] = {}
        if self.reasoning_field is not None and message.reasoning:
            own["reasoning_field"] = self.reasoning_field
        if self.answer:
            own["extra_content"] = self.answer
        if not own and not self.calls:
            return message
        order = sorted(self.indexes)  # the assembler orders calls by index too
        calls = [self._call(call, order[i]) for i, call in enumerate(message.tool_calls)]
        return AiMessage(
            id=message.id,
            text=message.text,
            tool_calls=calls,
            reasoning=message.reasoning,
            provider_data={PROVIDER: own} if own else None,
        )

    def _call(self, call: ToolCall, index: int) -> ToolCall:
        extra = self.calls.get(index)
        if extra is None:
            return call
        data = {PROVIDER: {"extra_content": extra}}
        return ToolCall(id=call.id, name=call.name, arguments=call.arguments, provider_data=data)


def _text_events(source: object, text: str | None, extras: _Extras) -> Iterator[ModelStreamEvent]:
    """Reasoning (from whichever field the server uses), then answer text."""
    for name in REASONING_FIELDS:
        reasoning = getattr(source, name, None)
        if isinstance(reasoning, str) and reasoning:
            extras.reasoning_field = extras.reasoning_field or name
            yield ReasoningDelta(reasoning)
            break
    if text:
        yield TextDelta(text)


def _usage(usage: CompletionUsage | None) -> Usage:
    """Tokens of one answer, with the cached and reasoning parts where the server says."""
    if usage is None:
        return Usage()
    prompt, completion = usage.prompt_tokens_details, usage.completion_tokens_details
    cached = (prompt.cached_tokens if prompt else None) or getattr(
        usage,
        "prompt_cache_hit_tokens",
        None,  # DeepSeek's own name for it
    )
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cached_input_tokens=cached if isinstance(cached, int) else 0,
        reasoning_tokens=(completion.reasoning_tokens if completion else None) or 0,
    )


def _streamed(assembler: StreamAssembler, usage: Usage, slots: _CallSlots) -> ModelResponse:
    """The streamed answer; a stream that stopped before saying it was done is retried.

    Nothing of a cut answer is kept: its last tool call's arguments may be cut too.
    """
    if not slots.ended:
        raise ModelError("model stream ended before the answer finished", retryable=True)
    return _response(assembler, usage, slots.extras)


def _response(assembler: StreamAssembler, usage: Usage, extras: _Extras) -> ModelResponse:
    """The assembled answer; an answer with neither text nor tool calls is an error.

    A tool call the server sent without an id keeps ``""``: the runner fills it as
    ``{turn_id}-{iteration}-{index}``.
    """
    message = extras.applied(assembler.message())
    if not message.text and not message.tool_calls:
        raise ModelError("model returned an empty response", retryable=True)
    return ModelResponse(message, usage)


__all__ = ["OpenAIChatModel", "malformed_answer", "parse_retry_after", "to_model_error"]
