"""OpenAIResponsesModel: OpenAI's Responses API through the official SDK, stateless.

Every request is sent with ``store=False`` and asks for the reasoning items' encrypted
content (``include=["reasoning.encrypted_content"]``): OpenAI keeps nothing between calls,
and the items come back in the message's ``provider_data`` to be replayed on the next
call, so any worker can continue a turn. The SDK's retries are off, as in the Chat
Completions adapter; errors are classified the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, assert_never

import openai
from openai.types.responses import Response, ResponseUsage

from runner_core._engine import aio
from runner_core._engine.frozen import thaw
from runner_core.messages import (
    AiMessage,
    ImagePart,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from runner_core.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ReasoningDelta,
    StreamDone,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from runner_core.models.function import INVALID_ARGUMENTS_KEY
from runner_core.models.openai import DEFAULT_MODEL, PLACEHOLDER_API_KEY
from runner_core.models.openai_errors import malformed_answer, to_model_error

PROVIDER = "openai_responses"
"""The key of this adapter's ``provider_data``: it replays only data under this key."""

LABEL = "Responses API"
"""How errors of this adapter name the provider."""

REQUEST_SETTINGS = frozenset(
    {
        "temperature", "top_p", "max_output_tokens", "reasoning", "text", "truncation",
        "user", "service_tier", "metadata", "prompt_cache_key", "safety_identifier",
        "extra_headers", "extra_query", "extra_body",
    }
)  # fmt: skip
"""Keys of ``ModelRequest.settings`` passed to the server; others are for someone else."""

TOOL_SETTINGS = frozenset({"parallel_tool_calls", "tool_choice"})
"""Settings sent only with tools."""

KNOWN_ITEMS = frozenset({"message", "reasoning", "function_call"})
"""Output item types this adapter understands; any other fails the call."""


class OpenAIResponsesModel:
    """A chat model on OpenAI's Responses API (``client.responses``), with ``store=False``.

    ``model`` falls back to ``AGENTWORKER_MODEL``, ``api_key`` to ``OPENAI_API_KEY`` and
    ``base_url`` to ``OPENAI_BASE_URL``. ``settings`` are defaults that
    ``ModelRequest.settings`` overrides (``reasoning_effort`` is sent as
    ``reasoning={"effort": ...}``, ``max_tokens`` as ``max_output_tokens``). Over an
    ``openai.AsyncOpenAI`` client the runner awaits it on the process event loop.
    """

    #: ``gen_ai.provider.name`` on model-call spans: the Responses API is OpenAI's own.
    provider_name = "openai"

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

    def __repr__(self) -> str:
        url = str(self.client.base_url)
        return f"OpenAIResponsesModel(model={self.model!r}, base_url={url!r})"

    def generate(self, request: ModelRequest) -> ModelResponse:
        """Send one request and return the complete answer; raise ``ModelError`` on failure."""
        client = self.client
        if isinstance(client, openai.AsyncOpenAI):
            return aio.run(self.agenerate(request))
        try:
            response = client.responses.create(**self._params(request), stream=False)
        except openai.OpenAIError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        return answer_of(response)

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        """``generate`` over the async client (a sync client's call runs in a thread)."""
        client = self.client
        if not isinstance(client, openai.AsyncOpenAI):
            return await asyncio.to_thread(self.generate, request)
        try:
            response = await client.responses.create(**self._params(request), stream=False)
        except openai.OpenAIError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        return answer_of(response)

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Yield text, reasoning-summary and tool-call deltas, then ``StreamDone``."""
        client = self.client
        if isinstance(client, openai.AsyncOpenAI):
            yield from aio.iterate(self.astream(request))
            return
        state = _StreamState()
        try:
            events = client.responses.create(**self._params(request), stream=True)
            with events:
                for event in events:
                    yield from state.feed(event)
        except openai.OpenAIError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        yield StreamDone(state.done())

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """``stream`` over the async client (a sync client's stream is read in a thread)."""
        client = self.client
        if not isinstance(client, openai.AsyncOpenAI):
            events = self.stream(request)
            while (item := await asyncio.to_thread(next, events, None)) is not None:
                yield item
            return
        state = _StreamState()
        try:
            stream = await client.responses.create(**self._params(request), stream=True)
            async with stream:
                async for event in stream:
                    for item in state.feed(event):
                        yield item
        except openai.OpenAIError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        yield StreamDone(state.done())

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``responses.create`` for one request."""
        settings = {**self.settings, **request.settings}
        instructions, items = to_input(request.messages)
        params: dict[str, Any] = {
            "model": settings.get("model", self.model),
            "input": items,
            "store": False,
            "include": ["reasoning.encrypted_content"],
        }
        if instructions:
            params["instructions"] = instructions
        if "reasoning_effort" in settings:
            params["reasoning"] = {"effort": settings["reasoning_effort"]}
        if "max_tokens" in settings:
            params["max_output_tokens"] = settings["max_tokens"]
        params.update((k, v) for k, v in settings.items() if k in REQUEST_SETTINGS)
        if request.tools:
            params["tools"] = [to_wire_tool(spec) for spec in request.tools]
            params.update((k, v) for k, v in settings.items() if k in TOOL_SETTINGS)
        return params


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


# --- our messages and tools -> input items ------------------------------------------------


def to_input(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The leading system messages as instructions, and the rest as input items."""
    lead: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, SystemMessage) and not items:
            lead.append(message.text)
        else:
            items.extend(to_items(message))
    return "\n\n".join(lead), items


def to_items(message: Message) -> list[dict[str, Any]]:
    """One message as input items: an assistant answer may be several."""
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": message.text}]
    if isinstance(message, UserMessage):
        return [{"role": "user", "content": _user_content(message)}]
    if isinstance(message, AiMessage):
        return _assistant_items(message)
    if isinstance(message, ToolMessage):
        return [{"type": "function_call_output", "call_id": message.call_id,
                 "output": message.content}]  # fmt: skip
    assert_never(message)


def _user_content(message: UserMessage) -> str | list[dict[str, Any]]:
    if isinstance(message.content, str):
        return message.content
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, ImagePart):
            parts.append({"type": "input_image", "image_url": part.url,
                          "detail": part.detail or "auto"})  # fmt: skip
        else:
            parts.append({"type": "input_text", "text": part.text})
    return parts


def _assistant_items(message: AiMessage) -> list[dict[str, Any]]:
    """Our reasoning items (encrypted) first, then the text, then the calls."""
    own = _own(message.provider_data)
    items = [thaw(item) for item in own.get("reasoning", ()) if isinstance(item, Mapping)]
    if message.text:
        items.append(_text_item(message.text, own.get("message_id")))
    items.extend(_call_item(call) for call in message.tool_calls)
    return items


def _text_item(text: str, item_id: object) -> dict[str, Any]:
    """The answer's text; as the output item it came as (id and all) when we know it.

    A replayed reasoning item must be followed by the items it led to.
    """
    if not isinstance(item_id, str):
        return {"role": "assistant", "content": text}
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "role": "assistant", "id": item_id, "status": "completed",
            "content": content}  # fmt: skip


def _call_item(call: ToolCall) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": json.dumps(call.arguments),
    }
    item_id = _own(call.provider_data).get("id")
    if isinstance(item_id, str):
        item["id"] = item_id
    return item


def _own(provider_data: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The part of a message's or call's provider data that is ours (empty if none)."""
    own = (provider_data or {}).get(PROVIDER)
    return own if isinstance(own, Mapping) else {}


def to_wire_tool(spec: ToolSpec) -> dict[str, Any]:
    """A tool spec as a Responses function tool (not strict: our schemas need not be)."""
    tool: dict[str, Any] = {
        "type": "function",
        "name": spec.name,
        "parameters": spec.parameters or {"type": "object", "properties": {}},
        "strict": False,
    }
    if spec.description:
        tool["description"] = spec.description
    return tool


# --- a response -> our message ------------------------------------------------------------


def answer_of(response: object) -> ModelResponse:
    """A complete response as our answer; ``ModelError`` if it failed or is malformed."""
    if not isinstance(response, Response):
        raise ModelError(f"{LABEL}: server returned no response: {response!r:.200}", True)
    _check_status(response)
    text: list[str] = []
    reasoning: list[str] = []
    items: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    own: dict[str, Any] = {}
    output = getattr(response, "output", None)
    if not isinstance(output, list):
        raise ModelError(f"{LABEL}: response has no output list: {output!r:.80}", True)
    for item in output:
        kind = getattr(item, "type", None)
        if kind not in KNOWN_ITEMS:
            raise ModelError(f"{LABEL}: unknown output item type {kind!r}", retryable=False)
        data = item.model_dump(mode="json", exclude_none=True)
        if kind == "message":
            text.extend(_message_text(data))
            if isinstance(data.get("id"), str):
                own.setdefault("message_id", data["id"])
        elif kind == "reasoning":
            reasoning.extend(s["text"] for s in data.get("summary", []) if "text" in s)
            if data.get("encrypted_content"):  # without it, a stateless replay is refused
                items.append(_replayable(data))
        else:
            calls.append(_call(data))
    if items:
        own["reasoning"] = items
    message = AiMessage(
        text="".join(text) or None,
        tool_calls=calls,
        reasoning="\n\n".join(reasoning) or None,
        provider_data={PROVIDER: own} if own else None,
    )
    if not message.text and not message.tool_calls:
        raise ModelError(f"{LABEL}: model returned an empty response", retryable=True)
    return ModelResponse(message, _usage(response.usage))


def _check_status(response: Response) -> None:
    if response.status == "failed":
        error = response.error
        code = error.code if error else "unknown"
        detail = error.message if error else "no error given"
        retryable = code in {"server_error", "rate_limit_exceeded", "vector_store_timeout"}
        raise ModelError(f"{LABEL}: response failed ({code}): {detail}", retryable)
    if response.status == "incomplete":
        details = response.incomplete_details
        reason = details.reason if details else None
        raise ModelError(f"{LABEL}: response incomplete ({reason or 'no reason given'})")


def _message_text(data: dict[str, Any]) -> list[str]:
    parts = data.get("content", [])
    return [p.get("text") or p.get("refusal") or "" for p in parts if isinstance(p, dict)]


def _replayable(item: dict[str, Any]) -> dict[str, Any]:
    """A reasoning item as it is sent back: id, summary and the encrypted content."""
    keep = ("type", "id", "summary", "encrypted_content")
    return {k: item[k] for k in keep if k in item}


def _call(data: dict[str, Any]) -> ToolCall:
    """A function call; one without a ``call_id`` keeps ``""`` for the runner to name."""
    if not isinstance(data.get("name"), str) or not data["name"]:
        raise ModelError(f"{LABEL}: function call without a name: {data!r:.120}", True)
    raw = data.get("arguments") or ""
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        arguments = {INVALID_ARGUMENTS_KEY: raw}
    if not isinstance(arguments, dict):
        arguments = {INVALID_ARGUMENTS_KEY: raw}
    item_id = data.get("id")
    return ToolCall(
        id=data.get("call_id") or "",
        name=data.get("name") or "",
        arguments=arguments,
        provider_data={PROVIDER: {"id": item_id}} if isinstance(item_id, str) else None,
    )


def _usage(usage: ResponseUsage | None) -> Usage:
    if usage is None:
        return Usage()
    cached = getattr(usage.input_tokens_details, "cached_tokens", None)
    reasoning = getattr(usage.output_tokens_details, "reasoning_tokens", None)
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cached_input_tokens=cached or 0,
        reasoning_tokens=reasoning or 0,
    )


class _Fields:
    """A JSON object read like an event: absent fields are None."""

    def __init__(self, data: object) -> None:
        self._data = data if isinstance(data, dict) else {}

    def __getattr__(self, name: str) -> Any:
        return self._data.get(name)


class _StreamState:
    """Stream events as our deltas; the final ``response.completed`` gives the answer."""

    def __init__(self) -> None:
        self._final: object = None

    def feed(self, event: object) -> Iterator[ModelStreamEvent]:
        """The deltas of one stream event; errors and the end of the response noted."""
        kind = getattr(event, "type", None)
        if kind is None and getattr(event, "event", None) == "error":
            event = _Fields(getattr(event, "data", None))  # older SDKs hand it over wrapped
            kind = "error"
        if kind == "response.output_text.delta":
            yield TextDelta(str(getattr(event, "delta", "")))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            yield ReasoningDelta(str(getattr(event, "delta", "")))
        elif kind == "response.output_item.added":
            item = getattr(event, "item", None)
            if getattr(item, "type", None) == "function_call":
                index = int(getattr(event, "output_index", 0))
                yield ToolCallDelta(index, getattr(item, "call_id", None) or None,
                                    getattr(item, "name", None))  # fmt: skip
        elif kind == "response.function_call_arguments.delta":
            index = int(getattr(event, "output_index", 0))
            yield ToolCallDelta(index, arguments=str(getattr(event, "delta", "")))
        elif kind in ("response.completed", "response.failed", "response.incomplete"):
            self._final = getattr(event, "response", None)
        elif kind == "error":
            code = getattr(event, "code", None)
            message = getattr(event, "message", "")
            raise ModelError(f"{LABEL}: stream failed ({code}): {message}", retryable=True)

    def done(self) -> ModelResponse:
        """The answer of the final response; a stream cut before it is retryable."""
        if self._final is None:
            raise ModelError(f"{LABEL}: stream ended before the response completed", True)
        return answer_of(self._final)
