"""Tools: the ``@tool`` decorator, argument schemas and validation, approval policies."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from runner_core._engine import aio
from runner_core.context import AgentToolContext
from runner_core.errors import AgentWorkerError, InvalidArgumentError, InvalidArgumentTypeError
from runner_core.messages import ToolCall
from runner_core.models.base import ToolSpec

if TYPE_CHECKING:
    from runner_core.turn import AgentTurn


class ApprovalDecision(str, Enum):
    """What an approval policy decides for one call."""

    #: Run the tool.
    ALLOW = "ALLOW"
    #: Suspend the turn until a human approves or rejects the call.
    REQUIRE = "REQUIRE"
    #: Do not run it; tell the model it was denied.
    DENY = "DENY"


ApprovalPolicy = Callable[["AgentTurn", ToolCall], ApprovalDecision]

#: What a tool call that runs past its timeout does: ``"error"`` sends the model an error
#: ToolMessage saying so (the turn goes on), ``"retry"`` schedules a retry of the call
#: (RETRY_SCHEDULED, by the retry policy), ``"fail"`` fails the turn.
TimeoutBehavior = Literal["error", "retry", "fail"]
TIMEOUT_BEHAVIORS: tuple[TimeoutBehavior, ...] = ("error", "retry", "fail")


class ToolError(AgentWorkerError):
    """Raised by a tool to send an error message back to the model (the turn goes on)."""


class InvalidToolArguments(AgentWorkerError):
    """Raised when a call's arguments do not fit the tool's schema."""


class ToolCallAbortedError(AgentWorkerError):
    """Base of the errors that end a tool call for the runner, never for the model.

    Whatever the tool-error strategy, the turn retries (``retryable``) or fails; the model
    is not asked to act on them.
    """


class ToolTimeoutError(ToolCallAbortedError, TimeoutError):
    """A tool call ran past its timeout (raised for ``timeout_behavior`` retry or fail).

    ``by_step_deadline``: the step's time limit, not the tool's own timeout, cut it off.
    """

    def __init__(
        self, tool: str, seconds: float, *, retryable: bool, by_step_deadline: bool = False
    ) -> None:
        super().__init__(timeout_message(tool, seconds, by_step_deadline=by_step_deadline))
        self.tool = tool
        self.seconds = seconds
        self.retryable = retryable
        self.by_step_deadline = by_step_deadline


def timeout_message(tool: str, seconds: float, *, by_step_deadline: bool = False) -> str:
    """``tool 'x' timed out after N s`` (saying so when the step time limit cut it off)."""
    text = f"tool {tool!r} timed out after {round(seconds, 2):g} s"
    return text + ": the step time limit was reached" if by_step_deadline else text


class AwaitableResultError(ToolCallAbortedError, TypeError):
    """Raised when a tool returns an awaitable: a programming error, so the turn fails.

    A sync tool that does is declared ``async def`` (or given an ``async def __call__``) and
    the runner awaits it; an async tool that does forgot an ``await`` inside. The awaitable
    is closed, never rendered as a result.
    """

    def __init__(self, tool: str, value: object) -> None:
        super().__init__(
            f"tool {tool!r} returned {type(value).__name__}, an awaitable: declare a sync "
            "tool `async def` so the runner awaits it, and await it inside an async one"
        )
        self.tool = tool
        self.retryable = False


class IteratorResultError(ToolCallAbortedError, TypeError):
    """Raised when a tool returns an iterator (a generator, ``map(...)``): the turn fails.

    A tool returns one finished value; collect the items (a list) before returning them.
    The iterator is closed unread, never rendered as a result.
    """

    def __init__(self, tool: str, value: object) -> None:
        super().__init__(
            f"tool {tool!r} returned {type(value).__name__}, an iterator nobody would read; "
            "return its items (a list) instead"
        )
        self.tool = tool
        self.retryable = False


class Tool:
    """A callable the model may request, with its JSON schema and approval policy.

    ``fn`` may be a function, an ``async def`` function or an object with an (async)
    ``__call__``; async ones run on the process event loop. A parameter annotated
    ``AgentToolContext`` receives the call's context and is not part of the schema.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool | ApprovalPolicy = False,
        timeout: float | None = None,
        timeout_behavior: TimeoutBehavior | None = None,
        sequential: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__
        if _yields(fn):
            raise InvalidArgumentTypeError(
                f"tool {self.name!r} is a generator function, but a tool returns one finished "
                "value: return the items as a list (ctx.report_progress reports progress)",
                field="fn",
            )
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise InvalidArgumentError(
                f"tool {self.name!r}: timeout must be a positive number of seconds, "
                f"not {timeout!r}",
                field="timeout",
            )
        if timeout_behavior is not None and timeout_behavior not in TIMEOUT_BEHAVIORS:
            raise InvalidArgumentError(
                f"tool {self.name!r}: timeout_behavior must be one of "
                f"{', '.join(TIMEOUT_BEHAVIORS)}, not {timeout_behavior!r}",
                field="timeout_behavior",
            )
        #: Seconds a call may run (``None``: the policy's ``tool_timeout_seconds``).
        self.timeout = None if timeout is None else float(timeout)
        #: What a timed-out call does (``None``: the policy's ``tool_timeout_behavior``).
        self.timeout_behavior: TimeoutBehavior | None = timeout_behavior
        #: A barrier: the call runs alone, after the calls before it and before those after.
        self.sequential = bool(sequential)
        self.description = description or inspect.getdoc(fn) or ""
        self._approval = requires_approval
        #: Whether ``fn`` is a coroutine function (it runs on the process event loop).
        self.is_async = aio.is_async_callable(fn)
        #: The parameter that receives the ``AgentToolContext`` (None: the tool has none).
        self.context_param: str | None
        self._args_model, self.context_param = _arguments_model(fn, self.name)
        schema = self._args_model.model_json_schema()
        schema.pop("title", None)
        self.spec = ToolSpec(self.name, self.description, schema)

    def approval(self, turn: AgentTurn, call: ToolCall) -> ApprovalDecision:
        """Ask the approval policy about one call."""
        if callable(self._approval):
            return ApprovalDecision(self._approval(turn, call))
        return ApprovalDecision.REQUIRE if self._approval else ApprovalDecision.ALLOW

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments; ``InvalidToolArguments`` with the first problem."""
        try:
            parsed = self._args_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise InvalidToolArguments(problems) from exc
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (tests, scripts)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _yields(fn: Callable[..., Any]) -> bool:
    """A (async) generator function, or an object whose ``__call__`` is one."""
    call = getattr(fn, "__call__", None)  # noqa: B004 - the method itself is what we inspect
    return any(inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f) for f in (fn, call))


def _arguments_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], str | None]:
    """The arguments' model, and the parameter that takes the context (left out of it)."""
    hints, unresolved = _hints(fn)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, param.annotation)
        if _is_context(annotation):
            context_param = param.name
            continue
        if isinstance(annotation, str):
            raise InvalidArgumentError(
                f"tool {name!r}: cannot resolve the type hint {annotation!r} of parameter "
                f"{param.name!r}: {unresolved.get(param.name)}",
                field=param.name,
            ) from unresolved.get(param.name)
        if annotation is param.empty:
            annotation = Any
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    model: type[BaseModel] = create_model(
        f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model, context_param


def _hints(fn: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, Exception]]:
    """Resolved annotations of ``fn`` (of its ``__call__`` for an object), one by one.

    A name imported only under ``TYPE_CHECKING`` cannot be resolved: its annotation stays
    a string, with the error, so that only an ``AgentToolContext`` annotation may do so.
    """
    target: Any = fn
    if not (inspect.isroutine(fn) or isinstance(fn, type)) and callable(fn):
        target = type(fn).__call__
    try:
        return get_type_hints(target), {}
    except Exception:
        pass
    globalns = getattr(inspect.unwrap(target), "__globals__", {})
    hints: dict[str, Any] = {}
    errors: dict[str, Exception] = {}
    for name, annotation in getattr(target, "__annotations__", {}).items():
        holder: Any = lambda: None  # noqa: E731 - a bare carrier of one annotation
        holder.__annotations__ = {name: annotation}
        try:
            hints.update(get_type_hints(holder, globalns=globalns))
        except Exception as exc:
            hints[name], errors[name] = annotation, exc
    return hints, errors


_CONTEXT_TEXT = re.compile(
    r"^\s*(?:Optional\[\s*)?(?:[\w.]+\.)?AgentToolContext\s*(?:\]|\|\s*None)?\s*$"
    r"|^\s*None\s*\|\s*(?:[\w.]+\.)?AgentToolContext\s*$"
)


def _is_context(annotation: Any) -> bool:
    """``AgentToolContext``, ``AgentToolContext | None``, or the same as a string."""
    if annotation is AgentToolContext:
        return True
    if isinstance(annotation, str):
        return bool(_CONTEXT_TEXT.match(annotation.strip().strip("'\"")))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = set(typing.get_args(annotation)) - {type(None)}
        return args == {AgentToolContext}
    return False


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | ApprovalPolicy = False,
    timeout: float | None = None,
    timeout_behavior: TimeoutBehavior | None = None,
    sequential: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | ApprovalPolicy = False,
    timeout: float | None = None,
    timeout_behavior: TimeoutBehavior | None = None,
    sequential: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a tool: schema from type hints, description from the docstring.

    An ``async def`` function is awaited on the process event loop; a parameter annotated
    ``AgentToolContext`` receives the call's context and is left out of the schema.

    ``timeout`` bounds one call in seconds and ``timeout_behavior`` says what a call past
    it does (both default to the execution policy's); ``sequential=True`` makes the tool a
    barrier among the concurrent calls of one model response.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            requires_approval=requires_approval,
            timeout=timeout,
            timeout_behavior=timeout_behavior,
            sequential=sequential,
        )

    return wrap(fn) if fn is not None else wrap


def as_tool(value: Tool | Callable[..., Any]) -> Tool:
    """Accept a ``Tool`` or a plain function."""
    return value if isinstance(value, Tool) else Tool(value)


def render_result(value: Any, tool: str) -> str:
    """The ToolMessage content for ``tool``'s return value: the text itself, or JSON.

    In JSON, pydantic models, dataclasses, enums and sets (sorted) take their JSON forms and
    any other value its ``str``. A value that is not a result yet, at any depth, raises
    ``AwaitableResultError`` or ``IteratorResultError`` (closed, never rendered).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return _RESULT_JSON.encode(value)
    except _Unfinished as unfinished:
        raise unfinished.error(tool) from None


class _Unfinished(Exception):  # noqa: N818 - internal signal, never leaves render_result
    """A value in a result that is not a result yet (the tool's name is added above)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def error(self, tool: str) -> ToolCallAbortedError:
        if inspect.isawaitable(self.value):
            return AwaitableResultError(tool, self.value)
        return IteratorResultError(tool, self.value)


def _jsonable(value: Any) -> Any:
    """What the encoder writes for a value that JSON has no type for."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return _in_order(value)
    if inspect.isawaitable(value) or isinstance(value, Iterator | AsyncIterator):
        _close(value)
        raise _Unfinished(value)
    return str(value)


def _in_order(items: set[Any] | frozenset[Any]) -> list[Any]:
    """A set's items sorted when they compare, so one set always renders the same text."""
    try:
        return sorted(items)
    except TypeError:
        return list(items)


def _close(value: object) -> None:
    """Close an unread coroutine or generator, so none runs or warns "never awaited"."""
    if inspect.iscoroutine(value) or inspect.isgenerator(value):
        value.close()


#: ``json.dumps(value, default=_jsonable, ensure_ascii=False)``, built once.
_RESULT_JSON = json.JSONEncoder(default=_jsonable, ensure_ascii=False)


def error_content(kind: str, message: str, **extra: Any) -> str:
    """A structured error for the model: ``{"error": true, "type": kind, ...}``."""
    return json.dumps({"error": True, "type": kind, "message": message, **extra})
