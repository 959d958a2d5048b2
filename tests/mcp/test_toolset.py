"""MCP toolsets in an agent: listing, calling, results, approvals, restarts, outages."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runner_core import (
    Agent,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnStatus,
    ApprovalDecision,
    RetryPolicy,
    SuspensionType,
    ToolCall,
)
from runner_core.mcp import MCPToolset, fingerprint
from tests.support.mcp_fixtures import (
    HttpServer,
    ServerFiles,
    http_toolset,
    kill_stdio_servers,
    stdio_toolset,
)
from tests.support.scripts import Script, agent, ask, call, tool_messages

RETRY = AgentTurnOptions(
    policy=AgentExecutionPolicy(retry=RetryPolicy(max_retries=3, initial_delay=0.01))
)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture()
def toolsets() -> Iterator[list[MCPToolset]]:
    """Toolsets a test made; their sessions (and stdio servers) are closed after it."""
    made: list[MCPToolset] = []
    yield made
    for toolset in made:
        toolset.close()


@pytest.fixture()
def make_toolset(
    transport: str,
    mcp_files: ServerFiles,
    request: pytest.FixtureRequest,
    toolsets: list[MCPToolset],
) -> Callable[..., MCPToolset]:
    def make(**options: Any) -> MCPToolset:
        if transport == "stdio":
            toolset = stdio_toolset(mcp_files, **options)
        else:
            server: HttpServer = request.getfixturevalue("mcp_http")
            toolset = http_toolset(server, **options)
        toolsets.append(toolset)
        return toolset

    return make


def test_a_turn_lists_calls_and_completes(
    make_runner: Callable[..., AgentRunner],
    make_toolset: Callable[..., MCPToolset],
    mcp_files: ServerFiles,
    transport: str,
) -> None:
    # Given an agent with the server's tools next to nothing else
    script = Script(ask(call("add", "c1", a=2, b=3)), "five")
    toolset = make_toolset()

    # When a turn runs
    turn = make_runner().run(agent(script, toolset), "add 2 and 3")

    # Then the model saw the server's tools, the call carried the key, and the turn completed
    assert turn.status is AgentTurnStatus.COMPLETED, turn.terminal_reason
    offered = {spec.name: spec for spec in script.requests[0].tools}
    assert {"add", "charge", "hold", "fail", "picture", "noop"} <= set(offered)
    assert offered["add"].parameters["required"] == ["a", "b"]
    assert offered["add"].description == "Add two numbers."
    [result] = tool_messages(turn.messages)
    assert (result.is_error, json.loads(result.content)) == (False, {"result": 5})
    [logged] = mcp_files.entries("call", "add")
    assert logged["key"] == f"{turn.id}:c1"
    assert logged["x_test"] == (None if transport == "stdio" else "1")  # headers= sent
    schema = offered["add"].parameters
    assert turn.state.tool_fingerprints == {"add": fingerprint("add", schema)}


def test_building_an_agent_contacts_no_server(make_runner: Callable[..., AgentRunner]) -> None:
    # Given a toolset on a port nobody listens on
    toolset = MCPToolset.http("http://127.0.0.1:9/mcp", name="nowhere", connect_timeout=2)

    # When an agent is built with it, nothing is contacted and nothing fails
    built = Agent("a", Script("hi").model, tools=[toolset])
    assert built.id == "a" and toolset.session.opened == 0

    # Then the first turn is a retry naming the server
    turn = make_runner().run(built, "hi", options=RETRY)
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.suspension is not None and "'nowhere'" in turn.suspension.message
    assert turn.state.error is not None
    assert turn.state.error.type == "MCPServerUnavailableError"


def test_prefix_and_allowed_shape_what_the_model_sees(
    make_runner: Callable[..., AgentRunner],
    make_toolset: Callable[..., MCPToolset],
    mcp_files: ServerFiles,
) -> None:
    script = Script(ask(call("srv_add", "c1", a=1, b=1)), "two")
    toolset = make_toolset(prefix="srv_", allowed=["add", "echo"])

    turn = make_runner().run(agent(script, toolset), "1+1")

    assert turn.status is AgentTurnStatus.COMPLETED
    assert [spec.name for spec in script.requests[0].tools] == ["srv_add"]
    assert [e["tool"] for e in mcp_files.entries("call")] == ["add"]


def test_results_map_to_tool_messages(
    make_runner: Callable[..., AgentRunner], make_toolset: Callable[..., MCPToolset]
) -> None:
    # Given calls answered with an error result, mixed content, and a refusal
    script = Script(
        ask(
            call("fail", "c1", message="no such order"),
            call("picture", "c2"),
            call("add", "c3", a="x", b=1),
        ),
        "done",
    )

    turn = make_runner().run(agent(script, make_toolset()), "go")

    # Then isError is an error message, images and links are described, bad input refused
    assert turn.status is AgentTurnStatus.COMPLETED
    by_id = {m.call_id: m for m in tool_messages(turn.messages)}
    error = json.loads(by_id["c1"].content)
    assert by_id["c1"].is_error and error["message"] == "no such order"
    assert by_id["c2"].content.splitlines() == [
        "a red dot",
        "[image: image/png, 8 bytes]",
        "[resource link: file:///dot.png dot.png]",
    ]
    refusal = json.loads(by_id["c3"].content)
    assert by_id["c3"].is_error and refusal["type"] == "invalid_arguments"


def test_an_approval_gated_tool_waits_in_the_inbox_with_its_arguments(
    make_runner: Callable[..., AgentRunner],
    make_toolset: Callable[..., MCPToolset],
    mcp_files: ServerFiles,
) -> None:
    # Given charge needs approval, add does not
    script = Script(ask(call("charge", "c1", amount=40)), "charged")
    toolset = make_toolset(requires_approval={"charge"})
    runner = make_runner()

    # When the model asks to charge
    turn = runner.run(agent(script, toolset), "charge 40")

    # Then the turn waits for approval with the call's arguments; nothing reached the server
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert turn.suspension is not None
    assert turn.suspension.type is SuspensionType.TOOL_APPROVAL
    assert turn.suspension.metadata["arguments"] == {"amount": 40}
    assert turn.suspension.metadata["tool"] == "charge"
    assert mcp_files.entries("call", "charge") == []

    # And once approved, the call runs once with the turn's key
    done = runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))
    assert done.status is AgentTurnStatus.COMPLETED
    assert [e["key"] for e in mcp_files.entries("call", "charge")] == [f"{turn.id}:c1"]
    assert json.loads(tool_messages(done.messages)[0].content) == {"result": "charged 40"}


def test_a_server_restarted_between_steps_gets_a_new_session(
    make_runner: Callable[..., AgentRunner],
    make_toolset: Callable[..., MCPToolset],
    transport: str,
    mcp_files: ServerFiles,
    request: pytest.FixtureRequest,
) -> None:
    # Given a turn that calls the server in two steps, the server restarting in between
    toolset = make_toolset()

    def restart() -> None:
        if transport == "stdio":
            kill_stdio_servers(mcp_files)
        else:
            request.getfixturevalue("mcp_http").restart()

    script = Script(
        ask(call("add", "c1", a=1, b=2)),
        lambda _: restart() or ask(call("add", "c2", a=3, b=4)),  # type: ignore[func-returns-value]
        "done",
    )

    # When it runs
    turn = make_runner().run(agent(script, toolset), "twice")

    # Then the second call reached the new server and the turn completed; over stdio (a
    # session bound to its process) through a re-opened session, over HTTP (where a
    # 2026-07-28 server keeps no session) through the same one
    assert turn.status is AgentTurnStatus.COMPLETED, turn.terminal_reason
    assert [m.content for m in tool_messages(turn.messages)] == ['{"result": 3}', '{"result": 7}']
    assert toolset.session.opened == (2 if transport == "stdio" else 1)
    assert len({e["pid"] for e in mcp_files.entries("call", "add")}) == 2


def test_a_server_that_is_down_is_retried_until_it_is_back(
    make_runner: Callable[..., AgentRunner], mcp_files: ServerFiles, toolsets: list[MCPToolset]
) -> None:
    # Given a server that is not up yet
    server = HttpServer(mcp_files)
    toolset = http_toolset(server, name="billing", connect_timeout=3)
    toolsets.append(toolset)
    script = Script(ask(call("add", "c1", a=1, b=2)), "three")
    runner = make_runner()

    # When a turn runs, it is scheduled for a retry naming the server
    turn = runner.run(agent(script, toolset), "1+2", options=RETRY)
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.suspension is not None and "MCP server 'billing'" in turn.suspension.message

    # Then, the server back, the retried turn completes
    server.start()
    try:
        done = runner.resume(turn.id, AgentResumeCommand.retry())
    finally:
        server.stop()
    assert done.status is AgentTurnStatus.COMPLETED, done.terminal_reason
    assert tool_messages(done.messages)[0].content == '{"result": 3}'


def test_a_schema_changed_mid_turn_is_refused_naming_the_tool(
    make_runner: Callable[..., AgentRunner],
    transport: str,
    mcp_files: ServerFiles,
    request: pytest.FixtureRequest,
    make_toolset: Callable[..., MCPToolset],
) -> None:
    # Given the model planned a call to add, which waits for approval (over HTTP, where a
    # restart breaks no session, the tools are listed again at each use: list_ttl=0)
    toolset = make_toolset(requires_approval=True, list_ttl=0 if transport == "http" else 60)
    script = Script(ask(call("add", "c1", a=1, b=2)), "three")
    runner = make_runner()
    turn = runner.run(agent(script, toolset), "1+2")
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert set(turn.state.tool_fingerprints) == {"add"}

    # When the server comes back with another schema for add
    mcp_files.schema.write_text("v2")
    if transport == "stdio":
        kill_stdio_servers(mcp_files)
    else:
        request.getfixturevalue("mcp_http").restart()
    done = runner.resume(turn.id, AgentResumeCommand.approve_tool("c1"))

    # Then the call is refused, the turn fails naming the tool, the server never saw it
    assert done.status is AgentTurnStatus.FAILED
    assert done.terminal_reason is not None
    assert done.terminal_reason.startswith("ToolSchemaChangedError: ")
    assert "tool 'add' of server 'test-tools' changed its schema" in done.terminal_reason
    assert mcp_files.entries("call", "add") == []
    assert [m.call_id for m in tool_messages(done.messages)] == ["c1"]  # the protocol closed

    # And a new turn is offered the new schema and runs on it
    script = Script(ask(call("add", "c1", a=1, b=2, c=3)), "six")
    after = runner.run(agent(script, toolset), "1+2+3")
    assert script.requests[0].tools[0].parameters["required"] == ["a", "b", "c"]
    assert after.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    after = runner.resume(after.id, AgentResumeCommand.approve_tool("c1"))
    assert after.status is AgentTurnStatus.COMPLETED, after.terminal_reason
    assert json.loads(tool_messages(after.messages)[0].content) == {"result": 6}


def test_an_approval_policy_and_a_single_name_pick_the_calls(
    make_runner: Callable[..., AgentRunner], mcp_files: ServerFiles, toolsets: list[MCPToolset]
) -> None:
    # Given a policy that denies charges over 10, and a toolset gating "add" by its name
    def policy(turn: object, call: ToolCall) -> ApprovalDecision:
        too_much = call.name == "charge" and call.arguments["amount"] > 10
        return ApprovalDecision.DENY if too_much else ApprovalDecision.ALLOW

    by_policy = stdio_toolset(mcp_files, requires_approval=policy)
    by_name = stdio_toolset(mcp_files, requires_approval="add", prefix="gated_")
    toolsets += [by_policy, by_name]
    script = Script(
        ask(
            call("charge", "c1", amount=50),
            call("charge", "c2", amount=5),
            call("gated_add", "c3", a=1, b=1),
        ),
        "done",
    )

    turn = make_runner().run(agent(script, by_policy, by_name), "go")

    # Then the big charge is denied, the small one runs, and only add waits for approval
    assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
    assert turn.suspension is not None and turn.suspension.correlation_id == "c3"
    by_id = {m.call_id: m for m in tool_messages(turn.messages)}
    assert json.loads(by_id["c1"].content)["type"] == "tool_denied"
    assert json.loads(by_id["c2"].content) == {"result": "charged 5"}


def test_a_server_gone_mid_turn_is_retried_until_it_is_back(
    make_runner: Callable[..., AgentRunner], mcp_http: HttpServer, toolsets: list[MCPToolset]
) -> None:
    # Given a turn whose second step finds the HTTP server gone (its session was open)
    toolset = http_toolset(mcp_http, connect_timeout=3)
    toolsets.append(toolset)
    script = Script(
        ask(call("add", "c1", a=1, b=2)),
        lambda _: mcp_http.stop() or ask(call("add", "c2", a=3, b=4)),  # type: ignore[func-returns-value]
        "done",
    )
    runner = make_runner()

    # When it runs, the second call is scheduled for a retry naming the server
    turn = runner.run(agent(script, toolset), "twice", options=RETRY)
    assert turn.status is AgentTurnStatus.RETRY_SCHEDULED
    assert turn.suspension is not None and "MCP server 'test-tools'" in turn.suspension.message

    # Then, the server back, the retry completes the turn
    mcp_http.start()
    done = runner.resume(turn.id, AgentResumeCommand.retry())
    assert done.status is AgentTurnStatus.COMPLETED, done.terminal_reason
    assert [m.content for m in tool_messages(done.messages)] == ['{"result": 3}', '{"result": 7}']
