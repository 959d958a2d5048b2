"""The turn console in a real browser: Debian's chromium, headless, driven by Playwright.

The app runs under uvicorn in this process over a runner that steps turns inline (no
workers), with the event bridge streaming to a private redis-server, so the SSE timeline is
the real one. A failing test leaves a screenshot in ``test-artifacts/``.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agentworker.http import create_http_app
from agentworker.notify.streams import RedisEventBridge
from agentworker.settings import Settings
from runner_core import (
    Agent,
    AgentRunner,
    AgentToolContext,
    AiMessage,
    FunctionModel,
    InMemoryAgentLoader,
    ModelRequest,
    ToolCall,
    ToolMessage,
    tool,
)
from tests.support.agents import approval_agent
from tests.support.approvals import listing_both, refunds_agent
from tests.support.servers import RedisServer, free_port

CHROMIUM = os.environ.get("AGENTWORKER_CHROMIUM") or shutil.which("chromium")
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install -y chromium)"),
]

CREDENTIALS = [
    {"token": "acme-approver", "tenant": "acme", "scopes": ["read", "write", "approve"]},
    {"token": "acme-viewer", "tenant": "acme", "scopes": ["read"]},
]
SCHEMA = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "title": "Street"},
        "express": {"type": "boolean", "title": "Express"},
    },
    "required": ["street"],
}
LEDGER: list[str] = []


@tool
def ship(order_id: str) -> str:
    """Ship an order (asks where to)."""
    address = AgentToolContext.current().request_user_input("Where to?", schema=SCHEMA)
    return f"{order_id} ships to {address['street']} express={address['express']}"


def _ship_then_answer(request: ModelRequest) -> AiMessage:
    results = [m for m in request.messages if isinstance(m, ToolMessage)]
    if not results:
        return AiMessage(tool_calls=[ToolCall(id="s1", name="ship", arguments={"order_id": "42"})])
    return AiMessage("done: " + results[0].content)


@pytest.fixture
def namespace() -> str:
    return "console-" + uuid.uuid4().hex[:8]


@pytest.fixture
def runner(server: RedisServer, namespace: str) -> AgentRunner:
    LEDGER.clear()
    agents = [
        approval_agent(),
        Agent("ship-agent", FunctionModel(_ship_then_answer), tools=[ship]),
        refunds_agent(LEDGER),
    ]
    runner = AgentRunner(agent_loader=InMemoryAgentLoader(agents))
    runner.add_event_listener(RedisEventBridge(server.client(), namespace, committed=True))
    return runner


@pytest.fixture
def base_url(server: RedisServer, namespace: str, runner: AgentRunner) -> Iterator[str]:
    settings = Settings(
        redis_url=server.url, namespace=namespace, credentials=json.dumps(CREDENTIALS)
    )

    def run_later(turn_id: str) -> None:
        # A worker's delay: the page sees the turn change after the click, live.
        threading.Timer(0.3, lambda: runner.run_until_blocked(runner.restore(turn_id))).start()

    runner.dispatcher = run_later
    port = free_port()
    config = uvicorn.Config(
        create_http_app(runner, settings), host="127.0.0.1", port=port, log_level="warning"
    )
    app_server = uvicorn.Server(config)
    thread = threading.Thread(target=app_server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while not app_server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield url
    app_server.should_exit = True
    thread.join(10)


@pytest.fixture
def page(request: pytest.FixtureRequest) -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page()
        try:
            yield page
        finally:
            failed = getattr(request.node, "failed", False)
            if failed:
                ARTIFACTS.mkdir(exist_ok=True)
                shot = ARTIFACTS / f"{request.node.name}.png"
                page.screenshot(path=str(shot), full_page=True)
                print(f"screenshot: {shot}")
            browser.close()


def start_turn(base_url: str, agent: str, text: str) -> str:
    answer = httpx.post(
        f"{base_url}/turns",
        json={"agent": agent, "input": text},
        headers={"Authorization": "Bearer acme-approver"},
    )
    assert answer.status_code == 201, answer.text
    turn_id = str(answer.json()["id"])
    waited = httpx.get(
        f"{base_url}/turns/{turn_id}/wait?timeout=10",
        headers={"Authorization": "Bearer acme-approver"},
        timeout=15,
    )
    assert waited.json()["status"].startswith("WAITING_FOR"), waited.text
    return turn_id


def sign_in(page: Any, base_url: str, token: str) -> None:
    page.goto(f"{base_url}/console")
    assert page.url.endswith("/console/login")
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url(f"{base_url}/console")


def test_an_unauthenticated_visitor_sees_nothing(page: Any, base_url: str) -> None:
    turn_id = start_turn(base_url, "pay-agent", "pay 5")
    for path in ("/console", f"/console/turns/{turn_id}", "/console/fragments/inbox"):
        page.goto(base_url + path)
        assert page.url.endswith("/console/login"), path
        assert turn_id not in page.content()
        assert "amount" not in page.content()
    page.fill("#token", "not-a-token")
    page.click("#sign-in")
    assert "invalid bearer token" in page.content()
    assert turn_id not in page.content()


def test_a_waiting_approval_is_in_the_inbox_and_approving_it_completes_the_turn_live(
    page: Any, base_url: str
) -> None:
    # Given a turn waiting for approval of pay(amount=5)
    turn_id = start_turn(base_url, "pay-agent", "pay 5")
    sign_in(page, base_url, "acme-approver")

    # Then the inbox shows it with the tool and its arguments
    card = page.locator(f'#inbox .actions[data-turn="{turn_id}"]').locator("xpath=..")
    card.wait_for()
    assert card.locator("code.tool").inner_text() == "pay"
    assert json.loads(card.locator("pre.arguments").inner_text()) == {"amount": 5}

    # When the operator opens the turn, the timeline already shows the committed events
    page.click(f'#inbox a[href="/console/turns/{turn_id}"]')
    page.wait_for_url(f"{base_url}/console/turns/{turn_id}")
    timeline = page.locator("#timeline")
    timeline.locator('li[data-type="TOOL_APPROVAL_REQUESTED"]').wait_for()
    assert "committed" in (
        timeline.locator('li[data-type="TOOL_APPROVAL_REQUESTED"]').get_attribute("class") or ""
    )
    before = timeline.locator("li").count()

    # And approves it with a reason
    page.fill("#turn-body .reason", "looks right")
    page.click("#turn-body button.approve")

    # Then the timeline grows live up to the turn's end, and the status says so
    timeline.locator('li[data-type="TURN_COMPLETED"]').wait_for(timeout=15_000)
    assert timeline.locator("li").count() > before
    page.locator('#turn-body .status[data-status="COMPLETED"]').first.wait_for(timeout=10_000)
    assert "done: paid 5.0" in page.locator("#turn-body pre.output").inner_text()

    # And the inbox is empty again
    page.goto(f"{base_url}/console")
    assert page.locator(f'#inbox [data-turn="{turn_id}"]').count() == 0


def test_a_user_input_form_is_rendered_from_the_tools_schema(page: Any, base_url: str) -> None:
    turn_id = start_turn(base_url, "ship-agent", "ship 42")
    sign_in(page, base_url, "acme-approver")
    page.goto(f"{base_url}/console/turns/{turn_id}")
    form = page.locator("#turn-body form.user-input")
    form.locator('input[name="street"]').fill("Main 1")
    form.locator('input[name="express"]').check()
    form.locator("button.submit").click()
    page.locator('#turn-body .status[data-status="COMPLETED"]').first.wait_for(timeout=15_000)
    output = page.locator("#turn-body pre.output").inner_text()
    assert output == "done: 42 ships to Main 1 express=True"


def test_a_read_only_credential_sees_the_inbox_but_cannot_answer(page: Any, base_url: str) -> None:
    turn_id = start_turn(base_url, "pay-agent", "pay 5")
    sign_in(page, base_url, "acme-viewer")
    page.locator(f'#inbox a[href="/console/turns/{turn_id}"]').wait_for()
    assert page.locator("#inbox button.approve").count() == 0
    assert "may look, not answer" in page.content()


def test_rejecting_from_the_inbox_with_a_reason_tells_the_model(page: Any, base_url: str) -> None:
    turn_id = start_turn(base_url, "pay-agent", "pay 5")
    sign_in(page, base_url, "acme-approver")
    actions = page.locator(f'#inbox .actions[data-turn="{turn_id}"]')
    actions.locator(".reason").fill("over the limit")
    actions.locator("button.reject").click()
    answer = httpx.get(
        f"{base_url}/turns/{turn_id}/wait?until=ended&timeout=10",
        headers={"Authorization": "Bearer acme-approver"},
        timeout=15,
    ).json()
    assert answer["status"] == "COMPLETED"
    assert "over the limit" in answer["final_output"]
    page.locator(f'#inbox [data-turn="{turn_id}"]').wait_for(state="detached", timeout=10_000)


def waiting_on_two(base_url: str, runner: AgentRunner) -> str:
    turn_id = start_turn(base_url, "refunds", "refund both")
    listing_both(runner.restore(turn_id))
    return turn_id


def wait_ended(base_url: str, turn_id: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{base_url}/turns/{turn_id}/wait?until=ended&timeout=10",
        headers={"Authorization": "Bearer acme-approver"},
        timeout=15,
    )
    return dict(answer.json())


def test_each_waiting_call_is_answered_on_its_own_from_the_inbox(
    page: Any, base_url: str, runner: AgentRunner
) -> None:
    # Given a turn waiting on two refunds, in one suspension
    turn_id = waiting_on_two(base_url, runner)
    sign_in(page, base_url, "acme-approver")

    # Then its inbox card shows both calls, each with its arguments, and "approve all"
    card = page.locator(f'#inbox .batch[data-turn="{turn_id}"]').locator("xpath=..")
    card.wait_for()
    calls = card.locator(".call")
    assert calls.count() == 2
    assert [json.loads(calls.nth(i).locator("pre.arguments").inner_text()) for i in (0, 1)] == [
        {"order_id": "1001", "amount": 20.0},
        {"order_id": "1002", "amount": 35.0},
    ]
    assert card.locator("code.tool").all_inner_texts() == ["refund", "refund"]

    # When r1 is approved alone, the turn stays in the inbox with r2 left
    card.locator('.call[data-call="r1"] button.approve').click()
    answered = page.locator(f'#inbox .actions[data-turn="{turn_id}"][data-call="r1"]')
    answered.wait_for(state="detached", timeout=10_000)
    left = page.locator(f'#inbox .actions[data-turn="{turn_id}"]')
    assert left.get_attribute("data-call") == "r2"
    assert left.count() == 1
    assert page.locator(f'#inbox .batch[data-turn="{turn_id}"]').count() == 0
    assert "1 of 2 calls still wait for approval" in page.locator("#inbox").inner_text()
    assert runner.store.load(turn_id).status.value == "WAITING_FOR_APPROVAL"

    # When r2 is rejected with a reason, the turn runs to its end and leaves the inbox
    left.locator(".reason").fill("too large")
    left.locator("button.reject").click()
    assert wait_ended(base_url, turn_id)["status"] == "COMPLETED"
    assert LEDGER == ["1001"]
    page.locator(f'#inbox [data-turn="{turn_id}"]').first.wait_for(state="detached", timeout=10_000)


def test_approve_all_on_the_turn_page(page: Any, base_url: str, runner: AgentRunner) -> None:
    turn_id = waiting_on_two(base_url, runner)
    sign_in(page, base_url, "acme-approver")
    page.goto(f"{base_url}/console/turns/{turn_id}")

    page.click("#turn-body .batch button.approve-all")

    page.locator('#turn-body .status[data-status="COMPLETED"]').first.wait_for(timeout=15_000)
    assert sorted(LEDGER) == ["1001", "1002"]
    [entry] = runner.store.load(turn_id).resume_log
    assert (entry["kind"], entry["call_ids"]) == ("APPROVE_TOOLS", ["r1", "r2"])
    assert entry["metadata"]["via"] == "console"


def test_a_read_only_credential_sees_every_call_but_no_button(
    page: Any, base_url: str, runner: AgentRunner
) -> None:
    turn_id = waiting_on_two(base_url, runner)
    sign_in(page, base_url, "acme-viewer")
    page.locator(f'#inbox a[href="/console/turns/{turn_id}"]').wait_for()
    assert page.locator("#inbox .call").count() == 2
    assert page.locator("#inbox button").count() == 0
