"""Benchmark: a call to a local stdio MCP tool, once the session is open.

Runs 1,000 calls of the test server's ``noop`` tool the way a step runs one (arguments
checked, the call's context, the hop to the process event loop, ``tools/call`` with the
idempotency key) and prints the median wall time per call against the server's own time:
the CPU time its process spent per call (from /proc). Target: at most 1 ms over it. The
SDK's bare round trip (no agentworker code) is printed for comparison.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runner_core import AgentToolContext
from runner_core._engine import aio
from runner_core.mcp import IDEMPOTENCY_KEY, MCPTool, MCPToolset

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "support" / "mcp_servers" / "tools_server.py"
TARGET_MS = 1.0


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_call(tool: MCPTool, n: int) -> float:
    """Seconds of one call as a step makes it."""
    started = time.perf_counter()
    kwargs = tool.validate({})
    ctx = AgentToolContext(turn_id="bench", call_id=f"c{n}", tool_name=tool.name, metadata={})
    token = ctx.activate()
    try:
        result = aio.run(tool.fn(**kwargs), timeout=30)
    finally:
        AgentToolContext.deactivate(token)
    elapsed = time.perf_counter() - started
    assert result == '{"result": "ok"}', result
    return elapsed


async def bare_calls(toolset: MCPToolset, calls: int) -> list[float]:
    """Seconds of each SDK ``call_tool`` on the open session, on the loop itself."""
    live = await toolset.session.session()
    times: list[float] = []
    for _ in range(calls):
        started = time.perf_counter()
        await live.client.call_tool("noop", {}, meta={IDEMPOTENCY_KEY: "bench:c"})  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
    return times


def server_pid(log: Path) -> int:
    for line in log.read_text().splitlines():
        if '"start"' in line:
            return int(line.split('"pid": ')[1].split(",")[0])
    raise RuntimeError("the server did not log its start")


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "calls.log"
        toolset = MCPToolset.stdio(
            sys.executable, [str(SERVER)], env={"MCP_TEST_LOG": str(log)}, name="bench"
        )
        tool = next(t for t in toolset.agent_tools() if t.name == "noop")  # session open
        for n in range(50):  # warm up
            one_call(tool, n)
        pid = server_pid(log)
        cpu_before = cpu_seconds(pid)
        ours = [one_call(tool, n) for n in range(args.calls)]
        server = (cpu_seconds(pid) - cpu_before) / args.calls
        bare = aio.run(bare_calls(toolset, args.calls))
        toolset.close()
    median = statistics.median(ours)
    over_ms = (median - server) * 1000
    verdict = "ok" if over_ms <= TARGET_MS else "over target"
    print(
        f"mcp_bench: {args.calls} stdio calls, session open: median {median * 1000:.3f} ms "
        f"per call, the server's own time {server * 1000:.3f} ms per call"
    )
    print(
        f"mcp_bench: {over_ms:.3f} ms over the server's time "
        f"(target <= {TARGET_MS:g} ms: {verdict})"
    )
    print(f"mcp_bench: the SDK's bare round trip: median {statistics.median(bare) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
