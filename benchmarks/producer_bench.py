"""Benchmark: producers on an event loop, sync ``start`` against ``await astart``.

On a private redis-server: µs per start and per submit_resume, called from plain code
(sync), awaited one by one on a loop (``astart``: over ``redis.asyncio``), and awaited 50
at a time (``asyncio.gather``); and the longest the loop stalled meanwhile, sampled every
5 ms by a ticker task. A sync call made on the loop stalls it for the whole call.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import warnings
from pathlib import Path

import redis

from benchmarks.redis_bench import start_server
from runner_core import Agent, AgentResumeCommand, AgentRunner, FunctionModel, tool
from runner_core.messages import AiMessage, ToolCall, ToolMessage
from runner_core.models.base import ModelRequest
from stores import RedisAgentTurnStore


@tool(requires_approval=True)
def pay(amount: float) -> str:
    """Pay (needs approval)."""
    return f"paid {amount}"


def _model(request: ModelRequest) -> AiMessage:
    if not any(isinstance(m, ToolMessage) for m in request.messages):
        return AiMessage(tool_calls=[ToolCall(id="c1", name="pay", arguments={"amount": 5})])
    return AiMessage("done")


AGENT = Agent("bench-pay", FunctionModel(_model), tools=[pay])
APPROVE = AgentResumeCommand.approve_tool("c1")


async def _ticker(gaps: list[float]) -> None:
    last = time.monotonic()
    while True:
        await asyncio.sleep(0.005)
        now = time.monotonic()
        gaps.append(now - last)
        last = now


async def _on_loop(runner: AgentRunner, n: int, mode: str) -> tuple[float, float, float]:
    """µs (wall, CPU) per start in ``mode`` (sync-on-loop, await, gather), longest stall."""
    gaps: list[float] = []
    ticker = asyncio.create_task(_ticker(gaps))
    await asyncio.sleep(0.02)
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "sync-on-loop":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for _ in range(n):
                runner.start(AGENT, "pay")
    elif mode == "await":
        for _ in range(n):
            await runner.astart(AGENT, "pay")
    else:
        for _ in range(n // 50):
            await asyncio.gather(*(runner.astart(AGENT, "pay") for _ in range(50)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    await asyncio.sleep(0.01)
    ticker.cancel()
    return elapsed / n * 1e6, cpu / n * 1e6, max(gaps) * 1000


async def _resumes(runner: AgentRunner, ids: list[str]) -> float:
    t0 = time.perf_counter()
    for turn_id in ids:
        await runner.asubmit_resume(turn_id, APPROVE)
    return (time.perf_counter() - t0) / len(ids) * 1e6


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=500)
    n = parser.parse_args().turns
    with tempfile.TemporaryDirectory() as tmp:
        process, port = start_server(Path(tmp))
        try:
            store = RedisAgentTurnStore(redis.Redis(port=port), namespace="producers")
            runner = AgentRunner(turn_store=store)
            runner.run(AGENT, "warm up")
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                runner.start(AGENT, "pay")
            sync_us = (time.perf_counter() - t0) / n * 1e6
            sync_cpu = (time.process_time() - c0) / n * 1e6
            print(f"producers on Redis, {n} starts each (µs per start: wall, CPU of this process)")
            print(f"  start, plain code     {sync_us:7.1f} wall {sync_cpu:6.1f} CPU")
            for mode in ("sync-on-loop", "await", "gather"):
                us, cpu, stall = asyncio.run(_on_loop(runner, n, mode))
                label = {"sync-on-loop": "start on the loop", "await": "await astart"}.get(
                    mode, "astart, 50 gathered"
                )
                print(f"  {label:<21} {us:7.1f} wall {cpu:6.1f} CPU   loop stalled {stall:6.1f} ms")
            waiting = [runner.run(AGENT, "pay").id for _ in range(min(n, 200))]
            t0 = time.perf_counter()
            for turn_id in waiting[: len(waiting) // 2]:
                runner.submit_resume(turn_id, APPROVE)
            half = len(waiting) // 2
            sync_resume = (time.perf_counter() - t0) / half * 1e6
            async_resume = asyncio.run(_resumes(runner, waiting[half:]))
            print(f"  submit_resume: {sync_resume:7.1f} µs sync, {async_resume:7.1f} µs awaited")
        finally:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
