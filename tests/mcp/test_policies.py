"""Our policies on MCP tools: concurrency, timeouts, budgets, events, traces, forks."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
from collections.abc import Callable, Iterator

import pytest

from runner_core import (
    AgentBudget,
    AgentEventType,
    AgentExecutionPolicy,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    InMemoryAgentLoader,
    InMemoryAgentTurnStore,
)
from runner_core.mcp import MCPToolset
from tests.support.mcp_fixtures import ServerFiles, stdio_toolset
from tests.support.observed import collecting_spans
from tests.support.scripts import EventLog, Script, agent, ask, call, content, tool_messages


@pytest.fixture()
def toolset(mcp_files: ServerFiles) -> Iterator[MCPToolset]:
    made = stdio_toolset(mcp_files, timeout=1.0)
    yield made
    mcp_files.release.touch()
    made.close()


def options(**policy: object) -> AgentTurnOptions:
    return AgentTurnOptions(policy=AgentExecutionPolicy(**policy))  # type: ignore[arg-type]


def test_concurrent_calls_share_one_session(
    make_runner: Callable[..., AgentRunner], toolset: MCPToolset, mcp_files: ServerFiles
) -> None:
    calls = [call("add", f"c{i}", a=i, b=i) for i in range(4)]
    script = Script(ask(*calls), "done")

    turn = make_runner().run(agent(script, toolset), "go", options=options(max_tool_concurrency=4))

    assert turn.status is AgentTurnStatus.COMPLETED, turn.terminal_reason
    by_id = {m.call_id: json.loads(m.content)["result"] for m in tool_messages(turn.messages)}
    assert by_id == {"c0": 0, "c1": 2, "c2": 4, "c3": 6}  # answered as they arrived
    assert toolset.session.opened == 1
    assert len({e["pid"] for e in mcp_files.entries("call", "add")}) == 1


def test_a_call_past_its_timeout_is_answered_as_timed_out(
    make_runner: Callable[..., AgentRunner], toolset: MCPToolset
) -> None:
    # Given hold never answers (no release file) and the toolset's timeout is 1 s
    script = Script(ask(call("hold", "c1", tag="x")), ask(call("add", "c2", a=1, b=1)), "ok")

    turn = make_runner().run(agent(script, toolset), "go")

    # Then the model is told it timed out, and the session still serves the next call
    assert turn.status is AgentTurnStatus.COMPLETED
    timed_out, added = tool_messages(turn.messages)
    assert timed_out.is_error and content(timed_out)["type"] == "tool_timeout"
    assert json.loads(added.content) == {"result": 2}
    assert toolset.session.opened == 1


def test_budgets_count_mcp_calls(
    make_runner: Callable[..., AgentRunner], toolset: MCPToolset
) -> None:
    script = Script(ask(call("add", "c1", a=1, b=1)), ask(call("add", "c2", a=2, b=2)), "ok")

    turn = make_runner().run(
        agent(script, toolset), "go", options=options(budget=AgentBudget(max_tool_calls=1))
    )

    assert turn.status is AgentTurnStatus.BUDGET_EXCEEDED
    assert len(tool_messages(turn.messages)) == 2  # the second call is closed, not run


def test_events_name_the_tool_and_spans_the_server(
    store: InMemoryAgentTurnStore, toolset: MCPToolset
) -> None:
    events = EventLog()
    runner = AgentRunner(turn_store=store, agent_loader=InMemoryAgentLoader())
    runner.add_event_listener(events)
    script = Script(ask(call("add", "c1", a=1, b=1)), "ok")

    with collecting_spans() as exporter:
        turn = runner.run(agent(script, toolset), "go")

    assert turn.status is AgentTurnStatus.COMPLETED
    started = events.of(AgentEventType.TOOL_STARTED)
    assert [(e.data["tool"], e.data["arguments"]) for e in started] == [("add", {"a": 1, "b": 1})]
    assert [e.data["tool"] for e in events.of(AgentEventType.TOOL_COMPLETED)] == ["add"]
    [span] = [s for s in exporter.get_finished_spans() if s.name == "execute_tool add"]
    assert span.attributes is not None
    assert span.attributes["agentworker.mcp.server"] == "test-tools"
    assert span.attributes["gen_ai.tool.call.id"] == "c1"


def test_a_forked_child_opens_its_own_session(
    store: InMemoryAgentTurnStore, toolset: MCPToolset, mcp_files: ServerFiles
) -> None:
    # Given the parent has an open session (and a stdio server of its own)
    assert [t.name for t in toolset.agent_tools()][:1] == ["add"]
    [parent_server] = {e["pid"] for e in mcp_files.entries("start")}

    # When a forked child runs a turn on the same toolset
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        try:
            runner = AgentRunner(turn_store=InMemoryAgentTurnStore())
            done = runner.run(agent(Script(ask(call("add", "c1", a=2, b=2)), "ok"), toolset), "go")
            report = (done.status.value, toolset.session.opened, os.getpid())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            report = ("error", repr(exc), os.getpid())
        os.write(write, pickle.dumps(report))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        status, opened, _child = pickle.loads(f.read())
    os.waitpid(pid, 0)

    # Then the child opened a session (and server) of its own; the parent's is untouched
    assert (status, opened) == ("COMPLETED", 1)
    [caller] = {e["pid"] for e in mcp_files.entries("call", "add")}
    assert caller != parent_server
    assert toolset.session.opened == 1


def test_an_async_producer_runs_mcp_turns(
    make_runner: Callable[..., AgentRunner], toolset: MCPToolset
) -> None:
    # Given the caller's own event loop (not the process loop the session lives on)
    script = Script(ask(call("add", "c1", a=1, b=2)), "three")

    turn = asyncio.run(make_runner().arun(agent(script, toolset), "1+2"))

    assert turn.status is AgentTurnStatus.COMPLETED, turn.terminal_reason
    assert json.loads(tool_messages(turn.messages)[0].content) == {"result": 3}
