"""Agents and the loaders that find them by id and version."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from runner_core.errors import AgentNotFoundError, InvalidArgumentError, InvalidArgumentTypeError
from runner_core.messages import SystemMessage
from runner_core.middleware import Middleware
from runner_core.models.base import (
    AnyChatModel,
    AsyncChatModel,
    ChatModel,
    OutputSchema,
    supports_native_output,
)
from runner_core.output import FINAL_TOOL, OutputSpec
from runner_core.planning import AgentPlanningPolicy, plan_tool_specs
from runner_core.tools import Tool, as_tool


class Agent:
    """What a turn runs: a model, instructions, tools, limits and optional middleware."""

    def __init__(
        self,
        id: str,
        model: AnyChatModel,
        instructions: str = "",
        version: str = "1",
        tools: Sequence[Tool | Callable[..., Any]] = (),
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

        ``output_type``: a type the final answer is validated into (``turn.output``), asked
        for by ``output_mode``, refused answers retried ``output_retries`` times (docs/output.md).
        """
        _check(id, model, max_iterations, deps)
        self.id = id
        self.model = model
        self.instructions = instructions
        self.system_messages = (SystemMessage(instructions),) if instructions else ()
        self.version = str(version)
        self.tools = _by_name(id, tools)
        self.sub_agents = tuple(sub_agents)
        self.planning = planning
        self.tool_specs = [t.spec for t in self.tools.values()]
        if isinstance(planning, AgentPlanningPolicy) and planning.enabled:
            self.tool_specs += plan_tool_specs()
        #: The final output's type, retries and checks (None: the answer is free text).
        self.output = _output(id, output_type, output_retries, output_mode, model, planning)
        self.output_schema = _offer_output(self)  # sent with each request (native output)
        self.max_iterations = max_iterations
        self.max_attached_turns = max_attached_turns
        self.max_attached_messages = max_attached_messages
        self.middleware = tuple(middleware)
        self.model_settings = dict(model_settings or {})
        _check_response_format(id, self.model_settings, self.output)
        #: Builds the agent's per-process dependencies (None: ``ctx.deps`` is None).
        self.deps = deps

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


def _offer_output(agent: Agent) -> OutputSchema | None:
    """How the answer is asked for: the native schema, or the final-answer tool added."""
    output = agent.output
    if output is None:
        return None
    if output.mode == "native":
        return output.native_schema()
    if FINAL_TOOL in agent.tools:
        raise InvalidArgumentError(
            f"agent {agent.id!r}: a tool is named {FINAL_TOOL!r}, the final-answer tool",
            field="tools",
        )
    agent.tool_specs.append(output.tool_spec())
    return None


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


def _by_name(agent_id: str, tools: Sequence[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    by_name: dict[str, Tool] = {}
    for t in tools:
        resolved = as_tool(t)
        if resolved.name in by_name:
            raise ValueError(f"agent {agent_id!r}: two tools named {resolved.name!r}")
        by_name[resolved.name] = resolved
    return by_name


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
