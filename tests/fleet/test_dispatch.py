"""The dispatcher's wake-up is the message ``send_task`` would send, on a real Redis broker."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import kombu
import pytest
import redis
from kombu.exceptions import OperationalError

from agentworker.fleet.dispatch import CeleryDispatcher
from agentworker.settings import Settings
from agentworker.wiring import create_app
from tests.support.servers import RedisServer, free_port

pytestmark = [
    pytest.mark.redis,
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    server = RedisServer(tmp_path_factory.mktemp("redis-dispatch"), appendonly=False).start()
    yield redis.Redis(port=server.port, db=1)
    server.stop()


@pytest.fixture()
def dispatcher(broker: redis.Redis) -> Iterator[CeleryDispatcher]:
    broker.flushdb()
    port = broker.connection_pool.connection_kwargs["port"]
    app = create_app(Settings(broker_url=f"redis://127.0.0.1:{port}/1"))
    yield CeleryDispatcher(app, "agentworker.steps")
    app.close()


def messages(broker: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(broker.lrange(queue, 0, -1))]


def test_a_wake_up_is_a_step_turn_message_with_the_turn_id_only(
    dispatcher: CeleryDispatcher, broker: redis.Redis
) -> None:
    dispatcher("turn-1")
    dispatcher.app.send_task(
        "agentworker.step_turn", args=["turn-2"], queue="agentworker.steps", argsrepr="x"
    )
    ours, celerys = messages(broker, "agentworker.steps")
    assert ours["headers"]["task"] == "agentworker.step_turn"
    assert ours["headers"]["argsrepr"] == "(turn_id='turn-1')"
    body = json.loads(base64.b64decode(ours["body"]))
    assert body[0] == ["turn-1"] and body[1] == {}
    # The same envelope as send_task's: every header and property a worker reads
    assert set(ours["headers"]) == set(celerys["headers"])
    assert ours["properties"]["delivery_info"] == celerys["properties"]["delivery_info"]
    assert ours["content-type"] == "application/json"
    assert ours["headers"]["id"] != celerys["headers"]["id"]


def test_a_runner_shows_the_agent_of_a_wake_up_and_still_sends_the_turn_id_only(
    dispatcher: CeleryDispatcher, broker: redis.Redis
) -> None:
    # Given a runner on this dispatcher
    from runner_core import Agent, AgentRunner, FunctionModel, InMemoryAgentLoader

    agent = Agent("orders", FunctionModel(lambda request: "done"))
    runner = AgentRunner(agent_loader=InMemoryAgentLoader([agent]), dispatcher=dispatcher)
    # When it starts a turn (the agent is known) and a repair wakes one (it is not)
    turn = runner.start("orders", "hi")
    runner.wake([turn.id])
    # Then Flower's arguments name the agent where known; the message is the same
    started, woken = messages(broker, "agentworker.steps")
    assert started["headers"]["argsrepr"] == f"(turn_id={turn.id!r}, agent='orders')"
    assert woken["headers"]["argsrepr"] == f"(turn_id={turn.id!r})"
    for message in (started, woken):
        assert json.loads(base64.b64decode(message["body"]))[0] == [turn.id]


def test_an_unreachable_broker_raises_after_the_publish_retry_policy() -> None:
    app = create_app(Settings(broker_url=f"redis://127.0.0.1:{free_port()}/1"))
    started = time.monotonic()
    with pytest.raises(OperationalError):
        CeleryDispatcher(app, "agentworker.steps")("turn-4")
    ours = time.monotonic() - started
    started = time.monotonic()
    with pytest.raises(OperationalError):
        app.send_task("agentworker.step_turn", args=["turn-4"], queue="agentworker.steps")
    celerys = time.monotonic() - started
    # no slower to fail than Celery's own send_task on the installed versions ...
    assert ours < celerys + 0.5, (ours, celerys)
    # ... which with current kombu and redis-py is task_publish_retry_policy: 2 quick
    # retries (at the floors, kombu 5.4 with redis-py 5.3, both take about 6 s)
    if tuple(int(x) for x in kombu.__version__.split(".")[:2]) >= (5, 5):
        assert ours < 2.0


def test_wake_ups_reuse_the_channel_client_and_survive_a_broker_restart(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a dispatcher on its own broker
    server = RedisServer(tmp_path / "broker", appendonly=False).start()
    queue = redis.Redis(port=server.port, db=1)
    app = create_app(Settings(broker_url=f"redis://127.0.0.1:{server.port}/1"))
    dispatcher = CeleryDispatcher(app, "agentworker.steps")
    dispatcher("first")
    built = []
    init = redis.Redis.__init__

    def counting(self: redis.Redis, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        init(self, *args, **kwargs)

    # When it sends 50 more wake-ups, counting the redis clients built meanwhile
    monkeypatch.setattr(redis.Redis, "__init__", counting)
    for n in range(50):
        dispatcher(f"turn-{n}")
    monkeypatch.undo()
    # Then all are queued, and no client was built for them (kombu builds one per message)
    assert queue.llen("agentworker.steps") == 51
    assert built == []
    # And after the broker restarts, the next wake-ups reach it too
    server.stop()
    server.start()
    for n in range(3):
        dispatcher(f"again-{n}")
    assert queue.llen("agentworker.steps") == 3  # the restarted broker kept nothing
    app.close()
    server.stop()
