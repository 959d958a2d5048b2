"""The whole Redis keyspace of the turn store, in one module.

Hash tags. Every key of a turn tree carries the tree's tag ``{T}``, so a root, all its
descendants, its conversation marker and its partition of the indexes live in one hash slot
(one Redis Cluster node), and every script works on a single slot:

* a conversation root (``conversation_id`` set, no parent): ``T = c:<conversation_id>``.
  The runner makes up a new root's id, so the conversation, not the id, must choose the
  slot: the busy check reads the conversation's marker and creates the root in one script.
  Successive turns of one conversation therefore share a tag.
* any other root: ``T = <root_turn_id>``.
* a child: the tag of its parent (so of its root).
* a raw tag holding a brace or longer than 100 characters becomes ``h:<sha1 of it>``.

Looking a turn up by id. The tag of a child or a conversation root cannot be computed from
the turn id, so creation also writes a small global index ``ns:turn:<id> -> T``. The store
caches it per process (a tag never changes), so steady-state operations are one round trip.

Keys (``ns`` is the namespace, ``I`` a turn id):

================================  =======  =====================================================
``ns:{T}:h:I``                     hash     the turn header: ``body`` (the snapshot without its
                                            messages and the fields the header holds, JSON,
                                            with ``schema_version``), ``sv``
                                            (record version) and the control fields the scripts
                                            own: version, status, lease, cancel flag, message
                                            count and last id, waited-on children and how many
                                            have not reported (``open``), ``r:<child id>`` (an
                                            ended child's result), event counter ``ev``, request
                                            ids
``ns:{T}:m:I``                     list     the messages, one JSON document each, append-only
``ns:{T}:k:I``                     list     ids of I's direct children, oldest first
``ns:{T}:runnable``                zset     id -> since when runnable: READY and RUNNING turns,
                                            due retries (score ``next_runnable_at``),
                                            cancel-requested turns; a leased one scores its
                                            lease expiry. Blocked and terminal turns are absent.
``ns:{T}:live``                    zset     id -> created_at of every non-terminal turn
``ns:{T}:ended``                   zset     id -> when it ended (server time), terminal turns
``ns:{T}:waits``                   hash     parent id -> JSON list of the children it waits on
                                            that have not reported yet
``ns:{T}:quarantine``              zset     id -> when: turns whose record could not be read,
                                            moved out of every index (``qr`` in the header: why;
                                            every script that would change or index a turn
                                            refuses one that has it)
``ns:{T}:leases``                  hash     id -> lease expiry of every leased turn (the claim
                                            rule reads a parent's lease from here)
``ns:{T}:ev:R``                     stream   the committed (and provisional) events of the tree
                                            rooted at R: fields ``seq`` (the turn's event
                                            number, committed ones only) and ``event`` (JSON)
``ns:{T}:ev:R:end``                 string   the stream id of the root's terminal event
``ns:{T}:conv``                    hash     ``turn``, ``st``: the conversation's non-terminal
                                            root (conversation tags only)
``ns:{T}:cm:<sha1(conv)>``         list     a conversation's chat memory (``RedisChatMemory``):
                                            model-visible messages, JSON, oldest first
``ns:{T}:ci:<sha1(conv)>``         set      the ids of the messages in that list
``ns:turn:I``                      string   I's tag (global, written before the turn is created)

``ns:partitions:{pK}``             zset     tag -> last turn creation (unix time; a root, or
                                            children added to its tree): tags that may
                                            hold live turns; scans of runnable turns walk these.
                                            ``K`` = crc32("p:" + tag) % buckets (16 by default): the
                                            writes of root creations spread over the cluster
``ns:retained:{pK}``               zset     tag -> last turn creation: tags with any stored turn
                                            (same bucket and slot as the tag's partitions entry;
                                            listings read them newest first)
``ns:partitions``, ``ns:retained``  zset     the single keys of earlier releases: still read,
                                            emptied into the buckets by ``migrate_partitions``
``ns:due:{dK}``                     zset     the due index, 16 shards (K = crc32(tag) % 16): tag ->
                                            the earliest score of its runnable partition, at most
                                            (lowered by every write after its script, raised by
                                            the sweeper once it has looked): sweeps visit only
                                            the tags whose score has come
================================  =======  =====================================================

Keys beside the turn store (plain commands, one key each; see ``outbox.py``, ``gates.py``):

================================  =======  =====================================================
``ns:wh:d:M``                      hash     webhook delivery M: url, subscription, body, state
``ns:wh:d:M:attempts``             list     its attempts, JSON each, oldest first
``ns:wh:d:M:lock``                 string   held by the one deliverer of M
``ns:wh:due``                      zset     delivery id -> when it is due (sent or re-sent)
``ns:wh:dead``                     zset     delivery id -> when it gave up
``ns:wh:check``                    zset     turn id -> when the sweep checks its notification
``ns:wh:log:I``                    list     the delivery ids of turn I, oldest first
``ns:sweep:pending``               string   beat's mark: a sweep was sent and has not started
``ns:http:request:<t>:<id>``       string   the HTTP request ledger: request id -> its answer
                                            (``t``: the first 16 hex of sha256 of the tenant)
================================  =======  =====================================================

The global keys are never passed to a script together with tagged keys. Plain commands
address them one key each, so on a cluster every command touches one slot too.
"""

from __future__ import annotations

import hashlib
import zlib

_MAX_TAG = 100
#: Shards of the due index, each in its own hash slot (spread over a Redis Cluster).
DUE_SHARDS = 16
#: Buckets of the partition sets by default, and the most a deployment may use.
PARTITION_BUCKETS = 16
MAX_PARTITION_BUCKETS = 256


class Keyspace:
    """Builds every key of one namespace."""

    def __init__(self, namespace: str, buckets: int = PARTITION_BUCKETS) -> None:
        if not namespace or any(c in namespace for c in "{} \n"):
            raise ValueError(f"namespace must be non-empty, no braces or spaces: {namespace!r}")
        if not 1 <= buckets <= MAX_PARTITION_BUCKETS:
            raise ValueError(f"partition buckets must be 1 to {MAX_PARTITION_BUCKETS}: {buckets}")
        self.namespace = namespace
        self.buckets = buckets
        #: The single partition sets of earlier releases (read until migrated).
        self.legacy_partitions = f"{namespace}:partitions"
        self.legacy_retained = f"{namespace}:retained"
        self.due_shards = [f"{namespace}:due:{{d{k}}}" for k in range(DUE_SHARDS)]

    # -- tags -------------------------------------------------------------------------
    @staticmethod
    def root_tag(root_turn_id: str, conversation_id: str | None) -> str:
        """The tag of a new root turn (see the module docstring)."""
        raw = f"c:{conversation_id}" if conversation_id else root_turn_id
        if len(raw) > _MAX_TAG or "{" in raw or "}" in raw:
            return "h:" + hashlib.sha1(raw.encode()).hexdigest()
        return raw

    def conversation_tag(self, conversation_id: str) -> str:
        """The tag holding a conversation's marker and its root turns."""
        return self.root_tag("", conversation_id)

    def turn_index(self, turn_id: str) -> str:
        """The global ``turn id -> tag`` key."""
        return f"{self.namespace}:turn:{turn_id}"

    # -- per turn ---------------------------------------------------------------------
    def header(self, tag: str, turn_id: str) -> str:
        """The turn's header hash."""
        return f"{self.namespace}:{{{tag}}}:h:{turn_id}"

    def messages(self, tag: str, turn_id: str) -> str:
        """The turn's message list."""
        return f"{self.namespace}:{{{tag}}}:m:{turn_id}"

    def children(self, tag: str, turn_id: str) -> str:
        """The list of the turn's direct children."""
        return f"{self.namespace}:{{{tag}}}:k:{turn_id}"

    def events(self, tag: str, root_turn_id: str) -> str:
        """The event stream of the tree rooted at ``root_turn_id``."""
        return f"{self.namespace}:{{{tag}}}:ev:{root_turn_id}"

    def events_end(self, tag: str, root_turn_id: str) -> str:
        """The stream id of the root's terminal event, once the tree has ended."""
        return self.events(tag, root_turn_id) + ":end"

    # -- the bucketed partition sets ----------------------------------------------------
    def bucket(self, tag: str) -> int:
        """The bucket of the partition sets that holds ``tag``."""
        return zlib.crc32(b"p:" + tag.encode()) % self.buckets

    def partitions(self, tag: str) -> str:
        """The bucket of ``partitions`` (tags that may hold live turns) holding ``tag``."""
        return self.partitions_bucket(self.bucket(tag))

    def retained(self, tag: str) -> str:
        """The bucket of ``retained`` (tags with any stored turn) holding ``tag``."""
        return self.retained_bucket(self.bucket(tag))

    def partitions_bucket(self, k: int) -> str:
        """Bucket ``k`` of the partitions set (its own hash slot)."""
        return f"{self.namespace}:partitions:{{p{k}}}"

    def retained_bucket(self, k: int) -> str:
        """Bucket ``k`` of the retained set (the slot of partitions bucket ``k``)."""
        return f"{self.namespace}:retained:{{p{k}}}"

    def all_partitions(self) -> list[str]:
        """Every partitions key readers look at: the buckets, then the legacy single key."""
        return [*(self.partitions_bucket(k) for k in range(self.buckets)), self.legacy_partitions]

    def all_retained(self) -> list[str]:
        """Every retained key readers look at: the buckets, then the legacy single key."""
        return [*(self.retained_bucket(k) for k in range(self.buckets)), self.legacy_retained]

    # -- the due index ------------------------------------------------------------------
    def due_shard(self, tag: str) -> str:
        """The shard of the due index that holds ``tag`` (its own hash slot)."""
        return self.due_shards[zlib.crc32(tag.encode()) % DUE_SHARDS]

    # -- per tag ----------------------------------------------------------------------
    def runnable(self, tag: str) -> str:
        """The tag's partition of the runnable index."""
        return f"{self.namespace}:{{{tag}}}:runnable"

    def live(self, tag: str) -> str:
        """The tag's non-terminal turns."""
        return f"{self.namespace}:{{{tag}}}:live"

    def ended(self, tag: str) -> str:
        """The tag's terminal turns."""
        return f"{self.namespace}:{{{tag}}}:ended"

    def waits(self, tag: str) -> str:
        """Parents of the tag waiting for children."""
        return f"{self.namespace}:{{{tag}}}:waits"

    def quarantine(self, tag: str) -> str:
        """The tag's quarantined turns (id -> when), records that could not be read."""
        return f"{self.namespace}:{{{tag}}}:quarantine"

    def leases(self, tag: str) -> str:
        """Lease expiries of the tag's leased turns."""
        return f"{self.namespace}:{{{tag}}}:leases"

    def conversation(self, tag: str) -> str:
        """The conversation marker of a conversation tag."""
        return f"{self.namespace}:{{{tag}}}:conv"

    def memory(self, conversation_id: str) -> tuple[str, str]:
        """A conversation's chat memory: its message list and its set of message ids."""
        tag = self.conversation_tag(conversation_id)
        key = hashlib.sha1(conversation_id.encode()).hexdigest()
        return f"{self.namespace}:{{{tag}}}:cm:{key}", f"{self.namespace}:{{{tag}}}:ci:{key}"

    # -- beside the turn store ---------------------------------------------------------
    def webhook_delivery(self, message_id: str) -> str:
        """The record of one webhook delivery."""
        return f"{self.namespace}:wh:d:{message_id}"

    def webhook_attempts(self, message_id: str) -> str:
        """The attempts of one webhook delivery."""
        return self.webhook_delivery(message_id) + ":attempts"

    def webhook_lock(self, message_id: str) -> str:
        """Held by the one deliverer of a webhook delivery."""
        return self.webhook_delivery(message_id) + ":lock"

    def webhook_log(self, turn_id: str) -> str:
        """The webhook deliveries of one turn."""
        return f"{self.namespace}:wh:log:{turn_id}"

    def webhook_due(self) -> str:
        """Webhook deliveries by when they are due."""
        return f"{self.namespace}:wh:due"

    def webhook_dead(self) -> str:
        """Webhook deliveries that gave up, by when."""
        return f"{self.namespace}:wh:dead"

    def webhook_check(self) -> str:
        """Turns whose notification the sweep checks, by when."""
        return f"{self.namespace}:wh:check"

    def sweep_pending(self) -> str:
        """Beat's mark of a sweep sent and not started."""
        return f"{self.namespace}:sweep:pending"

    def http_request(self, tenant: str, request_id: str) -> str:
        """The HTTP request ledger's entry of a tenant's request id."""
        hashed = hashlib.sha256(tenant.encode()).hexdigest()[:16]
        return f"{self.namespace}:http:request:{hashed}:{request_id}"

    def tag_keys(self, tag: str) -> list[str]:
        """The six per-tag keys every write script receives first, in script order."""
        return [
            self.runnable(tag),
            self.live(tag),
            self.ended(tag),
            self.waits(tag),
            self.leases(tag),
            self.conversation(tag),
        ]

    def write_keys(self, tag: str, turn_id: str, parent_id: str | None) -> list[str]:
        """Header, messages and the parent's children list (own list for a root)."""
        return [
            self.header(tag, turn_id),
            self.messages(tag, turn_id),
            self.children(tag, parent_id or turn_id),
        ]
