"""Typed final output: what an agent's ``output_type`` asks of the model, and the checks.

``OutputSpec`` is built once per agent from a type pydantic's ``TypeAdapter`` takes (a
model class, ``list[...]``, a union, a dataclass, ``int``...). It knows how the answer is
asked for (the ``final_result`` tool, or the provider's native structured output), how an
answer is validated, how a refusal reads to the model, and how the value is stored as JSON
and rebuilt after a restore (docs/output.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import PydanticUserError, TypeAdapter, ValidationError
from pydantic_core import SchemaError, to_json

from runner_core._engine.frozen import thaw
from runner_core.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    SnapshotCorruptedError,
    shorten,
)
from runner_core.models.base import OutputSchema, ToolSpec
from runner_core.models.function import INVALID_ARGUMENTS_KEY

OutputMode = Literal["tool", "native"]
"""How the answer is asked for: the final-answer tool, or native structured output."""

FINAL_TOOL = "final_result"
"""The name of the final-answer tool the model calls with its answer as arguments."""

WRAP_KEY = "response"
"""The one property that carries an answer whose schema is not a JSON object."""

#: How many validation errors a refusal lists for the model.
SHOWN_ERRORS = 10

_NAME = re.compile(r"[^A-Za-z0-9_-]")
_FENCE = re.compile(r"^```[A-Za-z]*\s*\n?(.*?)\n?```$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Valid:
    """An answer that passed: the validated value."""

    value: Any


@dataclass(frozen=True, slots=True)
class OutputProblem:
    """Why an answer was refused: the first error's field (pydantic loc) and every error."""

    #: ``"items.0.price"``; None when the answer as a whole was wrong.
    field: str | None
    #: The first error's message.
    detail: str
    #: Every error (up to ``SHOWN_ERRORS``), one ``field: message`` line each.
    lines: tuple[str, ...]

    def summary(self) -> str:
        """``field: detail`` (or the detail alone)."""
        return f"{self.field}: {self.detail}" if self.field else self.detail


class OutputSpec:
    """An agent's output type, how it is asked for and how an answer is checked."""

    def __init__(
        self, agent_id: str, output_type: Any, mode: str = "tool", retries: int = 1
    ) -> None:
        if isinstance(output_type, dict):
            raise InvalidArgumentTypeError(
                f"agent {agent_id!r}: output_type takes a type, not a JSON schema; keep a "
                "dict schema in model_settings['response_format'] (sent as it is, not validated)",
                field="output_type",
            )
        if mode not in ("tool", "native"):
            raise InvalidArgumentError(
                f"agent {agent_id!r}: output_mode must be 'tool' or 'native', not {mode!r}",
                field="output_mode",
            )
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(output_type)
            schema = adapter.json_schema()
        except (PydanticUserError, SchemaError, TypeError, NameError) as exc:
            raise InvalidArgumentTypeError(
                f"agent {agent_id!r}: output_type {shorten(output_type)} is not a type "
                f"pydantic can validate and describe: {str(exc).splitlines()[0]}",
                field="output_type",
            ) from exc
        self.agent_id = agent_id
        self.type = output_type
        self.mode: OutputMode = "native" if mode == "native" else "tool"
        #: Refused answers sent back to the model before the turn fails.
        self.retries = retries
        self.adapter = adapter
        #: The answer's schema is not an object: it travels as ``{"response": value}``.
        self.wrapped = schema.get("type") != "object"
        self.schema = _wrapped(schema) if self.wrapped else schema
        self.name = _schema_name(output_type)

    # -- how the answer is asked for ------------------------------------------------------
    def tool_spec(self) -> ToolSpec:
        """The final-answer tool: its arguments are the answer."""
        about = self.schema.get("description") or ""
        description = "Give the final answer by calling this tool; its arguments are the answer."
        return ToolSpec(FINAL_TOOL, f"{description} {about}".strip(), self.schema)

    def native_schema(self) -> OutputSchema:
        """The schema a native structured-output request sends."""
        return OutputSchema(self.name, self.schema, self.schema.get("description") or "")

    # -- checking an answer ---------------------------------------------------------------
    def from_arguments(self, arguments: dict[str, Any]) -> Valid | OutputProblem:
        """The value of a final-answer call's arguments, or why it was refused."""
        if INVALID_ARGUMENTS_KEY in arguments:
            return _problem(None, "the arguments are not a JSON object")
        return self._validated(thaw(arguments))

    def from_text(self, text: str | None) -> Valid | OutputProblem:
        """The value of a native answer's JSON text, or why it was refused."""
        raw = (text or "").strip()
        fenced = _FENCE.match(raw)
        try:
            data = json.loads(fenced.group(1) if fenced else raw)
        except ValueError as exc:
            return _problem(None, f"the answer is not JSON ({exc})")
        return self._validated(data)

    def _validated(self, data: Any) -> Valid | OutputProblem:
        if self.wrapped:
            if not isinstance(data, dict) or WRAP_KEY not in data:
                return _problem(WRAP_KEY, f"the answer goes in the {WRAP_KEY!r} property")
            data = data[WRAP_KEY]
        try:
            return Valid(self.adapter.validate_python(data))
        except ValidationError as exc:
            return problem_of(exc)

    # -- what is said to the model ---------------------------------------------------------
    def refusal(self, problem: OutputProblem) -> str:
        """The retry prompt: what was wrong, field by field, and how to answer again."""
        listed = "\n".join(f"- {line}" for line in problem.lines)
        again = (
            f"Call {FINAL_TOOL} with the corrected answer as its arguments."
            if self.mode == "tool"
            else "Answer again with JSON only, matching the required schema."
        )
        return f"The final answer does not match the required output:\n{listed}\n{again}"

    def missing_call(self) -> OutputProblem:
        """A plain-text answer where the final-answer tool was expected."""
        return _problem(None, f"the final answer must be given by calling {FINAL_TOOL}")

    # -- storing the value ----------------------------------------------------------------
    def dump(self, value: Any) -> Any:
        """The value's JSON form (what the snapshot keeps)."""
        return self.adapter.dump_python(value, mode="json")

    def text(self, value: Any) -> str:
        """The value's JSON text (the turn's ``final_output``)."""
        return self.adapter.dump_json(value).decode()

    def load(self, form: Any, turn_id: str, agent_version: str) -> Any:
        """The value rebuilt from its JSON form (after a restore: an instance again)."""
        try:
            return self.adapter.validate_json(to_json(form))
        except ValidationError as exc:
            problem = problem_of(exc)
            raise SnapshotCorruptedError(
                turn_id,
                f"output does not fit the output_type of agent {self.agent_id!r} "
                f"version {agent_version!r}: {problem.summary()}",
            ) from exc


def problem_of(exc: ValidationError) -> OutputProblem:
    """A pydantic error as an ``OutputProblem`` (fields as dotted pydantic locations)."""
    errors = exc.errors(include_url=False)
    lines = tuple(_line(e) for e in errors[:SHOWN_ERRORS])
    first = errors[0]
    return OutputProblem(_loc(first) or None, str(first.get("msg", "invalid")), lines)


def _line(error: Any) -> str:
    where = _loc(error) or "(answer)"
    shown = shorten(error.get("input"), 60)
    return f"{where}: {error.get('msg', 'invalid')} (got {shown})"


def _loc(error: Any) -> str:
    return ".".join(str(part) for part in error.get("loc", ()))


def _problem(field: str | None, detail: str) -> OutputProblem:
    line = f"{field}: {detail}" if field else detail
    return OutputProblem(field, detail, (line,))


def _wrapped(schema: dict[str, Any]) -> dict[str, Any]:
    """An object schema with one required ``response`` property; ``$defs`` stay on top."""
    inner = dict(schema)
    defs = inner.pop("$defs", None)
    wrapper: dict[str, Any] = {
        "type": "object",
        "properties": {WRAP_KEY: inner},
        "required": [WRAP_KEY],
    }
    if defs:
        wrapper["$defs"] = defs
    return wrapper


def _schema_name(output_type: Any) -> str:
    """A name a provider accepts (``^[A-Za-z0-9_-]{1,64}$``): the type's, else ``final_result``."""
    name = getattr(output_type, "__name__", None)
    if not isinstance(name, str) or not name or getattr(output_type, "__args__", None):
        return FINAL_TOOL
    return _NAME.sub("_", name)[:64]
