"""The one error hierarchy of agentworker."""

from __future__ import annotations

from typing import Any

#: How many characters of an id or a value an error message shows.
SHOWN_CHARS = 80


def shorten(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr`` of ``value``, its text cut to ``limit`` characters and the length said.

    Every error that echoes a caller's id or value shows it through this, so a message
    stays readable (and small) whatever was passed in: ``'abc…' (1048576 chars)``.
    """
    if not isinstance(value, str):
        value = repr(value)
        return value if len(value) <= limit else f"{value[:limit]}… ({len(value)} chars)"
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} chars)"


class AgentWorkerError(Exception):
    """Base class of every error agentworker raises on purpose.

    Pickles as itself (message and ids kept), so Celery reports the real class.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(
    cls: type[AgentWorkerError], args: tuple[Any, ...], state: dict[str, Any]
) -> AgentWorkerError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class TurnNotFoundError(AgentWorkerError, LookupError):
    """Raised when a turn id is unknown to the store."""

    def __init__(self, turn_id: str) -> None:
        super().__init__(f"turn {shorten(turn_id)} not found")
        self.turn_id = turn_id


class AgentNotFoundError(AgentWorkerError, LookupError):
    """Raised when an agent id (or id and version) is unknown to the loader."""

    def __init__(self, agent_id: str, version: str | None = None) -> None:
        what = f"agent {shorten(agent_id)}" + (f" version {shorten(version)}" if version else "")
        super().__init__(f"{what} not found")
        self.agent_id = agent_id
        self.version = version


class ConcurrentModificationError(AgentWorkerError):
    """Raised when a save's expected version differs from the stored one."""

    def __init__(self, turn_id: str, expected: int, actual: int | None) -> None:
        super().__init__(
            f"turn {shorten(turn_id)} was modified concurrently "
            f"(expected version {expected}, stored version {actual})"
        )
        self.turn_id = turn_id
        self.expected = expected
        self.actual = actual


class CancelRequestedError(AgentWorkerError):
    """Raised when a step's commit meets a cancel request its writer has not seen.

    Nothing was written: the work the step did since its last commit is dropped, and the
    step ends the turn as cancelled from the stored state instead.
    """

    def __init__(self, turn_id: str) -> None:
        super().__init__(f"turn {shorten(turn_id)}: cancellation was requested meanwhile")
        self.turn_id = turn_id


class LeaseLostError(AgentWorkerError):
    """Raised when a runner acts on a turn whose lease it does not (or no longer) hold."""

    def __init__(self, turn_id: str, message: str) -> None:
        super().__init__(f"turn {shorten(turn_id)}: {message}")
        self.turn_id = turn_id


class TurnLeasedError(LeaseLostError):
    """Raised when a write without the turn's lease meets another owner's live lease.

    Nothing was written. ``retry_after`` (seconds) is when that lease expires at the
    latest; the owner usually gives it back sooner.
    """

    def __init__(self, turn_id: str, owner: str, retry_after: float) -> None:
        super().__init__(
            turn_id,
            f"leased by worker {shorten(owner)} for up to {retry_after:.3f}s more; try again then",
        )
        self.owner = owner
        self.retry_after = max(0.0, retry_after)


class InvalidArgumentError(AgentWorkerError, ValueError):
    """Raised when a public call gets a value it cannot take; ``field`` names it when known.

    Nothing was stored or changed.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidArgumentTypeError(AgentWorkerError, TypeError):
    """Raised when a public call gets an argument of a type it cannot take; ``field`` names it.

    Nothing was stored or changed.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class OutputValidationError(AgentWorkerError, ValueError):
    """Raised when a model's final answer still fails the agent's output type after retries.

    ``field`` is the pydantic location of the first error (``"items.0.price"``; None when
    the answer as a whole was wrong), ``attempts`` how many answers were refused. Never
    retryable: the retries were the model's.
    """

    retryable = False

    def __init__(self, turn_id: str, field: str | None, detail: str, attempts: int) -> None:
        where = f"field {field!r}" if field else "the answer"
        super().__init__(
            f"turn {shorten(turn_id)}: final output invalid after {attempts} "
            f"answer(s), {where}: {detail}"
        )
        self.turn_id = turn_id
        self.field = field
        self.detail = detail
        self.attempts = attempts


class LoopReentryError(AgentWorkerError, RuntimeError):
    """A blocking call was made on the process event loop's own thread (it would deadlock).

    Await the async twin there instead (``arun``, ``astart``, ...).
    """


class InvalidResumeError(AgentWorkerError, ValueError):
    """Raised when a resume command does not fit the turn's state; nothing is changed."""

    def __init__(self, turn_id: str, message: str) -> None:
        super().__init__(f"cannot resume turn {shorten(turn_id)}: {message}")
        self.turn_id = turn_id


class IllegalTransitionError(AgentWorkerError, RuntimeError):
    """Raised when a status change is not an arrow of ``status.TRANSITIONS`` (a bug)."""

    def __init__(self, turn_id: str, old: Any, new: Any) -> None:
        was, now = getattr(old, "value", old), getattr(new, "value", new)
        super().__init__(f"turn {shorten(turn_id)}: no transition {was} -> {now}")
        self.turn_id, self.old, self.new = turn_id, old, new


class AgentConversationBusyException(AgentWorkerError):
    """Raised when a conversation already has a non-terminal turn."""

    def __init__(self, conversation_id: str, active_turn_id: str, status: object) -> None:
        super().__init__(
            f"conversation {shorten(conversation_id)} is busy: "
            f"turn {shorten(active_turn_id)} is {status}"
        )
        self.conversation_id = conversation_id
        self.active_turn_id = active_turn_id
        self.status = status


class SnapshotCorruptedError(AgentWorkerError):
    """Raised when a stored record does not parse or has an unknown schema version."""

    def __init__(self, turn_id: str | None, message: str) -> None:
        super().__init__(f"snapshot of turn {shorten(turn_id)} is corrupted: {message}")
        self.turn_id = turn_id


class ConfigurationError(AgentWorkerError):
    """Raised when the runner is asked for something it was not configured for."""


class RestoredError(AgentWorkerError):
    """Raised (or reported) for an error restored from a snapshot: type name and message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


class HistoryRewrittenError(AgentWorkerError):
    """Raised when a save would change messages already stored (history is append-only)."""

    def __init__(self, turn_id: str, message: str) -> None:
        super().__init__(f"turn {shorten(turn_id)}: {message}")
        self.turn_id = turn_id


class StoreUnavailableError(AgentWorkerError):
    """Raised when the store cannot be reached (a write may or may not have landed)."""

    def __init__(self, url: str, cause: BaseException) -> None:
        super().__init__(f"store at {url} is unavailable: {type(cause).__name__}: {cause}")
        self.url = url


class PayloadTooLargeError(AgentWorkerError, ValueError):
    """Raised when a request body, an input, metadata or a result exceeds its limit.

    ``what`` says what was too large, ``field`` the argument or request field when there
    is one, ``limit`` the limit in ``unit`` (bytes, or messages for a history's count);
    nothing was stored.
    """

    def __init__(
        self, what: str, size: int, limit: int, field: str | None = None, *, unit: str = "bytes"
    ) -> None:
        super().__init__(f"{what} is {size} {unit} or more; the limit is {limit}")
        self.unit = unit
        self.what = what
        self.size = size
        self.limit = limit
        self.field = field


class ToolSchemaChangedError(AgentWorkerError):
    """Raised when a tool's server now lists another schema than the turn recorded for it.

    The turn planned the call against the schema fingerprinted as ``recorded``; running it
    against ``current`` could do something else, so the call is refused and the turn fails.
    ``server`` names the tool's server.
    """

    def __init__(self, turn_id: str, tool: str, server: str, recorded: str, current: str) -> None:
        super().__init__(
            f"turn {shorten(turn_id)}: tool {shorten(tool)} of server {shorten(server)} "
            f"changed its schema since the turn planned the call "
            f"(fingerprint {recorded}, now {current})"
        )
        self.turn_id = turn_id
        self.tool = tool
        self.server = server
        self.recorded = recorded
        self.current = current
        self.retryable = False
