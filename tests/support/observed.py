"""The observability scenario: two tools, an approval, a retry, a plan with two children.

Shared by the in-process tracing test and the end-to-end one (workers load ``loader``). The
model's single failure is counted by ``fail_once``: a dict in-process, Redis across workers.

The root turn's steps (MODEL/TOOLS alternate):
 1. model -> ``lookup(a)``, ``lookup(b)``      2. both tools run
 3. model -> ``pay`` (approval required)       4. waits for approval ... approved
 5. ``pay`` runs                                6. model fails (retryable) -> retry scheduled
 7. model -> ``create_task_plan`` (2 tasks)     8. the plan is stored
 9. both children start (WAITING_FOR_CHILD)    each child: one model call, a final answer
10. the results are settled; the model answers
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentPlanningPolicy,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelError,
    ModelRequest,
    ModelResponse,
    RetryPolicy,
    ToolCall,
    ToolMessage,
    Usage,
    tool,
)

ROOT, CHILD = "obs-root", "obs-child"
MODEL = "obs-model-1"
#: The root turn's policy: retries due at once.
POLICY = AgentExecutionPolicy(retry=RetryPolicy(max_retries=2, initial_delay=0.05))


log = logging.getLogger(__name__)


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    log.info("looking up %s", key)  # a worker's JSON log carries the turn's fields
    return f"value of {key}"


@tool(requires_approval=True)
def pay(amount: float) -> str:
    """Pay (needs approval)."""
    return f"paid {amount}"


def _results(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


def _answer(message: AiMessage) -> ModelResponse:
    return ModelResponse(message, Usage(input_tokens=10, output_tokens=3))


def root_model(fail_once: Callable[[str], bool]) -> Callable[[ModelRequest], ModelResponse]:
    """The root's scripted model; ``fail_once(key)`` is true the first time per key."""

    def fn(request: ModelRequest) -> ModelResponse:
        done = _results(request)
        if not done:
            calls = [
                ToolCall(id="look-a", name="lookup", arguments={"key": "a"}),
                ToolCall(id="look-b", name="lookup", arguments={"key": "b"}),
            ]
            return _answer(AiMessage(tool_calls=calls))
        if len(done) == 2:
            pay_call = ToolCall(id="pay-1", name="pay", arguments={"amount": 5.0})
            return _answer(AiMessage(tool_calls=[pay_call]))
        if len(done) == 3:
            if fail_once(request.messages[0].id):
                raise ModelError("overloaded", retryable=True)
            tasks = [{"id": f"t{i}", "description": f"part {i}", "agent": CHILD} for i in (1, 2)]
            plan = {"goal": "two parts", "tasks": tasks}
            return _answer(
                AiMessage(tool_calls=[ToolCall(id="plan", name="create_task_plan", arguments=plan)])
            )
        statuses = [t["status"] for t in json.loads(done[-1].content)["tasks"]]
        return _answer(AiMessage("parts: " + ", ".join(statuses)))

    return fn


def _child(request: ModelRequest) -> ModelResponse:
    return _answer(AiMessage("child done"))


class _Model(FunctionModel):
    """A FunctionModel that names its model (``gen_ai.request.model``)."""

    model = MODEL


def agents(fail_once: Callable[[str], bool]) -> list[Agent]:
    """The root (a planner with two tools) and its child agent."""
    return [
        Agent(
            ROOT,
            _Model(root_model(fail_once)),
            tools=[lookup, pay],
            sub_agents=[CHILD],
            planning=AgentPlanningPolicy(max_tasks=5, final_summary=True),
        ),
        Agent(CHILD, _Model(_child)),
    ]


def memory_fail_once() -> Callable[[str], bool]:
    """``fail_once`` for one process."""
    seen: set[str] = set()

    def fail_once(key: str) -> bool:
        if key in seen:
            return False
        seen.add(key)
        return True

    return fail_once


def _redis_fail_once(key: str) -> bool:
    import redis

    client = redis.Redis.from_url(os.environ["AGENTWORKER_REDIS_URL"])
    return bool(client.set("obs:failed:" + key, "1", nx=True))


def loader() -> InMemoryAgentLoader:
    """What workers load (``AGENTWORKER_AGENT_LOADER=tests.support.observed:loader``)."""
    return InMemoryAgentLoader(agents(_redis_fail_once))


@contextmanager
def collecting_spans() -> Iterator[Any]:
    """An SDK tracer provider with an in-memory exporter, global inside this block only.

    OpenTelemetry lets a process set its provider once; tests reset that private state (as
    OpenTelemetry's own test utilities do), so the other tests run untraced.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once

    def reset() -> None:
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reset()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        reset()
        provider.shutdown()
