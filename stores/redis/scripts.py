"""The Lua scripts next to this module, registered once, and typed wrappers around them.

Each ``.lua`` file is one atomic operation and lists its KEYS and ARGV in its header. The
scripts marked below get ``local SCHEMA = '<record version>'``, ``local READABLE = {...}``
(the versions ``load_snapshot`` reads) and ``_lib.lua`` prepended.
They run by EVALSHA; after a server restart (empty script cache) redis-py's ``Script``
reloads on NOSCRIPT, and ``pipelined`` does the same for pipelines.

On a Redis Cluster every script call touches one hash slot (its KEYS share a tag) and
the cluster client routes it by its first key. redis-py refuses EVALSHA in a cluster
pipeline, so there ``pipelined`` sends the plain commands before the scripts as one
cluster pipeline (split per node by the client), then the script calls grouped per master
(one pipeline each, straight to the master the slot map names; a call turned away is
sent again alone through the cluster client), then the plain commands after them: same
order, same replies, a round trip per master. A single server keeps the one-round-trip
path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from redis import Redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import AskError, MovedError, NoScriptError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from runner_core.errors import (
    AgentConversationBusyException,
    CancelRequestedError,
    ConcurrentModificationError,
    HistoryRewrittenError,
    LeaseLostError,
    SnapshotCorruptedError,
    TurnLeasedError,
    TurnNotFoundError,
)
from runner_core.snapshot import READABLE_VERSIONS, SCHEMA_VERSION
from runner_core.status import AgentTurnStatus
from runner_core.store import CancelResult, SaveResult
from stores.redis.codec import Arg, fields_of, text
from stores.redis.connection import is_cluster
from stores.redis.wire import Wire

_HERE = Path(__file__).parent / "lua"
_WITH_LIB = (
    "commit",
    "report",
    "queue",
    "forget",
    "claim",
    "renew",
    "release",
    "cancel",
    "peek",
    "load",
    "expire",
)
_PLAIN = ("visit", "zcas", "repair", "zrem_if", "memory_add", "quarantine")

Call = tuple[Script, Sequence[str], Sequence[Arg]]

#: Replies of a master that mean "not run here, send it again through the cluster client".
_SEND_AGAIN = (
    MovedError,
    AskError,
    TryAgainError,
    NoScriptError,
    RedisConnectionError,
    RedisTimeoutError,
)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A save sent the wrong stored-message count: the stored count and last message id."""

    stored: int
    last_id: str


@dataclass(frozen=True, slots=True)
class NeedKeys:
    """A commit sent a placeholder for a key the stored turn needs: send every key."""

    index: int


@dataclass(frozen=True, slots=True)
class Loaded:
    """A header (fields) and the messages after the ones the caller already had."""

    fields: dict[str, Any]
    messages: list[Any]


def _schema_lines() -> str:
    """The Lua lines naming the record version written and every version read."""
    readable = ", ".join(f"['{v}'] = true" for v in sorted(READABLE_VERSIONS))
    return f"local SCHEMA = '{SCHEMA_VERSION}'\nlocal READABLE = {{{readable}}}\n"


def _source(name: str) -> str:
    return (_HERE / f"{name}.lua").read_text(encoding="utf-8")


class Scripts:
    """Every script of the store, registered on one client."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        #: A cluster client: script calls go one by one, routed by their slot.
        self.cluster = is_cluster(redis)
        #: A single server's calls go as one packed write on a pooled connection.
        self.wire = Wire(redis)
        self.direct = self.wire.usable and not self.cluster
        lib = _schema_lines() + _source("_lib")
        self.by_name: dict[str, Script] = {}
        for name in _WITH_LIB:
            self.by_name[name] = redis.register_script(lib + "\n" + _source(name))
        for name in _PLAIN:
            self.by_name[name] = redis.register_script(_source(name))

    def __getitem__(self, name: str) -> Script:
        return self.by_name[name]

    def run(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """EVALSHA one script (SCRIPT LOAD and retry on NOSCRIPT)."""
        if self.cluster:
            return self._on_its_node(self.by_name[name], keys, args)
        if not self.direct:
            return self.by_name[name](keys=keys, args=args)
        return self.pipelined([(self.by_name[name], keys, args)])[0]

    def _on_its_node(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """EVALSHA routed by the first key; on NOSCRIPT, EVAL there (which caches it).

        redis-py's ``Script`` would SCRIPT LOAD on every master, which fails while any one
        of them is down, even for keys the others serve.
        """
        try:
            return self.redis.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.redis.eval(cast(str, script.script), len(keys), *keys, *args)

    def pipelined(
        self,
        calls: Sequence[Call],
        before: Sequence[Sequence[Arg]] = (),
        after: Sequence[Sequence[Arg]] = (),
        *,
        lenient: int = 0,
    ) -> list[Any]:
        """Plain commands, script calls, plain commands, in one round trip; every reply.

        An error reply raises, except for the first ``lenient`` commands before: their
        errors are returned in their place.

        On NOSCRIPT (an empty script cache after a restart) the scripts are loaded and the
        calls turned away are sent again with what follows them. The commands before and
        the calls that ran keep their one run and its reply: another client may have
        loaded a script halfway through the pipeline, and a script run twice answers
        differently the second time (a deleted turn is NOT_FOUND, a removed entry 0).
        """
        if self.cluster:
            return self._one_slot_at_a_time(calls, before, after)
        replies = self._send(calls, before, after)
        scripted = replies[len(before) : len(before) + len(calls)]
        missing = [i for i, r in enumerate(scripted) if isinstance(r, NoScriptError)]
        if missing:
            for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
                script.sha = self.redis.script_load(script.script)
            again = self._send([calls[i] for i in missing], (), after)
            for i, reply in zip(missing, again, strict=False):
                scripted[i] = reply
            replies = [*replies[: len(before)], *scripted, *again[len(missing) :]]
        for reply in replies[lenient:]:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _one_slot_at_a_time(
        self,
        calls: Sequence[Call],
        before: Sequence[Sequence[Arg]],
        after: Sequence[Sequence[Arg]],
    ) -> list[Any]:
        """``pipelined`` on a cluster: the script calls on the masters of their slots."""
        replies = self._plain(before)
        if len(calls) > 1:
            replies += self._per_master(calls)
        else:
            replies += [self._on_its_node(script, keys, args) for script, keys, args in calls]
        return replies + self._plain(after)

    def _per_master(self, calls: Sequence[Call]) -> list[Any]:
        """Script calls in one pipeline per master, each call still on one slot.

        The master comes from the client's slot map. A call its master turns away (MOVED or
        ASK after a resharding, TRYAGAIN, NOSCRIPT), or every call of a master that could
        not be reached, is sent again alone through the cluster client, which follows the
        redirection, refreshes its map and retries (every script is safe to run twice).
        """
        cluster = cast(RedisCluster, self.redis)
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, (_, keys, _) in enumerate(calls):
            node = cluster.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
            groups.setdefault(node.name, (node, []))[1].append(i)
        replies: list[Any] = [None] * len(calls)
        for node, indexes in groups.values():
            pipe = node.redis_connection.pipeline(transaction=False)
            for i in indexes:
                script, keys, args = calls[i]
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            try:
                answers = pipe.execute(raise_on_error=False)
            except (RedisConnectionError, RedisTimeoutError) as exc:
                answers = [exc] * len(indexes)
            for i, answer in zip(indexes, answers, strict=True):
                replies[i] = answer
        for i, reply in enumerate(replies):
            if isinstance(reply, _SEND_AGAIN):
                replies[i] = self._on_its_node(*calls[i])
            elif isinstance(reply, Exception):
                raise reply
        return replies

    def _plain(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        if not commands:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        return list(pipe.execute())

    def _send(
        self,
        calls: Sequence[Call],
        before: Sequence[Sequence[Arg]],
        after: Sequence[Sequence[Arg]] = (),
    ) -> list[Any]:
        if self.direct:
            sent = [("EVALSHA", s.sha, len(keys), *keys, *args) for s, keys, args in calls]
            return self.wire.exchange([*before, *sent, *after])
        pipe = self.redis.pipeline(transaction=False)
        for command in before:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        for script, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        for command in after:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies


def code_of(reply: Any) -> str:
    """The reply code a script answered with (OK, NO, ...)."""
    return text(reply[0])


def raise_for(reply: Any, conversation_id: str | None = None) -> None:
    """Raise the exception a script's error reply stands for; return if it is OK or NO."""
    code = code_of(reply)
    if code in ("OK", "NO", "MISMATCH", "NEED_KEYS"):
        return
    args = [text(x) for x in reply[1:]]
    if code == "NOT_FOUND":
        raise TurnNotFoundError(args[0])
    if code == "CONFLICT":
        raise ConcurrentModificationError(args[0], int(args[1]), int(args[2]))
    if code == "BUSY":
        raise AgentConversationBusyException(
            conversation_id or "?", args[0], AgentTurnStatus(args[1])
        )
    if code == "REWRITTEN":
        raise HistoryRewrittenError(
            args[0], f"stored history ({args[1]} messages, last {args[2]!r}) was rewritten"
        )
    if code == "CORRUPT":
        raise SnapshotCorruptedError(args[0], args[1])
    if code == "CANCELLED":
        raise CancelRequestedError(args[0])
    if code == "LEASED":
        raise TurnLeasedError(args[0], args[1], float(args[2]) - float(args[3]))
    if code == "LEASE_LOST":
        held = f"held by {args[3]!r}" if args[3] else "not held"
        raise LeaseLostError(args[0], f"lease {args[1]} of {args[2]!r} is {held}")
    raise RuntimeError(f"unexpected script reply {reply!r}")


def saved(reply: Any, conversation_id: str | None = None) -> SaveResult | Mismatch | NeedKeys:
    """The reply of commit.lua."""
    raise_for(reply, conversation_id)
    code = code_of(reply)
    if code == "MISMATCH":
        return Mismatch(int(text(reply[2])), text(reply[3]))
    if code == "NEED_KEYS":
        return NeedKeys(int(text(reply[2])))
    first, until = text(reply[4]), text(reply[6])
    return SaveResult(
        int(text(reply[1])),
        text(reply[2]) == "1",
        lease_released=text(reply[3]) == "1",
        first_sequence=int(first) if first else 0,
        parent_woken=text(reply[5]) == "1",
        lease_until=float(until) if until else None,
    )


def loaded(reply: Any) -> Loaded | None:
    """The reply of load/claim: None for NO."""
    raise_for(reply)
    if code_of(reply) == "NO":
        return None
    return Loaded(fields_of(reply[1]), list(reply[2]))


def cancelled(reply: Any) -> CancelResult:
    """The reply of cancel.lua."""
    if not answered(reply):
        return CancelResult(False)
    first = text(reply[1])
    return CancelResult(True, int(first) if first else 0)


def answered(reply: Any) -> bool:
    """The reply of renew/release/cancel: True for OK, False for NO."""
    raise_for(reply)
    return code_of(reply) == "OK"
