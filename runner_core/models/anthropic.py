"""AnthropicChatModel: the adapter for Anthropic's Messages API, on the official SDK.

Tools, tool results and images go in Anthropic's block format; extended thinking blocks
come back with their signatures in ``provider_data`` and are replayed on the next request
(``anthropic_wire``); answers and streams are assembled by ``anthropic_answer``. The SDK's
own retries are off: the runner's RETRY_SCHEDULED is the one retry layer, fed by
``ModelError.retryable`` and ``retry_after``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import anthropic

from runner_core._engine import aio
from runner_core.models.anthropic_answer import AnswerAssembler, dumped
from runner_core.models.anthropic_wire import (
    PROVIDER,
    to_wire_messages,
    to_wire_system,
    to_wire_tools,
)
from runner_core.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    StreamDone,
)
from runner_core.models.http_errors import cause, parse_retry_after

DEFAULT_MODEL = "claude-sonnet-4-5"
PLACEHOLDER_API_KEY = "not-needed"
"""Sent to a server given only by URL: the SDK insists on a key, local servers ignore it."""
DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when none is set; with thinking on, added to ``budget_tokens``."""

CACHE_EPHEMERAL: Mapping[str, Any] = {"type": "ephemeral"}
"""The ``cache_control`` that ``prompt_caching=True`` puts on each breakpoint."""

REQUEST_SETTINGS = frozenset(
    {"stop_sequences", "metadata", "thinking", "extra_headers", "extra_query"}
)
"""Keys of ``ModelRequest.settings`` passed to ``messages.create``; others are for someone else."""

BODY_SETTINGS = frozenset({"temperature", "top_p", "top_k", "service_tier", "output_config"})
"""Settings sent in the request body as they are: SDK releases differ on their arguments."""

TOOL_SETTINGS = frozenset({"tool_choice"})
"""Settings sent only with tools: the API rejects ``tool_choice`` on a request without any."""

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Client-error statuses worth retrying (besides every 5xx, 529 "overloaded" included)."""

RETRYABLE_ERROR_TYPES = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)
"""Error types of an ``error`` event inside a stream (its HTTP status was 200) worth retrying."""


class AnthropicChatModel:
    """A chat model speaking Anthropic's Messages API through the ``anthropic`` SDK.

    ``model`` falls back to ``AGENTWORKER_MODEL``, ``api_key`` to ``ANTHROPIC_API_KEY`` and
    ``base_url`` to ``ANTHROPIC_BASE_URL``. ``timeout`` (seconds) applies
    to the client built here; an injected ``client`` keeps its own. ``settings`` are
    defaults that ``ModelRequest.settings`` overrides (``thinking``, ``max_tokens``, ...).

    ``prompt_caching=True`` marks the system prompt, the tools and the last message as
    cache breakpoints (``{"type": "ephemeral"}``); a mapping is used as the
    ``cache_control`` itself (``{"type": "ephemeral", "ttl": "1h"}``).

    ``client`` may be an ``anthropic.AsyncAnthropic``: the runner then awaits it on the
    process event loop (``prefers_async``); the sync methods still work for a direct caller.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: anthropic.Anthropic | anthropic.AsyncAnthropic | None = None,
        timeout: float = 600.0,
        settings: Mapping[str, Any] | None = None,
        prompt_caching: bool | Mapping[str, Any] = False,
    ) -> None:
        self.model = model or os.environ.get("AGENTWORKER_MODEL") or DEFAULT_MODEL
        self.settings = dict(settings or {})
        self.client = _make_client(client, api_key, base_url, timeout)
        self.cache_control: Mapping[str, Any] | None = (
            dict(prompt_caching) if isinstance(prompt_caching, Mapping)
            else CACHE_EPHEMERAL if prompt_caching else None
        )  # fmt: skip
        #: True over an ``AsyncAnthropic`` client: the runner calls ``agenerate``/``astream``.
        self.prefers_async = isinstance(self.client, anthropic.AsyncAnthropic)

    def __repr__(self) -> str:
        url = str(self.client.base_url)
        return f"AnthropicChatModel(model={self.model!r}, base_url={url!r})"

    def generate(self, request: ModelRequest) -> ModelResponse:
        """Send one request and return the complete answer; raise ``ModelError`` on failure."""
        client = self.client
        if isinstance(client, anthropic.AsyncAnthropic):
            return aio.run(self.agenerate(request))
        try:
            message = client.messages.create(**self.params(request), stream=False)
        except anthropic.AnthropicError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        return AnswerAssembler().message(dumped(message))

    async def agenerate(self, request: ModelRequest) -> ModelResponse:
        """``generate`` over the async client (a sync client's call runs in a thread)."""
        client = self.client
        if not isinstance(client, anthropic.AsyncAnthropic):
            return await asyncio.to_thread(self.generate, request)
        try:
            message = await client.messages.create(**self.params(request), stream=False)
        except anthropic.AnthropicError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        return AnswerAssembler().message(dumped(message))

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Yield text, reasoning and tool-call deltas as they arrive, then ``StreamDone``."""
        client = self.client
        if isinstance(client, anthropic.AsyncAnthropic):
            yield from aio.iterate(self.astream(request))
            return
        assembler = AnswerAssembler()
        try:
            events = client.messages.create(**self.params(request), stream=True)
            with events:
                for event in events:
                    yield from assembler.event(dumped(event))
        except anthropic.AnthropicError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        yield StreamDone(assembler.response())

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """``stream`` over the async client (a sync client's stream is read in a thread)."""
        client = self.client
        if not isinstance(client, anthropic.AsyncAnthropic):
            events = self.stream(request)
            while (item := await asyncio.to_thread(next, events, None)) is not None:
                yield item
            return
        assembler = AnswerAssembler()
        try:
            stream = await client.messages.create(**self.params(request), stream=True)
            async with stream:
                async for event in stream:
                    for item in assembler.event(dumped(event)):
                        yield item
        except anthropic.AnthropicError as err:
            raise to_model_error(err) from err
        except json.JSONDecodeError as err:
            raise malformed_answer(err) from err
        yield StreamDone(assembler.response())

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for one request."""
        settings = {**self.settings, **request.settings}
        if "stop" in settings and "stop_sequences" not in settings:
            stop = settings["stop"]
            settings["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        params: dict[str, Any] = {
            "model": settings.get("model", self.model),
            "messages": to_wire_messages(request.messages, self.cache_control),
            "max_tokens": _max_tokens(settings),
        }
        system = to_wire_system(request.messages, self.cache_control)
        if system:
            params["system"] = system
        params.update((k, v) for k, v in settings.items() if k in REQUEST_SETTINGS)
        body = {k: v for k, v in settings.items() if k in BODY_SETTINGS}
        output_format = _output_format(settings.get("response_format"))
        if output_format is not None:
            body["output_config"] = {**(body.get("output_config") or {}), "format": output_format}
        if body or "extra_body" in settings:
            params["extra_body"] = {**body, **(settings.get("extra_body") or {})}
        if request.tools:
            params["tools"] = to_wire_tools(request.tools, self.cache_control)
            params.update((k, v) for k, v in settings.items() if k in TOOL_SETTINGS)
        return params


def _output_format(response_format: Any) -> dict[str, Any] | None:
    """An OpenAI-style ``json_schema`` response format as Anthropic's output format.

    Other formats (``json_object``, ``text``) have no Anthropic counterpart and are left out.
    """
    if not isinstance(response_format, Mapping) or response_format.get("type") != "json_schema":
        return None
    wrapped = response_format.get("json_schema")
    schema = wrapped.get("schema") if isinstance(wrapped, Mapping) else None
    schema = response_format.get("schema", schema)
    return {"type": "json_schema", "schema": dict(schema)} if isinstance(schema, Mapping) else None


def _max_tokens(settings: Mapping[str, Any]) -> int:
    """The setting, else the default (on top of the thinking budget, which it must exceed)."""
    if isinstance(settings.get("max_tokens"), int):
        return int(settings["max_tokens"])
    thinking = settings.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, Mapping) else None
    return DEFAULT_MAX_TOKENS + (budget if isinstance(budget, int) else 0)


def _make_client(
    client: anthropic.Anthropic | anthropic.AsyncAnthropic | None,
    api_key: str | None,
    base_url: str | None,
    timeout: float,
) -> anthropic.Anthropic | anthropic.AsyncAnthropic:
    """The SDK client to use, with its retries off."""
    if client is not None:
        return client.with_options(max_retries=0)
    base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
    api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
    if api_key is None and base_url is not None:
        api_key = PLACEHOLDER_API_KEY
    return anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)


# --- errors -------------------------------------------------------------------------------


def to_model_error(err: anthropic.AnthropicError) -> ModelError:
    """Classify an SDK error: transient ones are retryable, the rest are not."""
    if isinstance(err, anthropic.APITimeoutError):
        return ModelError(f"{PROVIDER}: the request timed out: {cause(err)}", retryable=True)
    if isinstance(err, anthropic.APIConnectionError):
        return ModelError(f"{PROVIDER}: cannot reach the server: {cause(err)}", retryable=True)
    if isinstance(err, anthropic.APIStatusError):
        return _status_error(err)
    if isinstance(err, anthropic.APIResponseValidationError):
        return ModelError(f"{PROVIDER}: the server's answer is malformed: {err}", retryable=True)
    return ModelError(f"{PROVIDER}: the call failed: {err}", retryable=False)


def malformed_answer(err: json.JSONDecodeError) -> ModelError:
    """A body that is not JSON (a proxy's error page, a cut connection): worth retrying."""
    return ModelError(f"{PROVIDER}: the server sent malformed JSON: {err}", retryable=True)


def _status_error(err: anthropic.APIStatusError) -> ModelError:
    status = err.status_code
    kind, message = _error_body(err)
    if status < 400:  # an ``error`` event inside a stream that had begun with 200
        retryable = kind in RETRYABLE_ERROR_TYPES
        label = f"an error event ({kind})"
    else:
        retryable = status in RETRYABLE_STATUSES or status >= 500
        label = f"HTTP {status}" + (f" {kind}" if kind else "")
    return ModelError(
        f"{PROVIDER}: the server answered {label}: {message}",
        retryable,
        retry_after=parse_retry_after(err.response.headers),
    )


def _error_body(err: anthropic.APIStatusError) -> tuple[str | None, str]:
    """The ``error.type`` and ``error.message`` of Anthropic's error body, where it has one."""
    body = err.body
    error = body.get("error") if isinstance(body, Mapping) else None
    if isinstance(error, Mapping):
        kind, message = error.get("type"), error.get("message")
        return (kind if isinstance(kind, str) else None), str(message or err.message)
    if isinstance(body, str) and body.strip():
        return None, body.strip()[:500]
    return None, err.message
