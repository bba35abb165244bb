"""In-process benchmark: SFC engine steps per second and step-transition latency, on real Redis.

IN-PROCESS: the equipment answers through the driver API inside the gateway's process, so
there is no MQTT hop, no de-duplication and no reply parsing, and the baseline is Redis PING.
It isolates the engine's Redis work; it says nothing about the step path a station sees. For
that, ``benchmarks/step_path.py`` runs the gateway as a process with equipment over MQTT and
compares with raw MQTT request/reply.

Starts a private redis-server and mosquitto, one gateway (job management + SFC engine) and
equipment that answers every command at once (in-process, through the driver API), then:

1. raw Redis: sequential round trips per second (PING, same client library) — the baseline;
2. latency: one job of a linear recipe, alone: the time from the equipment's reply to the next
   command of the job (one step transition: reply -> stream -> CAS -> stream -> send);
3. throughput: many jobs at once: steps per second over the whole run.

Prints the figures, the ratio to the Redis baseline and the Redis commands spent per step.

    python benchmarks/sfc_steps.py [--steps 30] [--jobs 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from redis.asyncio import Redis

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand, EquipmentDriver, EquipmentReply
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.testing import running
from gateway.testing.mqtt import connect_test_client
from gateway.testing.services import mosquitto, redis_server
from gateway_jobs.testing import JobsMes, job_order, work_master
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.testing import linear_recipe


@dataclass
class InstantEquipment:
    """Answers at once and notes when each job's commands arrive and are answered."""

    name: str = "instant"
    gateway: Gateway | None = None
    received: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    replied: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def serves(self, command: EquipmentCommand) -> bool:
        return True

    async def send(self, command: EquipmentCommand) -> None:
        self.received[command.job_order_id].append(time.perf_counter())
        assert self.gateway is not None
        reply = EquipmentReply(command.correlation_id, {"ok": True}, scope=command.scope)
        self.replied[command.job_order_id].append(time.perf_counter())
        await self.gateway.equipment.reply(reply)

    def transition_latencies(self) -> list[float]:
        latencies = []
        for job, replies in self.replied.items():
            arrivals = self.received[job]
            latencies += [arrivals[i + 1] - replies[i] for i in range(len(arrivals) - 1)]
        return latencies

    @hookimpl
    def gateway_register_equipment_drivers(
        self, register: Callable[[EquipmentDriver], None], settings: Settings, gateway: Gateway
    ) -> None:
        self.gateway = gateway
        register(self)


async def redis_round_trips(url: str, seconds: float = 2.0) -> float:
    async with Redis.from_url(url) as client:
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            await client.ping()
            count += 1
        return count / (time.perf_counter() - started)


async def redis_commands(url: str) -> int:
    async with Redis.from_url(url, decode_responses=True) as client:
        stats = await client.info("commandstats")
        return sum(int(entry["calls"]) for entry in stats.values())


async def run_jobs(mes: JobsMes, first: int, count: int, steps: int) -> None:
    async with anyio.create_task_group() as tasks:
        for number in range(first, first + count):
            order = job_order(f"J{number}", work_masters=["WM"])
            tasks.start_soon(mes.store, order, "StoreAndStart")


async def wait_done(equipment: InstantEquipment, jobs: range, steps: int) -> None:
    with anyio.fail_after(600):
        while any(len(equipment.replied[f"J{n}"]) < steps for n in jobs):  # noqa: ASYNC110
            await anyio.sleep(0.005)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def benchmark(steps: int, jobs: int) -> None:
    redis = redis_server().start()
    broker = mosquitto().start()
    try:
        redis_url = f"redis://127.0.0.1:{redis.port}/0"
        mqtt_url = f"mqtt://127.0.0.1:{broker.port}"
        rtt_per_second = await redis_round_trips(redis_url)
        equipment = InstantEquipment()
        environ = {
            "GATEWAY_MQTT_URL": mqtt_url,
            "GATEWAY_REDIS_URL": redis_url,
            "GATEWAY_GATEWAY_INSTANCE_ID": "bench",
            "GATEWAY_GATEWAY_LOG_LEVEL": "WARNING",
            "GATEWAY_JOBS_TOPIC_PREFIX": "bench",
        }
        gateway = Gateway.from_environment(None, environ, extra_plugins={"bench": equipment})
        async with running(gateway), connect_test_client(mqtt_url) as client:
            mes = JobsMes(client, "bench", "cell")
            await mes.configure(
                "workmaster", work_master("WM", linear_recipe(steps), dataschema=DATASCHEMA)
            )

            await run_jobs(mes, 0, 1, steps)  # latency: one job alone
            await wait_done(equipment, range(1), steps)
            latencies = equipment.transition_latencies()

            calls_before = await redis_commands(redis_url)
            started = time.perf_counter()
            await run_jobs(mes, 1, jobs, steps)  # throughput: many jobs at once
            await wait_done(equipment, range(1, jobs + 1), steps)
            elapsed = time.perf_counter() - started
            calls = await redis_commands(redis_url) - calls_before - 1
    finally:
        broker.close()
        redis.close()

    steps_per_second = jobs * steps / elapsed
    print(f"redis round trips/s (sequential PING): {rtt_per_second:,.0f}")
    p50, p99 = (percentile(latencies, share) * 1e3 for share in (0.5, 0.99))
    mean = statistics.mean(latencies) * 1e3
    print(
        f"one job, {steps} steps: step transition p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
        f"mean {mean:.2f} ms"
    )
    print(
        f"{jobs} jobs x {steps} steps at once: {steps_per_second:,.0f} steps/s "
        f"({elapsed:.2f} s; job start over MQTT included)"
    )
    print(f"ratio steps/s : redis round trips/s = 1 : {rtt_per_second / steps_per_second:.1f}")
    print(f"redis commands per step: {calls / (jobs * steps):.1f} (job management included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=40)
    args = parser.parse_args()
    anyio.run(benchmark, args.steps, args.jobs)


if __name__ == "__main__":
    main()
