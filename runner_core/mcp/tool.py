"""One tool of an MCP server, as an agent tool: its schema, its fingerprint, its call."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import jsonschema
from mcp import types

from runner_core.context import AgentToolContext
from runner_core.models.base import ToolSpec
from runner_core.tools import (
    ApprovalPolicy,
    InvalidToolArguments,
    TimeoutBehavior,
    Tool,
)

if TYPE_CHECKING:
    from runner_core.mcp.toolset import MCPToolset

#: The ``_meta`` key of every ``tools/call``: the call's ``turn_id:call_id``.
IDEMPOTENCY_KEY = "agentworker/idempotency-key"


def fingerprint(name: str, input_schema: dict[str, Any]) -> str:
    """A stable hash of a tool's name and input schema (key order does not count)."""
    text = json.dumps([name, input_schema], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class MCPTool(Tool):
    """A tool listed by an MCP server; calling it sends ``tools/call`` to that server.

    ``name`` is the agent's name for it (the toolset's prefix included), ``remote_name``
    the server's; ``fingerprint`` hashes the listed name and input schema.
    """

    def __init__(
        self,
        toolset: MCPToolset,
        listed: types.Tool,
        *,
        name: str,
        requires_approval: bool | ApprovalPolicy,
        timeout: float | None,
        timeout_behavior: TimeoutBehavior | None,
    ) -> None:
        self.toolset = toolset
        self.remote_name = listed.name
        self.server = toolset.name
        self.fingerprint = fingerprint(listed.name, listed.input_schema)

        async def call(**arguments: Any) -> str:
            return await toolset.call(self, arguments, AgentToolContext.current())

        super().__init__(
            call,
            name=name,
            description=listed.description or listed.title or "",
            requires_approval=requires_approval,
            timeout=timeout,
            timeout_behavior=timeout_behavior,
        )
        self.spec = ToolSpec(self.name, self.description, dict(listed.input_schema))
        self._validator = _validator(listed.input_schema)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as given, checked against the listed input schema."""
        if self._validator is not None:
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
            if error is not None:
                where = ".".join(str(p) for p in error.absolute_path) or "arguments"
                raise InvalidToolArguments(f"{where}: {error.message}")
        return dict(arguments)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, server={self.server!r})"


def _validator(schema: dict[str, Any]) -> Any:
    """A validator of ``schema`` (None: a schema that is itself invalid; the server checks)."""
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return None
    return cls(schema)
