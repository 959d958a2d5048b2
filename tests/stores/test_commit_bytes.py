"""A step's commit sends Redis what the step adds: under 2,000 bytes, flat with history.

Counted on the wire (every command and pipeline a step sends, once the server holds the
scripts) for a turn of tool calls with 10 and with 400 messages of attached history; the
history is stored once, by the creation, and no step sends it again.
"""

from __future__ import annotations

from typing import Any

import redis

from runner_core import Agent, AgentRunner, AiMessage, FunctionModel, ToolCall, UserMessage
from runner_core.messages import Message
from runner_core.models.base import ModelRequest
from runner_core.tools import tool
from stores.redis import RedisAgentTurnStore
from tests.support.servers import RedisServer

CALLS = 5


class _Counted(redis.Connection):
    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        items = [command] if isinstance(command, bytes | str) else command
        _Counted.sent += sum(len(item) for item in items)
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _model(request: ModelRequest) -> AiMessage:
    done = 0
    for message in reversed(request.messages):
        if message.role == "user":
            break
        done += message.role == "tool"
    if done < CALLS:
        return AiMessage(tool_calls=[ToolCall(id=f"c{done}", name="add", arguments={"a": 1})])
    return AiMessage("done")


def _history(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n // 2):
        out += [UserMessage(f"question {i} " + "x" * 200), AiMessage(f"answer {i} " + "y" * 200)]
    return out


def _bytes_per_step(server: RedisServer, history: int) -> float:
    pool = redis.ConnectionPool(host="127.0.0.1", port=server.port, connection_class=_Counted)
    store = RedisAgentTurnStore(redis.Redis(connection_pool=pool), namespace=f"b{history}")
    runner = AgentRunner(turn_store=store)
    agent = Agent("bytes", FunctionModel(_model), instructions="add", tools=[add])
    runner.run(agent, "warm up")  # the server loads the scripts once
    turn = runner.start(agent, "go", history=_history(history))
    before = _Counted.sent
    runner.run_until_blocked(turn)
    assert turn.final_output == "done"
    return (_Counted.sent - before) / turn.step_count


def test_a_step_sends_under_2000_bytes_whatever_the_history(redis_server: RedisServer) -> None:
    small, large = _bytes_per_step(redis_server, 10), _bytes_per_step(redis_server, 400)

    assert small < 2000
    assert large < small * 1.05
