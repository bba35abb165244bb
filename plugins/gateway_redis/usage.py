"""``gateway store usage``: what the store holds, by kind of key, and what an ended job costs.

Every key of the gateway is ``{prefix}:{<scope>}:<name>...``. Keys are grouped by *kind*: the
name without its last part (``rt:exec:J1`` -> ``rt:exec``, ``dedupe:<digest>`` ->
``dedupe``; a one-part name is its own kind: ``changes``). For each kind: how many keys, how
many expire (they have a TTL: what a retention setting keeps), their bytes (``MEMORY USAGE`` of
up to ``SAMPLE`` keys of the kind, scaled to all) and the longest time to live left.

**An ended job** is what the retention settings keep once a job has ended or been cleared:
keys with a TTL. The jobs held so are the last name parts that appear in two kinds or more of
expiring keys (a job has its trace, its engine state, its recipe snapshot... under its id;
a digest or a one-off name appears in one kind only). The cost of one is every expiring key and
byte divided by the jobs held (the de-duplication markers of the MES's calls and the events
kept for late waiters included), kept for as long as the longest TTL: at ``r`` jobs a second
the store holds about ``r * kept_seconds * bytes`` for them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

SAMPLE = 200  # keys of a kind whose bytes are measured
BATCH = 1000  # keys per pipeline
# Settings (``section.key``) that say how long something is kept, printed with the usage.
RETENTION_SETTINGS = (
    "redis.dedupe_ttl_seconds",
    "runtime.ended_ttl_seconds",
    "ui.trace_kept_seconds",
    "publisher.retained_ttl_seconds",
    "redis.change_stream_maxlen",
)


@dataclass
class KindUsage:
    kind: str
    keys: int = 0
    expiring: int = 0
    bytes: int = 0
    ttl_most: int | None = None  # seconds, of the expiring keys


@dataclass
class Usage:
    used_memory: int
    maxmemory: int | None  # None: not readable (CONFIG refused)
    policy: str | None
    kinds: list[KindUsage] = field(default_factory=list)
    jobs_held: int = 0  # ended jobs whose keys expire
    retention: dict[str, Any] = field(default_factory=dict)

    @property
    def keys(self) -> int:
        return sum(kind.keys for kind in self.kinds)

    @property
    def expiring_keys(self) -> int:
        return sum(kind.expiring for kind in self.kinds)

    @property
    def expiring_bytes(self) -> int:
        return sum(
            round(kind.bytes * kind.expiring / kind.keys) for kind in self.kinds if kind.keys
        )

    @property
    def kept_seconds(self) -> int:
        return max((kind.ttl_most or 0 for kind in self.kinds), default=0)

    def per_job(self) -> dict[str, Any] | None:
        if not self.jobs_held:
            return None
        return {
            "keys": round(self.expiring_keys / self.jobs_held, 1),
            "bytes": round(self.expiring_bytes / self.jobs_held),
            "kept_seconds": self.kept_seconds,
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "used_memory": self.used_memory,
            "maxmemory": self.maxmemory,
            "maxmemory_policy": self.policy,
            "keys": self.keys,
            "expiring_keys": self.expiring_keys,
            "kinds": [kind.__dict__ for kind in self.kinds],
            "ended_jobs_held": self.jobs_held,
            "per_job": self.per_job(),
            "retention": self.retention,
        }


def kind_of(key: str, prefix: str) -> tuple[str, str] | None:
    """``(kind, last name part)`` of a gateway key; ``None`` for a key of someone else."""
    head = prefix + ":{"
    if not key.startswith(head):
        return None
    _, brace, name = key[len(head) :].partition("}:")
    if not brace or not name:
        return None
    parts = name.split(":")
    if len(parts) == 1:
        return name, name
    return ":".join(parts[:-1]), parts[-1]


async def measure(client: Redis, prefix: str) -> Usage:
    """Scan every key under ``prefix`` (``SCAN``: the server keeps serving meanwhile)."""
    names: dict[str, list[str]] = defaultdict(list)  # kind -> keys
    lasts: dict[str, str] = {}  # key -> its last name part
    async for key in client.scan_iter(match=f"{prefix}:{{*", count=BATCH):
        found = kind_of(str(key), prefix)
        if found is not None:
            names[found[0]].append(str(key))
            lasts[str(key)] = found[1]
    kinds: list[KindUsage] = []
    holders: dict[str, set[str]] = defaultdict(set)  # last name part -> expiring kinds with it
    for kind, keys in sorted(names.items()):
        ttls = await _pipelined(client, "pttl", keys)
        usage = KindUsage(kind, keys=len(keys))
        expiring = [(key, ttl) for key, ttl in zip(keys, ttls, strict=True) if ttl and ttl > 0]
        usage.expiring = len(expiring)
        if expiring:
            usage.ttl_most = round(max(ttl for _, ttl in expiring) / 1000)
        for key, _ in expiring:
            holders[lasts[key]].add(kind)
        sample = keys[:: max(1, len(keys) // SAMPLE)][:SAMPLE]
        sizes = [size for size in await _pipelined(client, "memory_usage", sample) if size]
        usage.bytes = round(statistics.fmean(sizes) * len(keys)) if sizes else 0
        kinds.append(usage)
    memory = await client.info("memory")
    maxmemory, policy = await memory_budget(client)
    return Usage(
        used_memory=int(memory["used_memory"]),
        maxmemory=maxmemory,
        policy=policy,
        kinds=kinds,
        jobs_held=sum(1 for found in holders.values() if len(found) >= 2),
    )


async def _pipelined(client: Redis, command: str, keys: list[str]) -> list[Any]:
    results: list[Any] = []
    for start in range(0, len(keys), BATCH):
        async with client.pipeline(transaction=False) as pipe:
            for key in keys[start : start + BATCH]:
                getattr(pipe, command)(key)
            results.extend(await pipe.execute(raise_on_error=False))
    return [None if isinstance(result, Exception) else result for result in results]


async def memory_budget(client: Redis) -> tuple[int | None, str | None]:
    """``maxmemory`` and its policy; ``(None, None)`` when CONFIG is not allowed (managed
    servers, ACL)."""
    try:
        # One parameter a call: Redis before 7 takes no more.
        maxmemory = cast(Mapping[str, str], await client.config_get("maxmemory"))
        policy = cast(Mapping[str, str], await client.config_get("maxmemory-policy"))
    except ResponseError:
        return None, None
    return int(maxmemory.get("maxmemory", 0)), policy.get("maxmemory-policy")


def render(usage: Usage, address: str) -> str:
    """The usage as text for people."""
    lines = [
        f"store {address}: {_size(usage.used_memory)} used, {_budget_text(usage)}",
        f"{usage.keys} keys, {usage.expiring_keys} of them expire",
        "",
        f"{'kind':<28} {'keys':>9} {'expire':>9} {'bytes':>10} {'TTL left':>10}",
    ]
    for kind in sorted(usage.kinds, key=lambda k: -k.bytes):
        ttl = "-" if kind.ttl_most is None else f"{kind.ttl_most} s"
        lines.append(
            f"{kind.kind:<28} {kind.keys:>9} {kind.expiring:>9} {_size(kind.bytes):>10} {ttl:>10}"
        )
    lines.append("")
    per_job = usage.per_job()
    if per_job is None:
        lines.append("no ended job held (nothing kept by a retention setting)")
    else:
        lines.append(
            f"an ended job: {per_job['keys']} keys, {_size(per_job['bytes'])}, kept up to "
            f"{per_job['kept_seconds']} s ({usage.jobs_held} ended jobs held); at r jobs/s "
            f"the store holds about r x {per_job['kept_seconds']} x {_size(per_job['bytes'])}"
        )
    if usage.retention:
        settings = ", ".join(f"{key} = {value}" for key, value in usage.retention.items())
        lines.append(f"retention: {settings}")
    return "\n".join(lines)


def _budget_text(usage: Usage) -> str:
    if usage.maxmemory is None:
        return "memory budget unknown (CONFIG GET refused)"
    if usage.maxmemory == 0:
        return "no memory budget (maxmemory 0)"
    return f"budget {_size(usage.maxmemory)} ({usage.policy})"


def _size(count: int) -> str:
    if count >= 1 << 20:
        return f"{count / (1 << 20):.1f} MiB"
    if count >= 1 << 10:
        return f"{count / (1 << 10):.1f} KiB"
    return f"{count} B"
