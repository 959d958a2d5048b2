"""The census of bad input: each public entry point, a bad argument, the error it gets.

Each ``Case`` acts on a ``Scene``: a runner over some store, with one turn waiting for an
approval. After a refused case, nothing changed: no new turn, the waiting turn at the
same version and status. ``case.id`` reads as a row of the table in docs/limits.md.

The other tables of that page have their own rows here: ``QUERIES`` (HTTP query
parameters), ``STORE`` (store methods called directly, on a ``StoreScene``), ``SWEEPS``
and ``SWEEP_SETTINGS`` (the sweeper, beat and housekeeping, on a ``SweepScene``).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from runner_core import (
    AgentBudget,
    AgentExecutionPolicy,
    AgentResumeCommand,
    AgentRunner,
    AgentTurnOptions,
    AgentTurnSnapshot,
    AgentTurnStatus,
    AgentTurnStore,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    PayloadTooLargeError,
    RetryPolicy,
    SnapshotCorruptedError,
    ToolMessage,
    TurnNotFoundError,
    UserMessage,
    load_snapshot,
)
from runner_core.policy import AgentLimits
from runner_core.store import Commit
from tests.support.agents import approval_agent
from tests.support.stores import snap

#: The id a refused start would have created.
NEW_ID = "census-new"
#: Small limits, so an oversized value is cheap to build.
LIMITS = AgentLimits(
    max_input_bytes=1000,
    max_metadata_bytes=200,
    max_resume_data_bytes=500,
    max_tool_result_bytes=300,
    max_model_answer_bytes=300,
    max_history_messages=5,
    max_history_bytes=500,
)
#: The runner's policy in the census.
POLICY = AgentExecutionPolicy(limits=LIMITS)
MIB = 1 << 20


@dataclass
class Scene:
    """A runner with small limits and one turn waiting for the approval of call ``c1``."""

    runner: AgentRunner
    waiting_id: str
    version: int

    @classmethod
    def on(cls, runner: AgentRunner) -> Scene:
        """Set the scene up on ``runner`` (built with ``POLICY``)."""
        assert runner.policy.limits == LIMITS
        turn = runner.run(approval_agent(), "pay 5")
        assert turn.status is AgentTurnStatus.WAITING_FOR_APPROVAL
        return cls(runner, turn.id, turn.state.version)

    def start(self, *args: Any, **kwargs: Any) -> Any:
        """``runner.start`` of the approval agent, with the census's turn id."""
        return self.runner.start(*args or (approval_agent(), "pay 5"), turn_id=NEW_ID, **kwargs)

    def astart(self, *args: Any, **kwargs: Any) -> Any:
        """``runner.astart``, likewise."""
        return _sync(self.runner.astart(*args, turn_id=NEW_ID, **kwargs))

    def resume(self, command: Any) -> Any:
        """``runner.submit_resume`` of the waiting turn."""
        return self.runner.submit_resume(self.waiting_id, command)

    def assert_nothing_changed(self) -> None:
        """No new turn; the waiting turn as it was."""
        store = self.runner.store
        try:
            store.load(NEW_ID)
        except TurnNotFoundError:
            pass
        else:
            raise AssertionError(f"a refused start stored turn {NEW_ID!r}")
        waiting = store.load(self.waiting_id)
        assert waiting.version == self.version
        assert waiting.status is AgentTurnStatus.WAITING_FOR_APPROVAL


def _sync(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


@dataclass(frozen=True)
class Case:
    """One row: ``"entry point: what was wrong"``, the error, the field it names."""

    row: str
    error: type[BaseException]
    field: str | None
    act: Callable[[Scene], object]

    @property
    def id(self) -> str:
        """The row as the test id: ``entry: bad -> Error(field)``."""
        named = f"({self.field})" if self.field else ""
        return f"{self.row} -> {self.error.__name__}{named}"


def _options(**metadata: Any) -> AgentTurnOptions:
    """Options built without validation, so the runner's own check is what refuses them."""
    return AgentTurnOptions.model_construct(metadata=metadata)


def _nested(levels: int) -> list[Any]:
    """``[[[...]]]``, ``levels`` lists deep (what a recursive walk runs out of stack on)."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _new(what: Callable[[], object]) -> Callable[[Scene], object]:
    return lambda scene: what()


A = InvalidArgumentError
TYPE = InvalidArgumentTypeError
CMD = AgentResumeCommand

RUNNER: list[Case] = [
    Case(
        "runner.start: metadata holds a set",
        A,
        "metadata",
        lambda s: s.start(options=_options(tags={1, 2})),
    ),
    Case(
        "runner.start: metadata holds an object",
        A,
        "metadata",
        lambda s: s.start(options=_options(who=object())),
    ),
    Case(
        "runner.start: metadata holds NaN",
        A,
        "metadata",
        lambda s: s.start(options=_options(score=float("nan"))),
    ),
    Case(
        "runner.start: metadata has a non-string key",
        A,
        "metadata",
        lambda s: s.start(options=_options(order={3: "x"})),
    ),
    Case(
        "runner.start: metadata holds a date",
        A,
        "metadata",
        lambda s: s.start(options=_options(when=datetime.date(2024, 1, 1))),
    ),
    Case(
        "runner.start: metadata nested 1,000 levels deep",
        A,
        "metadata",
        lambda s: s.start(options=_options(tree=_nested(1000))),
    ),
    Case(
        "runner.start: metadata over its limit",
        PayloadTooLargeError,
        "metadata",
        lambda s: s.start(options=_options(blob="x" * 201)),
    ),
    Case(
        "runner.start: history= with conversation_id=",
        A,
        "history",
        lambda s: s.start(history=[UserMessage("x")], conversation_id="c"),
    ),
    Case("runner.start: history is a string", TYPE, "history", lambda s: s.start(history="hello")),
    Case(
        "runner.start: history holds a dict",
        TYPE,
        "history",
        lambda s: s.start(history=[{"role": "user"}]),
    ),
    Case(
        "runner.start: history of more messages than its limit",
        PayloadTooLargeError,
        "history",
        lambda s: s.start(history=[UserMessage("hi")] * 6),
    ),
    Case(
        "runner.start: history over its byte limit",
        PayloadTooLargeError,
        "history",
        lambda s: s.start(history=[UserMessage("x" * 501)]),
    ),
    Case(
        "runner.start: history of 16 MiB",
        PayloadTooLargeError,
        "history",
        lambda s: s.start(history=[UserMessage("x" * 4 * MIB)] * 4),
    ),
    Case(
        "runner.start: history holding a long tool result",
        PayloadTooLargeError,
        "history",
        lambda s: s.start(history=[ToolMessage(call_id="c1", name="pay", content="r" * 600)]),
    ),
    Case("runner.start: input is an int", TYPE, "input", lambda s: s.start(approval_agent(), 42)),
    Case(
        "runner.start: input over its limit",
        PayloadTooLargeError,
        "input",
        lambda s: s.start(approval_agent(), "x" * 1001),
    ),
    Case(
        "runner.start: input of 16 MiB",
        PayloadTooLargeError,
        "input",
        lambda s: s.start(approval_agent(), "x" * 16 * MIB),
    ),
    Case(
        "runner.start: multimodal input over its limit",
        PayloadTooLargeError,
        "input",
        lambda s: s.start(approval_agent(), UserMessage([{"type": "text", "text": "y" * 1001}])),
    ),
    Case("runner.start: agent is an int", TYPE, "agent", lambda s: s.start(42, "pay 5")),
    Case(
        "runner.start: options is a dict",
        TYPE,
        "options",
        lambda s: s.start(options={"metadata": {}}),
    ),
    Case(
        "runner.start: conversation_id is an int",
        TYPE,
        "conversation_id",
        lambda s: s.start(conversation_id=7),
    ),
    Case(
        "runner.start: turn_id is an int",
        TYPE,
        "turn_id",
        lambda s: s.runner.start(approval_agent(), "pay 5", turn_id=7),
    ),
    Case(
        "runner.start: turn_id of 1 MiB",
        A,
        "turn_id",
        lambda s: s.runner.start(approval_agent(), "pay 5", turn_id="t" * 2**20),
    ),
    Case(
        "runner.start: conversation_id of 1 MiB",
        A,
        "conversation_id",
        lambda s: s.start(conversation_id="c" * 2**20),
    ),
    Case(
        "runner.run: metadata holds a set",
        A,
        "metadata",
        lambda s: s.runner.run(approval_agent(), "x", options=_options(tags={1})),
    ),
    Case(
        "runner.astart: metadata holds NaN",
        A,
        "metadata",
        lambda s: s.astart(approval_agent(), "x", options=_options(score=float("inf"))),
    ),
    Case(
        "runner.astart: input of 16 MiB",
        PayloadTooLargeError,
        "input",
        lambda s: s.astart(approval_agent(), "x" * 16 * MIB),
    ),
    Case(
        "runner.astart: history over its byte limit",
        PayloadTooLargeError,
        "history",
        lambda s: s.astart(approval_agent(), "x", history=[UserMessage("x" * 501)]),
    ),
    Case(
        "runner.astart: input is bytes",
        TYPE,
        "input",
        lambda s: s.astart(approval_agent(), b"pay 5"),
    ),
    Case(
        "runner.submit_resume: data over its limit",
        PayloadTooLargeError,
        "data",
        lambda s: s.resume(CMD.user_input("x" * 501)),
    ),
    Case(
        "runner.submit_resume: metadata over its limit",
        PayloadTooLargeError,
        "metadata",
        lambda s: s.resume(CMD.approve_tool("c1").with_metadata(note="n" * 201)),
    ),
    Case(
        "runner.submit_resume: reject reason over its limit",
        PayloadTooLargeError,
        "reason",
        lambda s: s.resume(CMD.reject_tool("c1", "r" * 201)),
    ),
    Case(
        "runner.submit_resume: command is a string",
        TYPE,
        "command",
        lambda s: s.resume("approve"),
    ),
    Case(
        "runner.submit_resume: turn_id is an int",
        TYPE,
        "turn_id",
        lambda s: s.runner.submit_resume(7, CMD.approve_tool("c1")),
    ),
    Case(
        "runner.resume: data over its limit",
        PayloadTooLargeError,
        "data",
        lambda s: s.runner.resume(s.waiting_id, CMD.user_input({"a": "x" * 501})),
    ),
    Case(
        "runner.asubmit_resume: metadata over its limit",
        PayloadTooLargeError,
        "metadata",
        lambda s: _sync(
            s.runner.asubmit_resume(
                s.waiting_id, CMD.approve_tool("c1").with_metadata(note="n" * 201)
            )
        ),
    ),
    Case(
        "runner.cancel: reason is an int",
        TYPE,
        "reason",
        lambda s: s.runner.cancel(s.waiting_id, 5),
    ),
    Case(
        "runner.cancel: reason over its limit",
        PayloadTooLargeError,
        "reason",
        lambda s: s.runner.cancel(s.waiting_id, "r" * 201),
    ),
    Case(
        "runner.acancel: reason over its limit",
        PayloadTooLargeError,
        "reason",
        lambda s: _sync(s.runner.acancel(s.waiting_id, "r" * 201)),
    ),
    Case("runner.restore: turn_id is None", TYPE, "turn_id", lambda s: s.runner.restore(None)),
    Case(
        "runner.restore: a 1 MiB unknown id",
        TurnNotFoundError,
        None,
        lambda s: s.runner.restore("x" * MIB),
    ),
]

COMMANDS: list[Case] = [
    Case(
        "AgentResumeCommand.with_metadata: a set value",
        A,
        "metadata",
        _new(lambda: CMD.approve_tool("c1").with_metadata(tags={1})),
    ),
    Case(
        "AgentResumeCommand.with_metadata: an object value",
        A,
        "metadata",
        _new(lambda: CMD.approve_tool("c1").with_metadata(who=object())),
    ),
    Case(
        "AgentResumeCommand.with_metadata: NaN",
        A,
        "metadata",
        _new(lambda: CMD.approve_tool("c1").with_metadata(score=float("nan"))),
    ),
    Case(
        "AgentResumeCommand.user_input: data holds a set",
        A,
        "data",
        _new(lambda: CMD.user_input({"pick": {1, 2}})),
    ),
    Case(
        "AgentResumeCommand.user_input: data nested 1,000 levels deep",
        A,
        "data",
        _new(lambda: CMD.user_input({"pick": _nested(1000)})),
    ),
    Case(
        "AgentResumeCommand.approve_tool: call id is an int",
        TYPE,
        "call_id",
        _new(lambda: CMD.approve_tool(5)),
    ),
    Case(
        "AgentResumeCommand.approve_tools: call ids is a string",
        A,
        "call_ids",
        _new(lambda: CMD.approve_tools("c1")),
    ),
    Case(
        "AgentResumeCommand.reject_tool: reason is None",
        TYPE,
        "reason",
        _new(lambda: CMD.reject_tool("c1", None)),
    ),
    Case(
        "AgentResumeCommand: reasons map to numbers",
        TYPE,
        "reasons",
        _new(lambda: CMD(CMD.reject_tool("c1").kind, reasons={"c1": 5})),
    ),
]

OPTIONS: list[Case] = [
    Case(
        "AgentTurnOptions: metadata holds a set",
        A,
        "metadata",
        _new(lambda: AgentTurnOptions(metadata={"tags": {1}})),
    ),
    Case(
        "AgentTurnOptions: metadata nested 1,000 levels deep",
        A,
        "metadata",
        _new(lambda: AgentTurnOptions(metadata={"tree": _nested(1000)})),
    ),
    Case(
        "AgentTurnOptions: metadata is a list",
        TYPE,
        "metadata",
        _new(lambda: AgentTurnOptions(metadata=[1])),
    ),
    Case(
        "AgentTurnOptions: streaming is a list",
        TYPE,
        "streaming",
        _new(lambda: AgentTurnOptions(streaming=[1])),
    ),
    Case(
        "AgentTurnOptions: an unknown keyword",
        TYPE,
        "colour",
        _new(lambda: AgentTurnOptions(colour="red")),
    ),
    Case(
        "AgentExecutionPolicy: max_tool_concurrency=-1",
        A,
        "max_tool_concurrency",
        _new(lambda: AgentExecutionPolicy(max_tool_concurrency=-1)),
    ),
    Case(
        "AgentExecutionPolicy: tool_timeout_seconds=-1",
        A,
        "tool_timeout_seconds",
        _new(lambda: AgentExecutionPolicy(tool_timeout_seconds=-1)),
    ),
    Case(
        "AgentExecutionPolicy: lease_seconds=0",
        A,
        "lease_seconds",
        _new(lambda: AgentExecutionPolicy(lease_seconds=0)),
    ),
    Case(
        "AgentExecutionPolicy: tool_timeout_behavior='later'",
        A,
        "tool_timeout_behavior",
        _new(lambda: AgentExecutionPolicy(tool_timeout_behavior="later")),
    ),
    Case(
        "AgentExecutionPolicy: budget is a string",
        TYPE,
        "budget",
        _new(lambda: AgentExecutionPolicy(budget="lots")),
    ),
    Case(
        "AgentBudget: max_tool_calls='x'",
        A,
        "max_tool_calls",
        _new(lambda: AgentBudget(max_tool_calls="x")),
    ),
    Case(
        "RetryPolicy: max_retries=-1", A, "max_retries", _new(lambda: RetryPolicy(max_retries=-1))
    ),
    Case("RetryPolicy: multiplier=0.5", A, "multiplier", _new(lambda: RetryPolicy(multiplier=0.5))),
    Case(
        "AgentLimits: max_input_bytes=0",
        A,
        "max_input_bytes",
        _new(lambda: AgentLimits(max_input_bytes=0)),
    ),
    Case(
        "AgentLimits: oversized_output='drop'",
        A,
        "oversized_output",
        _new(lambda: AgentLimits(oversized_output="drop")),
    ),
]

NESTED: list[Case] = [
    Case(
        "AgentExecutionPolicy: budget={'max_tool_calls': 'x'}",
        A,
        "budget.max_tool_calls",
        _new(lambda: AgentExecutionPolicy(budget={"max_tool_calls": "x"})),
    ),
    Case(
        "AgentTurnOptions: policy={'limits': {'max_input_bytes': 0}}",
        A,
        "policy.limits.max_input_bytes",
        _new(lambda: AgentTurnOptions(policy={"limits": {"max_input_bytes": 0}})),
    ),
]

RECORDS: list[Case] = [
    Case(
        "load_snapshot: not JSON",
        SnapshotCorruptedError,
        None,
        _new(lambda: load_snapshot("{not json", "t-1")),
    ),
    Case(
        "load_snapshot: an unknown schema version",
        SnapshotCorruptedError,
        None,
        _new(lambda: load_snapshot({"schema_version": 999}, "t-1")),
    ),
]

#: Every case of the census that needs no server.
ALL = [*RUNNER, *COMMANDS, *OPTIONS, *NESTED, *RECORDS]


# -- HTTP query parameters ---------------------------------------------------------------


@dataclass(frozen=True)
class QueryCase:
    """One row over HTTP: ``"GET path: what was wrong"``, the status, the field it names.

    ``query`` is the query string (``{id}`` in ``path`` is the scene's waiting turn);
    ``headers`` are sent besides the credential's.
    """

    row: str
    status: int
    field: str
    query: str
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def path(self) -> str:
        """The path of the row (``/turns``, ``/turns/{id}/wait``, ...)."""
        return self.row.split(": ", 1)[0].removeprefix("GET ")

    @property
    def id(self) -> str:
        """The row as the test id: ``GET path: bad -> 422(field)``."""
        return f"{self.row} -> {self.status}({self.field})"


def cursor_of(value: object) -> str:
    """A cursor in the API's encoding around ``value`` (which may not be a position)."""
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _q(row: str, field: str, query: str, *headers: tuple[str, str]) -> QueryCase:
    return QueryCase(row, 422, field, query, headers)


LIST = "GET /turns"
WAIT = "GET /turns/{id}/wait"
EVENTS = "GET /turns/{id}/events"

QUERIES: list[QueryCase] = [
    _q(f"{LIST}: an unknown status", "status", "status=BOGUS"),
    _q(f"{LIST}: a status in lower case", "status", "status=ready"),
    _q(f"{LIST}: limit=0", "limit", "limit=0"),
    _q(f"{LIST}: limit=-1", "limit", "limit=-1"),
    _q(f"{LIST}: limit=201", "limit", "limit=201"),
    _q(f"{LIST}: a 30-digit limit", "limit", "limit=" + "9" * 30),
    _q(f"{LIST}: limit='ten'", "limit", "limit=ten"),
    _q(f"{LIST}: a cursor that is not base64 JSON", "cursor", "cursor=nonsense"),
    _q(f"{LIST}: a cursor of one value", "cursor", "cursor=" + cursor_of([1.0])),
    _q(f"{LIST}: a cursor of an object", "cursor", "cursor=" + cursor_of({"a": 1, "b": 2})),
    _q(f"{LIST}: a cursor whose time is text", "cursor", "cursor=" + cursor_of(["x", "t-1"])),
    _q(f"{LIST}: a cursor whose time is NaN", "cursor", "cursor=" + cursor_of([math.nan, "t"])),
    _q(f"{LIST}: a cursor whose id is a list", "cursor", "cursor=" + cursor_of([1.0, ["t"]])),
    _q(f"{LIST}: a cursor of 20,000 characters", "cursor", "cursor=" + "A" * 20_000),
    _q(f"{LIST}: created_after=nan", "created_after", "created_after=nan"),
    _q(f"{LIST}: created_before=inf", "created_before", "created_before=inf"),
    _q(f"{LIST}: updated_after='soon'", "updated_after", "updated_after=soon"),
    _q(f"{LIST}: updated_before=-inf", "updated_before", "updated_before=-inf"),
    _q(f"{LIST}: root_only='maybe'", "root_only", "root_only=maybe"),
    _q(f"{LIST}: an unknown parameter", "colour", "colour=red"),
    _q(f"{LIST}: an unknown parameter of 5,000 characters", "query", "x" * 5_000 + "=1"),
    QueryCase(f"{LIST}: another tenant's turns", 403, "tenant", "tenant=globex"),
    _q(f"{WAIT}: until='soon'", "until", "until=soon"),
    _q(f"{WAIT}: timeout='long'", "timeout", "timeout=long"),
    _q(f"{WAIT}: timeout=-1", "timeout", "timeout=-1"),
    _q(f"{WAIT}: timeout=nan", "timeout", "timeout=nan"),
    _q(f"{WAIT}: timeout=inf", "timeout", "timeout=inf"),
    _q(f"{EVENTS}: after='nonsense'", "after", "after=nonsense"),
    _q(f"{EVENTS}: after of 20,000 characters", "after", "after=" + "9" * 20_000),
    _q(
        f"{EVENTS}: a Last-Event-ID that is no stream id",
        "Last-Event-ID",
        "",
        ("Last-Event-ID", "x"),
    ),
]


# -- store methods called directly ---------------------------------------------------------


@dataclass
class StoreScene:
    """A store with one READY turn nobody holds; ``state()`` is all a bad call could change."""

    store: AgentTurnStore
    turn_id: str

    @classmethod
    def on(cls, store: AgentTurnStore) -> StoreScene:
        """Store one READY turn in ``store``."""
        turn = snap()
        store.commit(Commit(turn, -1, "census-create"))
        return cls(store, turn.id)

    def snapshot(self) -> AgentTurnSnapshot:
        """The stored turn."""
        return self.store.load(self.turn_id)

    def commit(self, **changes: Any) -> Any:
        """A commit of the stored turn with ``changes`` to its fields (unchecked)."""
        good = Commit(self.snapshot(), self.snapshot().version, "census-commit")
        values = {f: getattr(good, f) for f in good.__slots__}
        values.update(changes)
        bad = Commit.__new__(Commit)
        for name, value in values.items():
            object.__setattr__(bad, name, value)
        return self.store.commit(bad)

    def state(self) -> tuple[object, ...]:
        """The turn as stored (lease and marks included), what a sweep would wake, the rest."""
        s, later = self.store, self.store.now() + 10_000
        control = s.peek(self.turn_id)
        wakeups = s.wakeups(later, 0.0)
        body = s.load(self.turn_id).model_dump(mode="json")
        return (
            control.version,
            control.status,
            control.cancel_requested,
            control.lease,
            body,
            wakeups.due,
            wakeups.lost,
            s.quarantined(),
            s.read_events(self.turn_id),
        )


@dataclass(frozen=True)
class StoreCase:
    """One row: ``"store.method: what was wrong"``, the error, the argument it names."""

    row: str
    error: type[BaseException]
    field: str
    act: Callable[[StoreScene], object]

    @property
    def id(self) -> str:
        """The row as the test id."""
        return f"{self.row} -> {self.error.__name__}({self.field})"


def _now(s: StoreScene) -> float:
    return s.store.now()


NAN, INF = math.nan, math.inf
HUGE_ID = "z" * MIB

STORE: list[StoreCase] = [
    StoreCase("store.commit: not a Commit", TYPE, "commit", lambda s: s.store.commit("x")),
    StoreCase("store.commit: commit is None", TYPE, "commit", lambda s: s.store.commit(None)),
    StoreCase(
        "store.commit: snapshot is a dict", TYPE, "snapshot", lambda s: s.commit(snapshot={"id": 1})
    ),
    StoreCase(
        "store.commit: expected_version is a string",
        TYPE,
        "expected_version",
        lambda s: s.commit(expected_version="0"),
    ),
    StoreCase(
        "store.commit: expected_version=-2",
        A,
        "expected_version",
        lambda s: s.commit(expected_version=-2),
    ),
    StoreCase(
        "store.commit: request_id is None", TYPE, "request_id", lambda s: s.commit(request_id=None)
    ),
    StoreCase(
        "store.commit: a lease of one value", TYPE, "lease", lambda s: s.commit(lease=("w1",))
    ),
    StoreCase(
        "store.commit: a child that is a dict", TYPE, "children", lambda s: s.commit(children=({},))
    ),
    StoreCase(
        "store.commit: an event that is a string", TYPE, "events", lambda s: s.commit(events=("e",))
    ),
    StoreCase(
        "store.commit: a new turn with a 1 MiB id",
        A,
        "snapshot.id",
        lambda s: s.store.commit(Commit(snap(HUGE_ID), -1, "r")),
    ),
    StoreCase(
        "store.commit: a new turn with an empty id",
        A,
        "snapshot.id",
        lambda s: s.store.commit(Commit(snap().model_copy(update={"id": ""}), -1, "r")),
    ),
    StoreCase("store.load: turn_id is None", TYPE, "turn_id", lambda s: s.store.load(None)),
    StoreCase("store.load: turn_id is an int", TYPE, "turn_id", lambda s: s.store.load(7)),
    StoreCase("store.peek: turn_id is None", TYPE, "turn_id", lambda s: s.store.peek(None)),
    StoreCase(
        "store.claim: turn_id is None",
        TYPE,
        "turn_id",
        lambda s: s.store.claim(None, "w1", _now(s), 1000),
    ),
    StoreCase(
        "store.claim: worker_id is None",
        TYPE,
        "worker_id",
        lambda s: s.store.claim(s.turn_id, None, _now(s), 1000),
    ),
    StoreCase(
        "store.claim: now is NaN", A, "now", lambda s: s.store.claim(s.turn_id, "w1", NAN, 1000)
    ),
    StoreCase(
        "store.claim: now is a string",
        TYPE,
        "now",
        lambda s: s.store.claim(s.turn_id, "w1", "now", 1000),
    ),
    StoreCase(
        "store.claim: lease_ms=0",
        A,
        "lease_ms",
        lambda s: s.store.claim(s.turn_id, "w1", _now(s), 0),
    ),
    StoreCase(
        "store.claim: lease_ms=-5",
        A,
        "lease_ms",
        lambda s: s.store.claim(s.turn_id, "w1", _now(s), -5),
    ),
    StoreCase(
        "store.claim: lease_ms=1.5",
        TYPE,
        "lease_ms",
        lambda s: s.store.claim(s.turn_id, "w1", _now(s), 1.5),
    ),
    StoreCase(
        "store.claim_runnable: limit=-1",
        A,
        "limit",
        lambda s: s.store.claim_runnable("w1", _now(s), 1000, -1),
    ),
    StoreCase(
        "store.claim_runnable: limit='5'",
        TYPE,
        "limit",
        lambda s: s.store.claim_runnable("w1", _now(s), 1000, "5"),
    ),
    StoreCase(
        "store.claim_runnable: a limit of 10**12",
        A,
        "limit",
        lambda s: s.store.claim_runnable("w1", _now(s), 1000, 10**12),
    ),
    StoreCase(
        "store.claim_runnable: lease_ms=0",
        A,
        "lease_ms",
        lambda s: s.store.claim_runnable("w1", _now(s), 0, 5),
    ),
    StoreCase(
        "store.renew_lease: until is NaN",
        A,
        "until",
        lambda s: s.store.renew_lease(s.turn_id, "w1", "l1", _now(s), NAN),
    ),
    StoreCase(
        "store.renew_lease: lease_id is None",
        TYPE,
        "lease_id",
        lambda s: s.store.renew_lease(s.turn_id, "w1", None, _now(s), _now(s) + 5),
    ),
    StoreCase(
        "store.release_lease: worker_id is an int",
        TYPE,
        "worker_id",
        lambda s: s.store.release_lease(s.turn_id, 5, "l1"),
    ),
    StoreCase(
        "store.request_cancellation: reason is an int",
        TYPE,
        "reason",
        lambda s: s.store.request_cancellation(s.turn_id, 5),
    ),
    StoreCase(
        "store.request_cancellation: an event that is a dict",
        TYPE,
        "events",
        lambda s: s.store.request_cancellation(s.turn_id, "stop", [{"type": "x"}]),
    ),
    StoreCase(
        "store.find_active_turn: conversation_id is None",
        TYPE,
        "conversation_id",
        lambda s: s.store.find_active_turn(None),
    ),
    StoreCase(
        "store.read_events: root_turn_id is None",
        TYPE,
        "root_turn_id",
        lambda s: s.store.read_events(None),
    ),
    StoreCase(
        "store.read_events: limit=-1", A, "limit", lambda s: s.store.read_events(s.turn_id, -1)
    ),
    StoreCase(
        "store.mark_queued: one id as a string",
        TYPE,
        "turn_ids",
        lambda s: s.store.mark_queued(s.turn_id),
    ),
    StoreCase(
        "store.mark_queued: an id that is None",
        TYPE,
        "turn_ids",
        lambda s: s.store.mark_queued([s.turn_id, None]),
    ),
    StoreCase(
        "store.unmark_queued: turn_id is None",
        TYPE,
        "turn_id",
        lambda s: s.store.unmark_queued(None),
    ),
    StoreCase(
        "store.forget_queued: before is NaN", A, "before", lambda s: s.store.forget_queued(NAN)
    ),
    StoreCase(
        "store.forget_queued: before is a string",
        TYPE,
        "before",
        lambda s: s.store.forget_queued("x"),
    ),
    StoreCase("store.wakeups: now is NaN", A, "now", lambda s: s.store.wakeups(NAN, 0.0)),
    StoreCase(
        "store.wakeups: lost_after is infinite",
        A,
        "lost_after",
        lambda s: s.store.wakeups(_now(s), INF),
    ),
    StoreCase("store.wakeups: limit=-1", A, "limit", lambda s: s.store.wakeups(_now(s), 0.0, -1)),
    StoreCase("store.due_turn_ids: now is NaN", A, "now", lambda s: s.store.due_turn_ids(NAN)),
    StoreCase(
        "store.stale_turn_ids: older_than is NaN",
        A,
        "older_than",
        lambda s: s.store.stale_turn_ids(_now(s), NAN),
    ),
    StoreCase(
        "store.children_of: parent_turn_id is None",
        TYPE,
        "parent_turn_id",
        lambda s: s.store.children_of(None),
    ),
    StoreCase(
        "store.report_child: child_turn_id is None",
        TYPE,
        "child_turn_id",
        lambda s: s.store.report_child(None),
    ),
    StoreCase(
        "store.find_terminal_children_with_waiting_parent: limit=-1",
        A,
        "limit",
        lambda s: s.store.find_terminal_children_with_waiting_parent(-1),
    ),
    StoreCase(
        "store.quarantine: reason is None",
        TYPE,
        "reason",
        lambda s: s.store.quarantine(s.turn_id, None),
    ),
    StoreCase(
        "store.quarantine: turn_id is None",
        TYPE,
        "turn_id",
        lambda s: s.store.quarantine(None, "spoiled"),
    ),
    StoreCase("store.quarantined: limit=-1", A, "limit", lambda s: s.store.quarantined(-1)),
    StoreCase(
        "store.list_turns: status is a string",
        TYPE,
        "status",
        lambda s: s.store.list_turns(status="READY"),
    ),
    StoreCase(
        "store.list_turns: limit=-1",
        A,
        "limit",
        lambda s: s.store.list_turns(limit=-1),
    ),
    StoreCase(
        "store.list_turns: before is not a position",
        TYPE,
        "before",
        lambda s: s.store.list_turns(before=5.0),
    ),
]


# -- the sweeper, beat and housekeeping ----------------------------------------------------

#: Settings the sweeper, beat and housekeeping read, and values each refuses: the process
#: (``celery worker`` or ``celery beat``) exits with one line naming the setting.
SWEEP_SETTINGS: list[tuple[str, str]] = [
    (name, value)
    for name in (
        "SWEEP_INTERVAL",
        "LOST_WAKEUP_SECONDS",
        "REQUEUE_AFTER_SECONDS",
        "HOUSEKEEPING_INTERVAL",
    )
    for value in ("0", "-1", "nan", "inf")
] + [("RETENTION_SECONDS", "-1"), ("RETENTION_SECONDS", "nan"), ("RETENTION_SECONDS", "inf")]


@dataclass
class SweepScene:
    """A runner whose wake-ups are recorded, over a store with three READY turns."""

    runner: AgentRunner
    sent: list[str]
    turn_ids: list[str]

    @classmethod
    def on(cls, store: AgentTurnStore) -> SweepScene:
        """Three READY turns in ``store``, their wake-ups lost."""
        sent: list[str] = []
        runner = AgentRunner(turn_store=store, dispatcher=sent.append)
        ids = []
        for _ in range(3):
            turn = snap()
            store.commit(Commit(turn, -1, "census-" + turn.id))
            ids.append(turn.id)
        return cls(runner, sent, ids)

    def state(self) -> tuple[object, ...]:
        """Each turn as stored, what was sent, what is quarantined."""
        store = self.runner.store
        turns = [store.load(t).model_dump(mode="json") for t in self.turn_ids]
        return (turns, list(self.sent), store.quarantined())


@dataclass(frozen=True)
class SweepCase:
    """One row: ``"entry point: what was wrong"``, the error, the argument it names."""

    row: str
    error: type[BaseException]
    field: str
    act: Callable[[SweepScene], object]
    #: Only a store with housekeeping (the Redis store) has this entry point.
    redis_only: bool = False

    @property
    def id(self) -> str:
        """The row as the test id."""
        return f"{self.row} -> {self.error.__name__}({self.field})"


def _sweep(**kwargs: Any) -> Callable[[SweepScene], object]:
    from agentworker.fleet.stepping import sweep_once

    lost_after = kwargs.pop("lost_after", 0.0)
    return lambda s: sweep_once(s.runner, lost_after, **kwargs)


def _housekeep(retention: float = 1.0, **kwargs: Any) -> Callable[[SweepScene], object]:
    from agentworker.fleet.housekeeping import housekeep

    return lambda s: housekeep(s.runner.store, retention, **kwargs)


def _store(method: str, *args: Any) -> Callable[[SweepScene], object]:
    return lambda s: getattr(s.runner.store, method)(*args)


SWEEPS: list[SweepCase] = [
    SweepCase("sweep_once: lost_after is NaN", A, "lost_after", _sweep(lost_after=NAN)),
    SweepCase("sweep_once: lost_after is a string", TYPE, "lost_after", _sweep(lost_after="10")),
    SweepCase("sweep_once: limit=-1", A, "limit", _sweep(limit=-1)),
    SweepCase("sweep_once: a limit of 10**12", A, "limit", _sweep(limit=10**12)),
    SweepCase("housekeep: retention_seconds is NaN", A, "retention_seconds", _housekeep(NAN), True),
    SweepCase("housekeep: retention_seconds=-1", A, "retention_seconds", _housekeep(-1.0), True),
    SweepCase(
        "housekeep: grace_seconds is infinite",
        A,
        "grace_seconds",
        _housekeep(grace_seconds=INF),
        True,
    ),
    SweepCase("housekeep: batch=0", A, "batch", _housekeep(batch=0), True),
    SweepCase(
        "housekeep: budget_seconds=-1", A, "budget_seconds", _housekeep(budget_seconds=-1.0), True
    ),
    SweepCase(
        "store.expire_terminal: older_than_seconds is NaN",
        A,
        "older_than_seconds",
        _store("expire_terminal", NAN),
        True,
    ),
    SweepCase(
        "store.expire_terminal: limit=-1", A, "limit", _store("expire_terminal", 1.0, -1), True
    ),
    SweepCase(
        "store.prune_partitions: grace_seconds is NaN",
        A,
        "grace_seconds",
        _store("prune_partitions", NAN),
        True,
    ),
]
