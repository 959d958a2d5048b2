"""The per-process object: one runner per OS process, and no state left in modules."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from celery import signals

from agentworker.fleet import process as process_module
from agentworker.fleet.process import FleetProcess
from agentworker.settings import Settings
from agentworker.wiring import create_app
from runner_core import AgentRunner, InMemoryAgentTurnStore

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = Settings(
    redis_url="redis://127.0.0.1:1/0", agent_loader="examples.orders:order_loader"
)


def test_the_runner_is_built_once_per_process_and_again_after_a_fork(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a process object whose runners live in memory
    app = create_app(UNREACHABLE)
    process = FleetProcess(
        app, UNREACHABLE, lambda: AgentRunner(InMemoryAgentTurnStore()), InMemoryAgentTurnStore
    )
    first = process.runner()
    clock = process.repairs()
    clock.ran()
    # Then the same process gets the same runner and the same repair clock
    assert process.runner() is first and process.repairs() is clock
    # When the process has forked (a prefork child): a runner and a clock of its own
    monkeypatch.setattr(process_module.os, "getpid", lambda: -1)
    assert process.runner() is not first
    assert process.repairs() is not clock and process.repairs().due()


def _receivers_of(*owners: object) -> list[object]:
    """The worker_init receivers bound to one of ``owners``, as the signal stores them."""
    found = []
    for _, receiver in signals.worker_init.receivers:
        target = receiver() if isinstance(receiver, weakref.ReferenceType) else receiver
        if any(getattr(target, "__self__", target) is owner for owner in owners):
            found.append(receiver)
    return found


def test_an_app_nobody_holds_takes_its_signal_handlers_with_it() -> None:
    # Apps of earlier tests are collected first: a signal keys receivers by id(), which a
    # new object may reuse while a dead one's entry is still listed
    gc.collect()
    app = create_app(UNREACHABLE)
    process = app.process
    held = _receivers_of(process, process.observability)
    # Then its two handlers (the start check, telemetry) are held by weak references only,
    # so the signal never keeps an app alive that nobody else holds
    assert len(held) == 2
    assert all(isinstance(r, weakref.ReferenceType) for r in held)


def test_the_http_package_does_not_build_the_celery_app() -> None:
    code = "import sys, agentworker.http; print('agentworker.fleet.app' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "False", done.stderr
