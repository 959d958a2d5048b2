"""Benchmark: one response with 10 calls of a 50 ms I/O tool, run concurrently.

Prints the wall time of the turn with ``max_tool_concurrency=10`` against the same turn
with a single call (target: at most 1.3 times), and the one-after-another figure.
"""

from __future__ import annotations

import argparse
import statistics
import time

from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentRunner,
    AiMessage,
    FunctionModel,
    ModelRequest,
    ToolCall,
    tool,
)

IO_SECONDS = 0.05
TARGET = 1.3


@tool
def fetch(n: int) -> str:
    """Wait on I/O (a sleep) like an HTTP call."""
    time.sleep(IO_SECONDS)
    return f"page {n}"


def _agent(calls: int) -> Agent:
    def model(request: ModelRequest) -> AiMessage:
        if request.messages[-1].role == "tool":
            return AiMessage("done")
        return AiMessage(
            tool_calls=[
                ToolCall(id=f"c{i}", name="fetch", arguments={"n": i}) for i in range(calls)
            ]
        )

    return Agent(f"fetch-{calls}", FunctionModel(model), tools=[fetch])


def measure(calls: int, concurrency: int, rounds: int) -> float:
    """Median wall seconds of one turn of ``calls`` calls at ``concurrency``."""
    runner = AgentRunner(policy=AgentExecutionPolicy(max_tool_concurrency=concurrency))
    agent = _agent(calls)
    runner.run(agent, "warm up")
    times: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        turn = runner.run(agent, "go")
        times.append(time.perf_counter() - started)
        assert turn.final_output == "done" and turn.tool_call_count == calls
    return statistics.median(times)


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    one = measure(1, 1, args.rounds)
    together = measure(10, 10, args.rounds)
    apart = measure(10, 1, max(3, args.rounds // 5))
    ratio = together / one
    verdict = "ok" if ratio <= TARGET else "over target"
    print(f"tools_bench: 1 call of {IO_SECONDS * 1000:.0f} ms: {one * 1000:.1f} ms per turn")
    print(
        f"tools_bench: 10 calls, max_tool_concurrency=10: {together * 1000:.1f} ms "
        f"({ratio:.2f}x one call; target <= {TARGET}x: {verdict})"
    )
    print(f"tools_bench: 10 calls, max_tool_concurrency=1: {apart * 1000:.1f} ms")


if __name__ == "__main__":
    main()
