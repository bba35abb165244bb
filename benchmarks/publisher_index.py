"""Benchmark: the cost of one state-index update with 1, 100 and 1,000 active jobs in a scope.

Starts a private redis-server and mosquitto and a publisher-only gateway. For each size N it
stores N jobs (change records in the job management plugin's format, job order included), then
moves one job back and forth between AllowedToStart and NotAllowedToStart, one record at a
time, and waits for each new index at a subscriber. Per update it reports:

- store commands the publisher sent (INFO commandstats; the benchmark's own XADD and INFO left
  out): document reads, stream reads (XREAD) and writes;
- the publisher's own time per update (reading excluded) and the end-to-end latency from the
  record's XADD to the index arriving at a subscriber;
- the index payload size, and the bytes published per update against an index that lists every
  job inline (the default shape, the MicroDCS design's); with ``--paged`` the publisher runs with
  the opt-in paged index (``publisher.index_pages``): an update is the index and the pages it
  changed.

Baselines measured in the same run: a sequential Redis round trip (PING), an MQTT QoS 1
publish-to-subscriber round trip of a payload as big as the index, and the N+1 reads of the
reference design's rebuild (list the jobs, then read each one). It ends with the bytes published
per transition over one job's life (Store, Start, Run, Complete, Clear).

    python benchmarks/publisher_index.py [--updates 200] [--paged]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream
from redis.asyncio import Redis

from gateway.app import Gateway
from gateway.changes import ChangeRecord, Trigger
from gateway.codecs.mqtt import MqttMessage, to_mqtt
from gateway.jobstates import JobState
from gateway.testing import running, wait_until
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway.testing.services import mosquitto, redis_server
from gateway_publisher.plugin import PublisherPlugin
from gateway_publisher.service import PublisherService
from gateway_publisher.topics import STATE_INDEX_TYPE, RetainedTopics

PREFIX = "bench"
SIZES = (1, 100, 1000)
READS = {"get", "mget", "hget", "hgetall", "smembers", "zrange", "xrange", "xrevrange", "scan"}
READS |= {"xinfo|stream", "exists", "lrange"}
WRITES = {"incr", "incrby", "hset", "hdel", "set", "multi", "exec", "del", "evalsha", "eval"}
_SEQ = re.compile(rb'^\{"seq":(\d+),')


def job_order(job_id: str) -> str:
    """A job order of realistic size (~400 bytes of JSON)."""
    order = {
        "JobOrderID": job_id,
        "Description": {"Locale": "en", "Text": "rear axle, torque and camera check"},
        "WorkMasterID": [{"ID": "WM-rear-axle", "Description": {"Locale": "en", "Text": "v3"}}],
        "StartTime": "2026-04-11T14:00:00Z",
        "Priority": 0,
        "EquipmentRequirements": [{"ID": "station-7", "EquipmentUse": "tightening"}],
        "MaterialRequirements": [{"MaterialDefinitionID": "axle-M12", "Quantity": "1"}],
    }
    return json.dumps(order, separators=(",", ":"))


def job_response(job_id: str) -> str:
    """A final Job Response with ten process values (~1 KB)."""
    data = [{"ID": f"torque_{n}", "Value": 41.5 + n, "EngineeringUnits": "Nm"} for n in range(10)]
    response = {
        "JobResponseID": job_id,
        "JobOrderID": job_id,
        "StartTime": "2026-04-11T14:00:01Z",
        "EndTime": "2026-04-11T14:00:09Z",
        "JobState": [{"StateText": {"Locale": "en", "Text": "Ended"}, "StateNumber": 5}],
        "JobResponseData": data,
    }
    return json.dumps(response, separators=(",", ":"))


def record(scope: str, job_id: str, change: str, state: str, **payloads: str) -> dict[str, str]:
    """A change record's stream fields, as job management writes them (``gateway.changes``)."""
    after = JobState(state)
    previous = JobState.INITIAL
    record = ChangeRecord(
        Trigger(change), scope, job_id, after, previous, 0, after.final, **payloads
    )
    return record.fields()


@dataclass
class Bench:
    redis: Redis
    client: MqttTestClient
    service: PublisherService

    def stream(self, scope: str) -> str:
        return f"{PREFIX}:{{{scope}}}:changes"

    async def append(self, scope: str, *records: dict[str, str]) -> None:
        async with self.redis.pipeline(transaction=False) as pipeline:  # no MULTI to count
            for fields in records:
                pipeline.xadd(self.stream(scope), fields)  # type: ignore[arg-type]
            # Like the store does on a scope's first write: make it discoverable.
            pipeline.sadd(f"{PREFIX}:{{_global}}:scopes", scope)
            pipeline.xadd(f"{PREFIX}:{{_global}}:scope-discoveries", {"scope": scope})
            await pipeline.execute()

    async def commands(self) -> dict[str, int]:
        stats = await self.redis.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(entry["calls"]) for name, entry in stats.items()}


@asynccontextmanager
async def index_stream(bench: Bench, scope: str) -> AsyncIterator[ObjectReceiveStream[MqttMessage]]:
    async with bench.client.watch(f"{PREFIX}/{scope}/state-index") as messages:
        yield messages


async def next_index(messages: ObjectReceiveStream[MqttMessage], after: int) -> MqttMessage:
    """The first index with a seq above ``after`` (read from the payload's first bytes)."""
    with anyio.fail_after(30):
        while True:
            message = await messages.receive()
            match = _SEQ.match(message.payload)
            if match and int(match.group(1)) > after:
                return message


async def seed(bench: Bench, scope: str, size: int) -> int:
    """Store ``size`` jobs; the seq of the index that lists them all."""
    async with index_stream(bench, scope) as messages:
        records = [
            record(
                scope,
                f"J{n:05d}",
                "Store",
                "NotAllowedToStart.Ready",
                job_order=job_order(f"J{n:05d}"),
            )
            for n in range(size)
        ]
        await bench.append(scope, *records)
        while True:
            message = await next_index(messages, 0)
            index = json.loads(message.payload)
            if index["jobs_total"] == size:
                return int(index["seq"])


@dataclass
class UpdateCost:
    size: int
    reads: float
    stream_reads: float
    writes: float
    round_trips: float
    publisher_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    index_bytes: int
    update_bytes: float  # payload bytes published per update (paged: index and changed pages)
    whole_bytes: int  # an index listing every job inline (the default shape), same run


def whole_index_bytes(bench: Bench, scope: str) -> int:
    """Bytes of an index that lists every job inline: the baseline of ``update_bytes``."""
    term = bench.service.term
    assert term is not None
    index = term.scopes[scope].index
    return len(index.render(seq=1, epoch="0" * 16, scope=scope, published_at="t" * 24))


async def measure_updates(bench: Bench, size: int, updates: int) -> UpdateCost:
    scope = f"n{size}"
    seq = await seed(bench, scope, size)
    latencies: list[float] = []
    before, busy = await bench.commands(), bench.service.stats.busy_seconds
    stats = bench.service.stats
    bytes_before, indexes_before = stats.payload_bytes, stats.index_publishes
    index_bytes = 0
    async with index_stream(bench, scope) as messages:
        for number in range(updates):
            change, state = (
                ("Start", "AllowedToStart.Ready")
                if number % 2 == 0
                else ("RevokeStart", "NotAllowedToStart.Ready")
            )
            started = time.perf_counter()
            await bench.append(scope, record(scope, "J00000", change, state))
            message = await next_index(messages, seq)
            latencies.append(time.perf_counter() - started)
            seq = int(_SEQ.match(message.payload).group(1))  # type: ignore[union-attr]
            index_bytes = len(message.payload)
    # Counted once the PUBACKs are in: the index's own bytes come last.
    await wait_until(lambda: stats.index_publishes >= indexes_before + updates)
    update_bytes = (stats.payload_bytes - bytes_before) / updates
    after = await bench.commands()
    spent = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    spent = {name: calls for name, calls in spent.items() if calls}
    ordered = sorted(latencies)
    # A MULTI ... EXEC block is one round trip (the commands queued in it are not); every other
    # command, a script included, is one.
    round_trips = sum(spent.get(name, 0) for name in READS | WRITES | {"xread"})
    if spent.get("multi", 0):
        round_trips -= spent.get("multi", 0) + sum(
            spent.get(name, 0) for name in ("hset", "hdel", "set")
        )
    return UpdateCost(
        size=size,
        reads=sum(spent.get(name, 0) for name in READS) / updates,
        stream_reads=spent.get("xread", 0) / updates,
        writes=sum(spent.get(name, 0) for name in WRITES) / updates,
        round_trips=round_trips / updates,
        publisher_ms=(bench.service.stats.busy_seconds - busy) / updates * 1000,
        latency_p50_ms=ordered[len(ordered) // 2] * 1000,
        latency_p99_ms=ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        index_bytes=index_bytes,
        update_bytes=update_bytes,
        whole_bytes=whole_index_bytes(bench, scope),
    )


async def redis_round_trip_ms(redis: Redis, count: int = 2000) -> float:
    started = time.perf_counter()
    for _ in range(count):
        await redis.ping()
    return (time.perf_counter() - started) / count * 1000


async def mqtt_round_trip_ms(client: MqttTestClient, size: int, count: int = 200) -> float:
    """QoS 1 publish of ``size`` bytes until a subscriber (the same client) receives it."""
    topic = f"{PREFIX}/baseline/{size}"
    payload = b"x" * size
    async with client.watch(topic) as messages:
        started = time.perf_counter()
        for _ in range(count):
            await client.publish(MqttMessage(topic=topic, payload=payload, qos=1))
            with anyio.fail_after(10):
                await messages.receive()
    return (time.perf_counter() - started) / count * 1000


async def rebuild_baseline_ms(redis: Redis, size: int) -> float:
    """The reference design's rebuild: list the scope's jobs, then read each job (N+1 reads)."""
    keys = [f"baseline:{{n{size}}}:job:J{n:05d}" for n in range(size)]
    index_key = f"baseline:{{n{size}}}:jobs"
    async with redis.pipeline(transaction=False) as pipeline:
        for number, key in enumerate(keys):
            pipeline.set(key, job_order(key) + job_response(key))
            pipeline.zadd(index_key, {key: number})
        await pipeline.execute()
    rounds = max(3, 300 // size)
    started = time.perf_counter()
    for _ in range(rounds):
        for member in await redis.zrange(index_key, 0, -1):
            await redis.get(str(member))
    return (time.perf_counter() - started) / rounds * 1000


async def lifecycle_bytes(bench: Bench) -> list[tuple[str, int, int]]:
    """(transition, bytes of payload published, of which the index) over one job's life."""
    scope = "life"
    await seed(bench, scope, 10)  # nine other jobs in the index
    steps = [
        ("Store", "NotAllowedToStart.Ready", {"job_order": job_order("L1")}),
        ("Start", "AllowedToStart.Ready", {}),
        ("Run", "Running", {}),
        ("Complete", "Ended.Completed", {"job_response": job_response("L1")}),
        ("Clear", "EndState", {}),
    ]
    published: list[tuple[str, int, int]] = []
    seq = 0
    async with index_stream(bench, scope) as messages:
        seq = int(_SEQ.match((await next_index(messages, 0)).payload).group(1))  # type: ignore[union-attr]
        for change, state, payloads in steps:
            stats = bench.service.stats
            before, indexes = stats.payload_bytes, stats.index_publishes
            await bench.append(scope, record(scope, "L1", change, state, **payloads))
            message = await next_index(messages, seq)
            seq = int(_SEQ.match(message.payload).group(1))  # type: ignore[union-attr]
            # Counted once the PUBACK is in: the index's own bytes come last.
            await wait_until(lambda: stats.index_publishes > indexes)  # noqa: B023
            published.append((change, stats.payload_bytes - before, len(message.payload)))
    return published


def attribute_overhead() -> int:
    """Bytes of the CloudEvent attributes (user properties) and topic of one retained message."""
    topics = RetainedTopics(PREFIX, "urn:station-gateway:bench", 172_800)
    message = to_mqtt(topics.event(STATE_INDEX_TYPE, "cell1", b"{}"), topics.state_index("cell1"))
    properties = sum(len(name) + len(value) + 5 for name, value in message.user_properties)
    return properties + len(message.topic) + len(message.content_type or "") + 10


async def benchmark(updates: int, paged: bool) -> None:
    redis_process, broker = redis_server().start(), mosquitto().start()
    redis_url = f"redis://127.0.0.1:{redis_process.port}/0"
    mqtt_url = f"mqtt://127.0.0.1:{broker.port}"
    plugin = PublisherPlugin()
    environ = {
        "GATEWAY_PLUGINS_BLOCK": "sfc,jobs,publisher,simulator,mqtt-equipment,msgpack-rpc",
        "GATEWAY_GATEWAY_ROLE": "publisher",
        "GATEWAY_GATEWAY_INSTANCE_ID": "bench",
        "GATEWAY_GATEWAY_LOG_LEVEL": "WARNING",
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": PREFIX,
        "GATEWAY_PUBLISHER_TOPIC_PREFIX": PREFIX,
        "GATEWAY_PUBLISHER_INDEX_PAGES": "true" if paged else "false",
    }
    try:
        gateway = Gateway.from_environment(None, environ, extra_plugins={"publisher-bench": plugin})
        async with (
            Redis.from_url(redis_url, decode_responses=True) as redis,
            running(gateway),
            connect_test_client(mqtt_url) as client,
        ):
            bench = Bench(redis, client, plugin.services[0])
            await wait_until(lambda: bench.service.term is not None)
            costs = [await measure_updates(bench, size, updates) for size in SIZES]
            redis_ms = await redis_round_trip_ms(redis)
            mqtt_ms = {
                cost.size: await mqtt_round_trip_ms(client, cost.index_bytes) for cost in costs
            }
            rebuild_ms = {size: await rebuild_baseline_ms(redis, size) for size in SIZES}
            life = await lifecycle_bytes(bench)
    finally:
        broker.close()
        redis_process.close()
    report(costs, redis_ms, mqtt_ms, rebuild_ms, life, paged)


def report(
    costs: list[UpdateCost],
    redis_ms: float,
    mqtt_ms: dict[int, float],
    rebuild_ms: dict[int, float],
    life: list[tuple[str, int, int]],
    paged: bool,
) -> None:
    print(f"baseline: Redis round trip (PING) {redis_ms:.3f} ms")
    header = (
        "jobs  reads/upd  xread/upd  writes/upd  trips/upd  publisher ms  e2e p50 ms  "
        "e2e p99 ms  index bytes  MQTT rtt ms  N+1 rebuild ms  rebuild/publisher"
    )
    print(header)
    for cost in costs:
        row: tuple[Any, ...] = (
            cost.size,
            cost.reads,
            cost.stream_reads,
            cost.writes,
            cost.round_trips,
            cost.publisher_ms,
            cost.latency_p50_ms,
            cost.latency_p99_ms,
            cost.index_bytes,
            mqtt_ms[cost.size],
            rebuild_ms[cost.size],
            rebuild_ms[cost.size] / cost.publisher_ms,
        )
        print(
            "{:>4}  {:>9.2f}  {:>9.2f}  {:>10.2f}  {:>9.2f}  {:>12.3f}  {:>10.3f}  "
            "{:>10.3f}  {:>11,}  {:>11.3f}  {:>14.3f}  {:>16.1f}x".format(*row)
        )
    ratio = costs[-1].publisher_ms / costs[0].publisher_ms
    print(f"publisher time, {costs[-1].size} jobs : {costs[0].size} job = {ratio:.1f} : 1")
    what = "the index and the pages it changed" if paged else "the index, every job inline"
    print(f"bytes published per update ({what}), against an index")
    print("that lists every job inline (the default shape), measured in the same run:")
    for cost in costs:
        print(
            f"  {cost.size:>5} jobs: {cost.update_bytes:>9,.0f} B per update, whole index "
            f"{cost.whole_bytes:>9,} B, ratio {cost.update_bytes / max(cost.whole_bytes, 1):.3f}"
        )
    overhead = attribute_overhead()
    print(f"bytes per transition, one job among 10 (payload; each message adds ~{overhead} B")
    print("of topic and CloudEvent user properties; the rest: pages, order and result):")
    for change, total, index in life:
        other = total - index
        print(f"  {change:<9} {total:>6,} B  (state index {index:,} B, the rest {other:,} B)")
    entry = statistics.mean(cost.index_bytes / cost.size for cost in costs[1:])
    per = "a page summary per page" if paged else "its entry"
    print(f"  the state index grows by ~{entry:.0f} B per listed job ({per})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--updates", type=int, default=200, help="updates measured per size")
    parser.add_argument(
        "--paged", action="store_true", help="the opt-in paged index (publisher.index_pages)"
    )
    args = parser.parse_args()
    anyio.run(benchmark, args.updates, args.paged)


if __name__ == "__main__":
    main()
