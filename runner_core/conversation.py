"""Conversation memory: the ``ChatMemory`` protocol, the window a turn sees, projection."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from runner_core.messages import Message, SystemMessage, UserMessage

if TYPE_CHECKING:
    from runner_core.snapshot import AgentTurnSnapshot

log = logging.getLogger("runner_core.memory")


class ChatMemory(Protocol):
    """A business conversation's model-visible messages, kept by the application.

    A memory may also offer ``has_message(message_id) -> bool``; the runner then asks it
    before projecting a restored turn's last messages again.
    """

    def get_model_messages(self, max_messages: int | None) -> list[Message]:
        """The most recent ``max_messages`` messages (all if None), oldest first."""
        ...

    def add_messages(self, messages: Sequence[Message]) -> None:
        """Append messages; a message whose id is already stored is skipped."""
        ...


class InMemoryChatMemory:
    """A list of messages with an id index, safe to share between threads."""

    def __init__(self, messages: Sequence[Message] = ()) -> None:
        self._lock = threading.Lock()
        self._messages: list[Message] = []
        self._ids: set[str] = set()
        self.add_messages(messages)

    def get_model_messages(self, max_messages: int | None) -> list[Message]:
        """The newest ``max_messages`` messages, oldest first."""
        with self._lock:
            if max_messages is None:
                return list(self._messages)
            return list(self._messages[-max_messages:]) if max_messages > 0 else []

    def has_message(self, message_id: str) -> bool:
        """Whether a message with this id is stored."""
        with self._lock:
            return message_id in self._ids

    def add_messages(self, messages: Sequence[Message]) -> None:
        """Append the messages not stored yet."""
        with self._lock:
            for message in messages:
                if message.id not in self._ids:
                    self._ids.add(message.id)
                    self._messages.append(message)

    @property
    def messages(self) -> list[Message]:
        """Every stored message (a copy)."""
        with self._lock:
            return list(self._messages)


def attach_window(messages: Sequence[Message], max_turns: int) -> list[Message]:
    """System messages dropped, then the last ``max_turns`` whole turns.

    Each turn opens with a user message, so the window never starts with an orphan
    assistant or tool message.
    """
    visible: list[Message] = [m for m in messages if not isinstance(m, SystemMessage)]
    starts = [i for i, m in enumerate(visible) if isinstance(m, UserMessage)]
    if not starts or max_turns <= 0:
        return []
    return visible[starts[max(0, len(starts) - max_turns)] :]


def project(st: AgentTurnSnapshot, memory: Callable[[], ChatMemory], *, restoring: bool) -> None:
    """Add a root turn's new messages to its conversation; a failure waits for later.

    After a commit, and on restore: ``projected_count`` is stored by the next commit, so a
    restored turn may lag by its last projection (a terminal turn has no next commit). A
    memory with ``has_message`` is asked then whether it holds the last message already.
    """
    start = st.history_count + st.projected_count
    new = st.messages[start:]
    if not new:
        return
    try:
        target = memory()
        has = getattr(target, "has_message", None)
        if not (restoring and has is not None and has(new[-1].id)):
            target.add_messages(new)
    except Exception:
        log.warning(
            "projecting turn %s into conversation %s failed; will retry",
            st.id,
            st.conversation_id,
            exc_info=True,
        )
        return
    st.projected_count += len(new)
