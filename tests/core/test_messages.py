"""Messages: construction, stable ids, exact JSON, multimodal content."""

from __future__ import annotations

import pytest

from runner_core import (
    AgentRunner,
    AgentTurnStatus,
    AiMessage,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from runner_core.messages import MESSAGE, MESSAGE_LIST
from tests.support.scripts import Script, agent


def test_each_message_gets_its_own_id() -> None:
    a, b = UserMessage("x"), UserMessage("x")

    assert a.id != b.id and len(a.id) == 32
    assert UserMessage("x", id="fixed").id == "fixed"


@pytest.mark.parametrize(
    "message",
    [
        SystemMessage("be nice"),
        UserMessage("hi"),
        UserMessage([TextPart(text="what is this?"), ImagePart(url="data:image/png;base64,AA")]),
        AiMessage("answer", reasoning="because"),
        AiMessage(tool_calls=[ToolCall(id="c1", name="t", arguments={"a": [1, {"b": None}]})]),
        ToolMessage(call_id="c1", name="t", content='{"ok": true}', is_error=True),
    ],
    ids=["system", "user", "multimodal", "ai", "ai-tools", "tool"],
)
def test_json_round_trip_is_exact(message: object) -> None:
    dumped = MESSAGE.dump_json(message)  # type: ignore[arg-type]

    loaded = MESSAGE.validate_json(dumped)

    assert loaded == message
    assert type(loaded) is type(message)
    assert loaded.id == message.id  # type: ignore[attr-defined]


def test_message_list_round_trip_keeps_order_and_ids() -> None:
    history = [UserMessage("a"), AiMessage("b"), UserMessage("c")]

    loaded = MESSAGE_LIST.validate_json(MESSAGE_LIST.dump_json(history))

    assert loaded == history


def test_user_text_joins_text_parts() -> None:
    message = UserMessage(
        [TextPart(text="one"), ImagePart(url="https://x.test/i.png"), TextPart(text="two")]
    )

    assert message.text == "one\ntwo"
    assert UserMessage("plain").text == "plain"


def test_unknown_fields_and_part_types_are_refused() -> None:
    with pytest.raises(ValueError):
        UserMessage("x", mood="happy")  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        UserMessage([{"type": "audio", "url": "x"}])


def test_multimodal_input_reaches_the_model_unchanged(runner: AgentRunner) -> None:
    image = ImagePart(url="data:image/png;base64,AAAA", detail="high", media_type="image/png")
    question = UserMessage([TextPart(text="what is it?"), image])
    script = Script("a cat")

    turn = runner.run(agent(script), question)

    assert turn.status is AgentTurnStatus.COMPLETED
    sent = script.requests[0].messages[-1]
    assert isinstance(sent, UserMessage)
    assert sent.content == (TextPart(text="what is it?"), image)
    restored = runner.restore(turn.id).messages[0]
    assert restored == turn.messages[0]
