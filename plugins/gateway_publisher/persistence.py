"""The publisher's own state in the store: per scope a cursor, the index, ``seq`` and a fence.

Keys, all in the scope's hash slot (so one script covers them on Redis Cluster too)::

    {p}:{scope}:publisher:cursor    STRING  id of the last change record applied
    {p}:{scope}:publisher:index     HASH    job order id -> index entry, as of the cursor
    {p}:{scope}:publisher:seq       STRING  highest state-index sequence number handed out or
                                            reserved: no index ever carried a higher one
    {p}:{scope}:publisher:fence     STRING  fencing token of the term that owns the scope
    {p}:{scope}:publisher:retained  HASH    "order/<id>" | "result/<id>" -> the retained payload

The cursor, the index and the retained payloads change together in one script, so after any
crash the stored index is exactly the result of the records up to the stored cursor: a restart
resumes there, skipping nothing and applying nothing twice.

``seq`` is persisted *before* the index that carries it is published, so a number is never
handed out twice, not even by a publisher that died between publishing and committing. That
costs no round trip of its own: each commit that follows an index with ``seq`` n also
reserves n + 1 (``seq`` := n + 1), the number the term's next index uses, so a batch is one
script (the commit) however its index changed. Only an index published without a commit after
it (a term's first of a scope, a heal) or after a failure needs a number beyond the reserved
one: ``reserve`` (one script) hands it out and reserves the one after it. A number reserved
and never used leaves a gap only where the epoch changes anyway (the next term starts above
it), so within one epoch the MES still sees consecutive numbers.

Fencing: every leadership term draws a token from a global counter (``{p}:publisher:fence``)
and claims each scope by writing it to the scope's ``fence`` key, unless a higher one is there.
Every ``seq`` and every commit checks, in the same script, that the scope's fence is still the
term's: a publisher that wakes from a long pause (SIGSTOP, a VM migration) after another one
took over finds a higher token and writes nothing (``Fenced``). A fence key that is *gone*
means the store lost the publisher's state (a Redis restarted without persistence):
``StoreLost``, and the publisher starts over from what the store still holds.

``retained`` mirrors what the publisher keeps on the broker, so that it can publish it again
when the broker lost its retained messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import cast

from redis.commands.core import AsyncScript

from gateway.errors import GatewayError
from gateway.store import Store
from gateway_publisher.batch import Batch
from gateway_publisher.index import PAGE_SIZE, IndexEntry, JobIndex

START = "0-0"  # a stream id before every entry

# KEYS[1] fence; ARGV[1] the term's token. 1: claimed (or already ours), 0: a higher one holds it.
_CLAIM = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local mine = tonumber(ARGV[1])
if current > mine then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""
# KEYS[1] fence, KEYS[2] seq; ARGV[1] token, ARGV[2] the number wanted (the term's next one),
# ARGV[3] at least this (the last one published, should the store have forgotten it).
# The number handed out: the wanted one unless the store holds a higher one (reserved or handed
# out by an earlier term): the next above that; the one after it is reserved. 0 when fenced,
# -1 when the fence is gone.
_RESERVE = """
local fence = redis.call('GET', KEYS[1])
if fence == false then return -1 end
if fence ~= ARGV[1] then return 0 end
local seq = math.max(tonumber(ARGV[2]), tonumber(redis.call('GET', KEYS[2]) or '0') + 1,
                     tonumber(ARGV[3]) + 1)
redis.call('SET', KEYS[2], seq + 1)
return seq
"""
# KEYS[1] fence, KEYS[2] index, KEYS[3] cursor, KEYS[4] retained, KEYS[5] seq; ARGV[1] token,
# ARGV[2] cursor, ARGV[3] JSON {"set": {job: entry}, "del": [job], "keep": {topic: payload},
# "drop": [topic]}, ARGV[4] the seq to reserve (0: none; the stored one never goes down).
# 1: committed, 0: fenced, -1: the fence is gone.
_COMMIT = """
local fence = redis.call('GET', KEYS[1])
if fence == false then return -1 end
if fence ~= ARGV[1] then return 0 end
local changes = cjson.decode(ARGV[3])
for job, entry in pairs(changes['set']) do redis.call('HSET', KEYS[2], job, entry) end
for _, job in ipairs(changes['del']) do redis.call('HDEL', KEYS[2], job) end
for topic, payload in pairs(changes['keep']) do redis.call('HSET', KEYS[4], topic, payload) end
for _, topic in ipairs(changes['drop']) do redis.call('HDEL', KEYS[4], topic) end
redis.call('SET', KEYS[3], ARGV[2])
local reserve = tonumber(ARGV[4])
if reserve > tonumber(redis.call('GET', KEYS[5]) or '0') then
  redis.call('SET', KEYS[5], reserve)
end
return 1
"""


class Fenced(GatewayError):
    """Another publisher term holds the scope now: this one must stop writing."""


class StoreLost(GatewayError):
    """The publisher's state of a scope vanished from the store (it lost its data)."""


@dataclass
class ScopeState:
    """A scope as the publisher holds it: where it is in the stream and what it published."""

    scope: str
    cursor: str = START
    seq: int = 0  # the last number handed out (by this term; as loaded: the stored one)
    index: JobIndex = field(default_factory=JobIndex)
    stored: bool = False  # the publisher committed this scope before (not a new scope)
    reserved: int = 0  # the stored ``seq`` as this term wrote it: numbers up to it are its own

    def committed(self, batch: Batch, reserved: int) -> None:
        """Move past the batch, once it is published and committed (``reserved``: the seq
        the commit reserved, 0: none)."""
        if batch.last_id is not None:
            self.cursor = batch.last_id
            self.stored = True
            self.reserved = max(self.reserved, reserved)

    @property
    def to_reserve(self) -> int:
        """What a commit now reserves: the term's next number, unless reserved already."""
        wanted = self.seq + 1
        return wanted if wanted > self.reserved else 0


class PublisherStore:
    """The publisher's keys of every scope, written only under the term's fencing token."""

    def __init__(self, store: Store, fence: int = 0, page_size: int = PAGE_SIZE) -> None:
        self.store = store
        self.fence = str(fence)
        self.page_size = page_size
        client = store.client
        self._claim: AsyncScript = client.register_script(_CLAIM)
        self._reserve: AsyncScript = client.register_script(_RESERVE)
        self._commit: AsyncScript = client.register_script(_COMMIT)

    def key(self, scope: str, name: str) -> str:
        return self.store.keys.scoped(scope, "publisher", name)

    async def draw_fence(self) -> int:
        """A fencing token higher than every earlier term's."""
        token = int(await self.store.client.incr(self.store.keys.global_key("publisher", "fence")))
        self.fence = str(token)
        return token

    async def claim(self, scope: str) -> None:
        """Make the scope this term's; ``Fenced`` when a later term already claimed it."""
        if not await self._claim(keys=[self.key(scope, "fence")], args=[self.fence]):
            raise Fenced(f"scope {scope} belongs to a later publisher term")

    async def load(self, scope: str) -> ScopeState:
        """The scope's committed state: three reads in one MULTI, a consistent snapshot."""
        async with self.store.client.pipeline(transaction=True) as pipeline:
            pipeline.get(self.key(scope, "cursor"))
            pipeline.get(self.key(scope, "seq"))
            pipeline.hgetall(self.key(scope, "index"))
            cursor, seq, stored = await pipeline.execute()
        entries = cast(dict[str, str], stored)  # decode_responses: text
        index = JobIndex(
            {job_id: IndexEntry.from_stored(job_id, text) for job_id, text in entries.items()},
            page_size=self.page_size,
        )
        number = int(seq or 0)
        return ScopeState(
            scope, cursor or START, number, index, stored=cursor is not None, reserved=number
        )

    async def retained(self, scope: str) -> dict[str, str]:
        """What the publisher keeps retained for the scope: ``kind/id`` -> payload."""
        return cast(dict[str, str], await self.store.client.hgetall(self.key(scope, "retained")))

    async def next_seq(self, state: ScopeState, at_least: int = 0) -> int:
        """Hand out the scope's next sequence number, persisted before it is published and
        higher than ``at_least`` (the last one published, when the store may have forgotten
        it): the one the term's last commit reserved costs no round trip; any other is
        reserved first (``reserve``)."""
        wanted = max(state.seq, at_least) + 1
        if wanted > state.reserved:
            wanted = await self.reserve(state.scope, wanted, at_least)
            state.reserved = wanted + 1
        state.seq = wanted  # handed out: a retry after a failed publish takes the next one
        return wanted

    async def reserve(self, scope: str, wanted: int, at_least: int = 0) -> int:
        """``wanted``, or the next above what the store holds if that is higher (an earlier
        term's), persisted with the one after it; ``Fenced`` / ``StoreLost``."""
        keys = [self.key(scope, "fence"), self.key(scope, "seq")]
        seq = int(await self._reserve(keys=keys, args=[self.fence, wanted, at_least]))
        _check(scope, seq)
        return seq

    async def commit(self, batch: Batch, reserve: int = 0) -> None:
        """The batch's index changes, retained payloads and last record id, atomically, and
        ``reserve`` (0: nothing) as the scope's stored ``seq`` unless that is higher already."""
        if batch.last_id is None:
            return
        scope = batch.scope
        changes = {
            "set": {job: entry.stored() for job, entry in batch.changes.items() if entry},
            "del": [job for job, entry in batch.changes.items() if entry is None],
            "keep": {f"{k}/{job}": p.decode() for (k, job), p in batch.topics.items() if p},
            "drop": [f"{k}/{job}" for (k, job), p in batch.topics.items() if p is None],
        }
        names = ("fence", "index", "cursor", "retained", "seq")
        keys = [self.key(scope, name) for name in names]
        args: list[str | int] = [self.fence, batch.last_id, _json(changes), reserve]
        outcome = int(await self._commit(keys=keys, args=args))
        _check(scope, outcome)


def _check(scope: str, outcome: int) -> None:
    if outcome == 0:
        raise Fenced(f"scope {scope} belongs to a later publisher term")
    if outcome < 0:
        raise StoreLost(f"the publisher's state of scope {scope} is gone from the store")


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
