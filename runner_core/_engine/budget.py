"""Budget checks; each returns the reason text when a limit is reached, else None."""

from __future__ import annotations

from collections.abc import Callable

from runner_core.models.base import Usage
from runner_core.policy import AgentBudget
from runner_core.snapshot import AgentTurnSnapshot
from runner_core.status import AgentTurnPhase

Clock = Callable[[], float]


def duration_exceeded(st: AgentTurnSnapshot, budget: AgentBudget, clock: Clock) -> str | None:
    """Wall-clock time since creation, waiting included (the clock is read only if limited)."""
    limit = budget.max_duration_seconds
    if limit is None:
        return None
    used = clock() - st.created_at
    if used >= limit:
        return f"max_duration_seconds (used={used:.3f}, limit={limit})"
    return None


def tokens_exceeded(st: AgentTurnSnapshot, budget: AgentBudget, *, strict: bool) -> str | None:
    """Token limits: ``strict`` (after a response) fires above the limit, else at it.

    Cached input and reasoning tokens count: they are parts of the input and output
    totals (a provider bills them), and the reason names them where there are any.
    """
    if (
        budget.max_input_tokens is None
        and budget.max_output_tokens is None
        and budget.max_total_tokens is None
    ):
        return None
    u = st.usage
    for name, used, limit in (
        ("max_input_tokens", u.input_tokens, budget.max_input_tokens),
        ("max_output_tokens", u.output_tokens, budget.max_output_tokens),
        ("max_total_tokens", u.total_tokens, budget.max_total_tokens),
    ):
        if limit is not None and (used > limit if strict else used >= limit):
            return f"{name} (used={used}{_parts(name, u)}, limit={limit})"
    return None


def _parts(name: str, u: Usage) -> str:
    """The cached and reasoning parts of a limit's count, where there are any."""
    parts = []
    if name != "max_output_tokens" and u.cached_input_tokens:
        parts.append(f"cached={u.cached_input_tokens}")
    if name != "max_input_tokens" and u.reasoning_tokens:
        parts.append(f"reasoning={u.reasoning_tokens}")
    return "".join(f", {p}" for p in parts)


def tool_calls_exceeded(
    st: AgentTurnSnapshot, budget: AgentBudget, in_flight: int = 0
) -> str | None:
    """No tool call may start once ``max_tool_calls`` have run or are running.

    Calls in flight reserve their share: a batch starts only the calls that fit.
    """
    limit = budget.max_tool_calls
    if limit is None or st.tool_call_count + in_flight < limit:
        return None
    if in_flight:
        return f"max_tool_calls (used={st.tool_call_count}, running={in_flight}, limit={limit})"
    return f"max_tool_calls (used={st.tool_call_count}, limit={limit})"


def at_step_entry(st: AgentTurnSnapshot, budget: AgentBudget, clock: Clock) -> str | None:
    """Everything that stops a turn before its next step (tokens only before a model call)."""
    if st.phase is AgentTurnPhase.TOOLS:
        return duration_exceeded(st, budget, clock)
    return duration_exceeded(st, budget, clock) or tokens_exceeded(st, budget, strict=False)


def after_model(st: AgentTurnSnapshot, budget: AgentBudget, clock: Clock) -> str | None:
    """Checked right after a response, before any of its tools run."""
    return duration_exceeded(st, budget, clock) or tokens_exceeded(st, budget, strict=True)


def before_tool(
    st: AgentTurnSnapshot, budget: AgentBudget, clock: Clock, *, in_flight: int = 0
) -> str | None:
    """Checked before each tool call starts (``in_flight``: calls of its batch running)."""
    return duration_exceeded(st, budget, clock) or tool_calls_exceeded(st, budget, in_flight)
