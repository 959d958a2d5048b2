"""What every producer call checks before it stores anything: types, JSON, sizes.

The sync methods of AgentRunner and their async twins call the same checks, so both refuse
the same input with the same typed error (``InvalidArgumentError``,
``InvalidArgumentTypeError``, ``PayloadTooLargeError``), and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner_core.errors import InvalidArgumentError, InvalidArgumentTypeError, PayloadTooLargeError
from runner_core.messages import AiMessage, SystemMessage, ToolMessage, UserMessage
from runner_core.policy import (
    AgentLimits,
    AgentTurnOptions,
    as_user_message,
    check_size,
    json_size,
    text_size,
    validate_metadata,
)
from runner_core.resume import AgentResumeCommand
from runner_core.store.arguments import MAX_ID_CHARS

_MESSAGES = (SystemMessage, UserMessage, AiMessage, ToolMessage)


@dataclass(frozen=True, slots=True)
class NewTurn:
    """The checked arguments of a new turn."""

    user: UserMessage
    options: AgentTurnOptions
    metadata: dict[str, Any]


def new_turn(
    limits: AgentLimits,
    input: Any,
    history: Any,
    conversation_id: Any,
    options: Any,
    turn_id: Any,
) -> NewTurn:
    """Check what ``start``/``run`` got; the first bad argument raises, naming itself."""
    if history is not None and conversation_id is not None:
        raise InvalidArgumentError("pass history= or conversation_id=, not both", field="history")
    _optional_id(conversation_id, "conversation_id")
    _optional_id(turn_id, "turn_id")
    _history(limits, history)
    if options is None:
        options = AgentTurnOptions()
    elif not isinstance(options, AgentTurnOptions):
        raise _wrong_type("options", "an AgentTurnOptions", options)
    metadata = validate_metadata(options.metadata)
    check_size("metadata", json_size(metadata), limits.max_metadata_bytes, "metadata")
    user = as_user_message(input, limits.max_input_bytes)
    return NewTurn(user, options, metadata)


def turn_id_of(turn_id: Any) -> str:
    """``turn_id`` if it is a string, else ``InvalidArgumentTypeError``."""
    if not isinstance(turn_id, str):
        raise _wrong_type("turn_id", "a string", turn_id)
    return turn_id


def resume(limits: AgentLimits, turn_id: Any, command: Any) -> None:
    """Check what ``resume``/``submit_resume`` got: types, then sizes."""
    turn_id_of(turn_id)
    if not isinstance(command, AgentResumeCommand):
        raise _wrong_type("command", "an AgentResumeCommand", command)
    check_size("metadata", json_size(command.metadata), limits.max_metadata_bytes, "metadata")
    if command.data is not None:
        size = (
            text_size(command.data, limits.max_resume_data_bytes)
            if isinstance(command.data, str)
            else json_size(command.data)
        )
        check_size("data", size, limits.max_resume_data_bytes, "data")
    reasons = [command.reason, *command.reasons.values()]
    for reason in reasons:
        _reason(limits, reason)


def cancel(limits: AgentLimits, turn_id: Any, reason: Any) -> None:
    """Check what ``cancel`` got."""
    turn_id_of(turn_id)
    _optional_str(reason, "reason")
    if reason is not None:
        _reason(limits, reason)


def _reason(limits: AgentLimits, reason: str) -> None:
    limit = limits.max_metadata_bytes
    check_size("reason", text_size(reason, limit), limit, "reason")


def _history(limits: AgentLimits, history: Any) -> None:
    if history is None:
        return
    if isinstance(history, str | bytes) or not isinstance(history, Sequence):
        raise _wrong_type("history", "a list of messages", history)
    count, most = len(history), limits.max_history_messages
    if count > most:
        raise PayloadTooLargeError("history", count, most, "history", unit="messages")
    for i, message in enumerate(history):
        if not isinstance(message, _MESSAGES):
            raise InvalidArgumentTypeError(
                f"history[{i}] must be a message, not {type(message).__name__}", field="history"
            )
    limit = limits.max_history_bytes
    check_size("history", _history_bytes(history, limit), limit, "history")


def _history_bytes(history: Sequence[Any], limit: int) -> int:
    """The bytes of ``history`` as stored, counted only until they pass ``limit``."""
    total = 0
    for message in history:
        text = message.text if isinstance(message, AiMessage | SystemMessage) else message.content
        if isinstance(text, str) and len(text) > limit - total:
            return total + len(text)  # over already: spare encoding a huge text
        total += len(message.model_dump_json().encode())
        if total > limit:
            return total
    return total


def _optional_str(value: Any, field: str) -> None:
    if value is not None and not isinstance(value, str):
        raise _wrong_type(field, "a string", value)


def _optional_id(value: Any, field: str) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise _wrong_type(field, "a string", value)
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgumentError(
            f"{field} is {len(value)} characters long; the limit is {MAX_ID_CHARS}", field=field
        )


def _wrong_type(field: str, wanted: str, value: Any) -> InvalidArgumentTypeError:
    return InvalidArgumentTypeError(
        f"{field} must be {wanted}, not {type(value).__name__}", field=field
    )
