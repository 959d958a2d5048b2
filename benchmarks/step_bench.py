"""Micro-benchmark: a 10-tool turn (11 model calls, 10 tool calls) on the embedded store.

Prints µs per step and turns/s, and the same turn with a long attached history, to show
that snapshots at every boundary do not make a step cost grow with the history; then, in
the same run, a bare loop that does the turn's work with a JSON log line per step (the
floor of any durable step on this machine) and the ratio of the two (target <= 12x).
"""

from __future__ import annotations

import argparse
import gc
import json
import time

from benchmarks import baseline
from runner_core import (
    Agent,
    AgentRunner,
    AiMessage,
    FunctionModel,
    ModelRequest,
    ToolCall,
    UserMessage,
    tool,
)
from runner_core.messages import Message

TOOL_CALLS = 10


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _model(request: ModelRequest) -> AiMessage:
    done = 0
    for message in reversed(request.messages):
        if message.role == "user":
            break
        if message.role == "tool":
            done += 1
    if done < TOOL_CALLS:
        return AiMessage(
            tool_calls=[ToolCall(id=f"c{done}", name="add", arguments={"a": done, "b": 1})]
        )
    return AiMessage("done")


def _history(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n // 2):
        out.append(UserMessage(f"question {i} " + "x" * 200))
        out.append(AiMessage(f"answer {i} " + "y" * 200))
    return out


def measure(turns: int, history: int) -> tuple[float, float]:
    """Run ``turns`` turns; return (µs per step, turns per second), best of 5 rounds."""
    rounds = Rounds(history)
    best = min(rounds.step(turns) for _ in range(5))
    return best, 1e6 / (best * rounds.steps_per_turn)


class Rounds:
    """The 10-tool turn on one warmed-up runner, timed a round at a time."""

    def __init__(self, history: int) -> None:
        self.runner = AgentRunner()
        self.agent = Agent("bench", FunctionModel(_model), instructions="add", tools=[add])
        self.attached = _history(history)
        self.steps_per_turn = self.runner.run(
            self.agent, "warm up", history=self.attached
        ).step_count

    def step(self, turns: int) -> float:
        """µs per step of one round of ``turns`` turns."""
        gc.collect()
        steps = 0
        started = time.perf_counter()
        for _ in range(turns):
            turn = self.runner.run(self.agent, "go", history=self.attached)
            steps += turn.step_count
        elapsed = time.perf_counter() - started
        assert turn.final_output == "done" and turn.tool_call_count == TOOL_CALLS
        return elapsed / steps * 1e6


def bare_loop(turns: int, rounds: int = 5) -> float:
    """µs per step of the 10-tool turn done by hand, each step logged as a JSON line.

    The same 21 steps (a model decision, then the tool's result, ten times, then the
    answer), with no runner: the floor a durable step is measured against.
    """
    best = float("inf")
    for _ in range(rounds):
        log: list[str] = []
        started = time.perf_counter()
        for _ in range(turns):
            messages: list[dict[str, object]] = [{"role": "user", "text": "go"}]
            for step in range(2 * TOOL_CALLS + 1):
                if step % 2 == 0 and step < 2 * TOOL_CALLS:
                    n = step // 2
                    entry: dict[str, object] = {"call": "add", "args": {"a": n, "b": 1}}
                elif step % 2 == 1:
                    entry = {"result": add(a=step // 2, b=1)}
                else:
                    entry = {"answer": "done"}
                messages.append(entry)
                log.append(json.dumps({"step": step, "entry": entry}))
        elapsed = time.perf_counter() - started
        best = min(best, elapsed / (turns * (2 * TOOL_CALLS + 1)) * 1e6)
    return best


def ratios(turns: int) -> dict[str, float]:
    """The in-memory step and the bare loop, measured side by side, and their ratio.

    Each of 5 rounds times the steps and then the bare loop right after them, so both
    sides are sampled over the same stretch of a machine whose speed drifts; the ratio is
    the best step over the best bare loop.
    """
    rounds = Rounds(10)
    pairs = [(rounds.step(turns), bare_loop(turns, rounds=1)) for _ in range(5)]
    step, bare = min(s for s, _ in pairs), min(b for _, b in pairs)
    return {"memory_step_us": step, "bare_loop_us": bare, "memory_step_per_bare_loop": step / bare}


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    print(
        f"10-tool turn ({TOOL_CALLS + 1} model calls, {TOOL_CALLS} tool calls, 21 steps), "
        "FunctionModel, in-memory store, no listeners"
    )
    base = None
    for history in (0, 100, 400):
        us, tps = measure(args.turns, history)
        base = base or us
        print(
            f"  history {history:>3} messages: {us:7.1f} µs/step  {tps:8.0f} turns/s  "
            f"({us / base:.2f}x of no history)"
        )
    print(
        "target: <= 50 µs/step; peers on this workload: LangGraph ~460, "
        "OpenAI Agents SDK ~660, Pydantic AI ~790 µs/step"
    )
    figures = ratios(args.turns)
    print("side by side (history 10), against benchmarks/baseline.json:")
    print(baseline.line("memory_step_us", figures["memory_step_us"], " µs"))
    print(baseline.line("bare_loop_us", figures["bare_loop_us"], " µs"))
    print(baseline.line("memory_step_per_bare_loop", figures["memory_step_per_bare_loop"], "x"))


if __name__ == "__main__":
    main()
