"""Agents and the loaders that find them by id and version."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from runner_core.errors import AgentNotFoundError, InvalidArgumentError, InvalidArgumentTypeError
from runner_core.messages import SystemMessage
from runner_core.middleware import Middleware
from runner_core.models.base import (
    AnyChatModel,
    AsyncChatModel,
    ChatModel,
    OutputSchema,
    ToolSpec,
    supports_native_output,
)
from runner_core.output import OutputSpec
from runner_core.planning import AgentPlanningPolicy, plan_tool_specs
from runner_core.tools import Tool, as_tool


@runtime_checkable
class Toolset(Protocol):
    """Tools listed when first needed, such as an MCP server's (``runner_core.mcp``)."""

    #: The toolset's name in errors and traces.
    name: str

    def agent_tools(self) -> Sequence[Tool]:
        """The tools as they are now (may block; raises a retryable error when unreachable)."""
        ...


class Agent:
    """What a turn runs: a model, instructions, tools, limits and optional middleware."""

    def __init__(
        self,
        id: str,
        model: AnyChatModel,
        instructions: str = "",
        version: str = "1",
        tools: Sequence[Tool | Toolset | Callable[..., Any]] = (),
        sub_agents: Sequence[str] = (),
        planning: AgentPlanningPolicy | None = None,
        max_iterations: int = 100,
        max_attached_turns: int = 10,
        max_attached_messages: int = 100,
        middleware: Sequence[Middleware] = (),
        model_settings: dict[str, Any] | None = None,
        deps: Callable[[], Any] | None = None,
        output_type: Any = None,
        output_retries: int = 1,
        output_mode: str = "tool",
    ) -> None:
        """Define an agent.

        ``deps``: a zero-argument callable (sync or async) building what its tools share
        (``AgentToolContext.deps``), once per process, never persisted (``runner_core.deps``).
        A ``Toolset`` in ``tools`` is not contacted here: its tools are listed on first use.

        ``output_type``: a type the final answer is validated into (``turn.output``), asked
        for by ``output_mode``, refused answers retried ``output_retries`` times (docs/output.md).
        """
        _check(id, model, max_iterations, deps)
        self.id = id
        self.model = model
        self.instructions = instructions
        self.system_messages = (SystemMessage(instructions),) if instructions else ()
        self.version = str(version)
        self.sub_agents = tuple(sub_agents)
        self.planning = planning
        #: The final output's type, retries and checks (None: the answer is free text).
        self.output = _output(id, output_type, output_retries, output_mode, model, planning)
        self._offer(tools, planning)
        self.max_iterations = max_iterations
        self.max_attached_turns = max_attached_turns
        self.max_attached_messages = max_attached_messages
        self.middleware = tuple(middleware)
        self.model_settings = dict(model_settings or {})
        _check_response_format(id, self.model_settings, self.output)
        #: Builds the agent's per-process dependencies (None: ``ctx.deps`` is None).
        self.deps = deps

    def _offer(
        self, tools: Sequence[Tool | Toolset | Callable[..., Any]], planning: object
    ) -> None:
        """The tools and specs the model is offered; a toolset's are listed when first used."""
        self._tools, self._toolsets = _by_name(self.id, tools)
        #: Sent with each request (native output), else the final-answer tool is offered.
        self.output_schema, final_specs = _offer_output(self.output)
        #: The runner's own tools' specs (plan tools, the final-answer tool), after the rest.
        self._plan_specs = _runner_specs(self.id, planning, final_specs, self._tools)
        self._specs = [t.spec for t in self._tools.values()] + self._plan_specs
        self._expansion: tuple[tuple[Sequence[Tool], ...], dict[str, Tool], list[ToolSpec]]
        self._expansion = ((), self._tools, self._specs)

    @property
    def tools(self) -> dict[str, Tool]:
        """Every tool by name: the plain ones, then each toolset's as it lists them now."""
        return self._expanded()[0] if self._toolsets else self._tools

    @property
    def tool_specs(self) -> list[ToolSpec]:
        """The specs the model is offered: every tool's, then the plan tools'."""
        return self._expanded()[1] if self._toolsets else self._specs

    def _expanded(self) -> tuple[dict[str, Tool], list[ToolSpec]]:
        listed = tuple(ts.agent_tools() for ts in self._toolsets)
        seen, tools, specs = self._expansion
        if len(seen) == len(listed) and all(a is b for a, b in zip(seen, listed, strict=True)):
            return tools, specs
        tools = dict(self._tools)
        for toolset, provided in zip(self._toolsets, listed, strict=True):
            for t in provided:
                if t.name in tools or any(t.name == s.name for s in self._plan_specs):
                    raise InvalidArgumentError(
                        f"agent {self.id!r}: toolset {toolset.name!r} lists a tool named "
                        f"{t.name!r}, a name already taken (give the toolset a prefix)",
                        field="tools",
                    )
                tools[t.name] = t
        specs = [t.spec for t in tools.values()] + self._plan_specs
        self._expansion = (listed, tools, specs)
        return tools, specs

    def __repr__(self) -> str:
        return f"Agent({self.id!r}, version={self.version!r})"


def _check(id: str, model: object, max_iterations: int, deps: object) -> None:
    """Refuse what no turn could run with, naming the agent."""
    if not id:
        raise ValueError("agent id must not be empty")
    if max_iterations < 1:
        raise ValueError(f"agent {id!r}: max_iterations must be >= 1")
    if not isinstance(model, ChatModel | AsyncChatModel):
        raise InvalidArgumentError(
            f"agent {id!r}: the model needs generate() or agenerate(), not {model!r}",
            field="model",
        )
    if deps is not None and not callable(deps):
        raise InvalidArgumentError(
            f"agent {id!r}: deps must be a zero-argument callable, not {deps!r}", field="deps"
        )


def _runner_specs(
    agent_id: str,
    planning: object,
    final_specs: list[ToolSpec],
    tools: dict[str, Tool],
) -> list[ToolSpec]:
    """The specs of the tools the runner offers itself; no tool of the agent may take one."""
    specs = (
        plan_tool_specs() if isinstance(planning, AgentPlanningPolicy) and planning.enabled else []
    ) + final_specs
    for spec in specs:
        if spec.name in tools:
            raise InvalidArgumentError(
                f"agent {agent_id!r}: a tool is named {spec.name!r}, the name of a tool the "
                "runner offers itself",
                field="tools",
            )
    return specs


def _output(
    agent_id: str,
    output_type: Any,
    retries: object,
    mode: str,
    model: object,
    planning: AgentPlanningPolicy | None,
) -> OutputSpec | None:
    """The agent's output spec, refusing what could never produce a checked answer."""
    if isinstance(retries, bool) or not isinstance(retries, int):
        raise InvalidArgumentTypeError(
            f"agent {agent_id!r}: output_retries must be an int, not {retries!r}",
            field="output_retries",
        )
    if retries < 0:
        raise InvalidArgumentError(
            f"agent {agent_id!r}: output_retries must be >= 0, not {retries}",
            field="output_retries",
        )
    if output_type is None:
        return None
    spec = OutputSpec(agent_id, output_type, mode, retries)
    if spec.mode == "native" and not supports_native_output(model):
        raise InvalidArgumentError(
            f"agent {agent_id!r}: output_mode 'native' needs a model with native_output, "
            f"not {model!r}",
            field="output_mode",
        )
    if (
        isinstance(planning, AgentPlanningPolicy)
        and planning.enabled
        and not planning.final_summary
    ):
        raise InvalidArgumentError(
            f"agent {agent_id!r}: an output_type needs the plan's final_summary "
            "(the model's last answer is the output)",
            field="output_type",
        )
    return spec


def _offer_output(output: OutputSpec | None) -> tuple[OutputSchema | None, list[ToolSpec]]:
    """How the answer is asked for: the native schema, or the final-answer tool's spec."""
    if output is None:
        return None, []
    if output.mode == "native":
        return output.native_schema(), []
    return None, [output.tool_spec()]


def _check_response_format(
    agent_id: str, settings: dict[str, Any], output: OutputSpec | None
) -> None:
    """A class as ``response_format`` belongs in ``output_type``; native output sets its own."""
    fmt = settings.get("response_format")
    if fmt is None:
        return
    if isinstance(fmt, type):
        raise InvalidArgumentTypeError(
            f"agent {agent_id!r}: model_settings['response_format'] takes a dict; "
            f"pass {fmt.__name__} as output_type to get a validated turn.output",
            field="model_settings",
        )
    if output is not None and output.mode == "native":
        raise InvalidArgumentError(
            f"agent {agent_id!r}: output_mode 'native' sets response_format itself",
            field="model_settings",
        )


def _by_name(
    agent_id: str, tools: Sequence[Tool | Toolset | Callable[..., Any]]
) -> tuple[dict[str, Tool], tuple[Toolset, ...]]:
    """The plain tools by name, and the toolsets whose tools are listed when first needed."""
    by_name: dict[str, Tool] = {}
    toolsets: list[Toolset] = []
    for t in tools:
        if not isinstance(t, Tool) and isinstance(t, Toolset):
            toolsets.append(t)
            continue
        resolved = as_tool(t)
        if resolved.name in by_name:
            raise ValueError(f"agent {agent_id!r}: two tools named {resolved.name!r}")
        by_name[resolved.name] = resolved
    return by_name, tuple(toolsets)


class AgentLoader(Protocol):
    """Finds an agent: the exact version when given, else the latest one."""

    def load(self, agent_id: str, version: str | None = None) -> Agent:
        """Return the agent or raise ``AgentNotFoundError``."""
        ...


class InMemoryAgentLoader:
    """Agents registered in this process; the last registered version is the latest."""

    def __init__(self, agents: Iterable[Agent] = ()) -> None:
        self._lock = threading.Lock()
        self._versions: dict[str, dict[str, Agent]] = {}
        self._latest: dict[str, str] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: Agent) -> Agent:
        """Add (or replace) an agent version and make it the latest."""
        with self._lock:
            self._versions.setdefault(agent.id, {})[agent.version] = agent
            self._latest[agent.id] = agent.version
        return agent

    def load(self, agent_id: str, version: str | None = None) -> Agent:
        """The exact version when given, else the latest; ``AgentNotFoundError`` on a miss."""
        versions = self._versions.get(agent_id)
        if not versions:
            raise AgentNotFoundError(agent_id, version)
        agent = versions.get(version if version is not None else self._latest[agent_id])
        if agent is None:
            raise AgentNotFoundError(agent_id, version)
        return agent
