"""``make demo-fleet``: two real Celery workers and beat on a local Redis run 50 turns.

Starts a private redis-server (unless ``--redis-url`` is given), two workers and beat,
submits order-support turns (tools, an approval, a form, a child agent), answers approvals
and forms through ``submit_resume`` as a webhook would, shows progress, prints a summary,
and stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agentworker.fleet.app import create_app
from agentworker.settings import Settings
from agentworker.wiring import make_runner
from runner_core import AgentResumeCommand, AgentRunner, AgentTurnSnapshot, AgentTurnStatus
from tests.support.servers import Fleet, RedisServer

PROMPT = "Order 1001 arrived broken: refund it and send a replacement."


def answer(runner: AgentRunner, s: AgentTurnSnapshot) -> bool:
    """Play the webhook: approve refunds, submit the address form. True if it resumed."""
    if s.suspension is None:
        return False
    if s.status is AgentTurnStatus.WAITING_FOR_APPROVAL:
        cmd = AgentResumeCommand.approve_tool(s.suspension.correlation_id or "")
        runner.submit_resume(s.id, cmd.with_metadata(approver="fleet-demo"))
        return True
    if s.status is AgentTurnStatus.WAITING_FOR_USER:
        form = {"street": "12 Roastery Lane", "city": "Portland"}
        runner.submit_resume(s.id, AgentResumeCommand.user_input(form, s.suspension.correlation_id))
        return True
    return False


def drive(
    runner: AgentRunner, ids: list[str], console: Console, timeout: float
) -> dict[str, AgentTurnSnapshot]:
    """Answer suspensions until every turn has ended; a progress bar shows how far."""
    done: dict[str, AgentTurnSnapshot] = {}
    columns = (
        TextColumn("[bold]turns"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("turns", total=len(ids), note="")
        deadline = time.monotonic() + timeout
        while len(done) < len(ids) and time.monotonic() < deadline:
            waiting = Counter[str]()
            for turn_id in ids:
                if turn_id in done:
                    continue
                s = runner.store.load(turn_id)
                if s.status.is_terminal:
                    done[turn_id] = s
                elif not answer(runner, s):
                    waiting[s.status.value] += 1
            note = "  ".join(f"{k.lower()}: {v}" for k, v in sorted(waiting.items()))
            progress.update(bar, completed=len(done), note=note)
            time.sleep(0.1)
    return done


def summary(
    console: Console, runner: AgentRunner, done: dict[str, AgentTurnSnapshot], elapsed: float
) -> None:
    """One table: statuses, steps, tools, children, tokens, throughput."""
    table = Table(title="fleet summary")
    for column in ("status", "turns", "avg steps", "tool calls", "child turns", "tokens"):
        table.add_column(column, justify="right" if column != "status" else "left")
    by_status: dict[AgentTurnStatus, list[AgentTurnSnapshot]] = {}
    for s in done.values():
        by_status.setdefault(s.status, []).append(s)
    for status, turns in sorted(by_status.items()):
        children = sum(len(runner.store.children_of(s.id)) for s in turns)
        table.add_row(
            status.value,
            str(len(turns)),
            f"{sum(s.step_count for s in turns) / len(turns):.1f}",
            str(sum(s.tool_call_count for s in turns)),
            str(children),
            str(sum(s.usage.total_tokens for s in turns)),
        )
    console.print(table)
    console.print(f"{len(done)} turns in {elapsed:.1f} s ({len(done) / elapsed:.1f} turns/s)")


def wait_until_blocked(
    runner: AgentRunner, ids: list[str], timeout: float
) -> dict[str, AgentTurnSnapshot]:
    """Wait (answering nothing) until every turn waits for a person or has ended."""
    deadline = time.monotonic() + timeout
    seen: dict[str, AgentTurnSnapshot] = {}
    while time.monotonic() < deadline:
        seen = {i: runner.store.load(i) for i in ids}
        if all(s.status.is_terminal or s.status in HUMAN for s in seen.values()):
            break
        time.sleep(0.1)
    return seen


HUMAN = (AgentTurnStatus.WAITING_FOR_APPROVAL, AgentTurnStatus.WAITING_FOR_USER)


def print_next_steps(
    console: Console, env: dict[str, str], turns: dict[str, AgentTurnSnapshot], pids: Path
) -> None:
    """What to try on the fleet left running, and how to stop it."""
    waiting = next((s for s in turns.values() if s.suspension is not None), None)
    turn_id = waiting.id if waiting else "<turn id>"
    call = waiting.suspension.correlation_id if waiting and waiting.suspension else "<call id>"
    exports = " \\\n  ".join(
        f"{k}={v}" for k, v in env.items() if k != "AGENTWORKER_SWEEP_INTERVAL"
    )
    console.print(
        f"""
[bold]The fleet keeps running[/] ({len(turns)} turns wait for an approval).
In another shell, with the venv active, from this directory:

  . .venv/bin/activate
  export PYTHONPATH=$PWD \\
  {exports}
  agentworker turns list --status waiting_for_approval
  agentworker turns show {turn_id}             # the refund and its arguments
  agentworker turns resume {turn_id} --approve {call} --by you
  agentworker turns show {turn_id}             # now it asks for an address
  agentworker turns resume {turn_id} --input '{{"street": "1 Main St", "city": "Oslo"}}'
  agentworker turns tail {turn_id} --timeout 10

[bold]Stop it:[/] kill $(cat {pids})""",
        highlight=False,
        soft_wrap=True,
    )


def main() -> None:
    """Run the fleet demo."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=None, help="50, or 3 with --keep")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of starting one")
    parser.add_argument("--no-spawn", action="store_true", help="workers run elsewhere (compose)")
    parser.add_argument(
        "--keep", action="store_true", help="leave the fleet running with turns waiting for you"
    )
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    turns = args.turns or (3 if args.keep else 50)
    console = Console()
    workdir = Path(tempfile.mkdtemp(prefix="agentworker-fleet-"))
    server = None
    if args.redis_url is None and not args.no_spawn:
        server = RedisServer(workdir / "redis").start()
        console.print(f"started redis-server on port {server.port}")
    redis_url = args.redis_url or (server.url if server else Settings().redis_url)
    env = {
        "AGENTWORKER_REDIS_URL": redis_url,
        "AGENTWORKER_BROKER_URL": os.environ.get("AGENTWORKER_BROKER_URL", redis_url),
        "AGENTWORKER_NAMESPACE": os.environ.get(
            "AGENTWORKER_NAMESPACE", "fleet-" + uuid.uuid4().hex[:6]
        ),
        "AGENTWORKER_AGENT_LOADER": "examples.orders:order_loader",
        "AGENTWORKER_SWEEP_INTERVAL": "0.5",
    }
    os.environ.update(env)
    fleet = Fleet(env, workdir / "logs")
    keep = False
    try:
        if not args.no_spawn:
            for i in range(args.workers):
                fleet.start_worker(f"worker{i + 1}")
            fleet.start_beat()
            fleet.wait_ready()
            console.print(f"{args.workers} workers and beat ready (logs in {fleet.logs})")
        settings = Settings()
        runner = make_runner(settings, create_app(settings))
        started = time.monotonic()
        ids = [runner.start("order-support", PROMPT).id for _ in range(turns)]
        if args.keep:
            blocked = wait_until_blocked(runner, ids, args.timeout)
            pids = workdir / "pids"
            procs = [*fleet.workers.values(), fleet.beat, server.process if server else None]
            pids.write_text(" ".join(str(p.pid) for p in procs if p is not None) + "\n")
            print_next_steps(console, env, blocked, pids)
            keep = True
            return
        done = drive(runner, ids, console, args.timeout)
        summary(console, runner, done, time.monotonic() - started)
    finally:
        if not keep:
            fleet.stop()
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
