"""Benchmark: jobs/s and steps/s for 200 scopes on a 3-master Redis Cluster next to one node.

Both in the same run, on private servers (``gateway.testing``): a redis-server, and a Redis
Cluster of 3 masters (no replicas) with Debian's redis-server 7. For each, one gateway (job
management + SFC engine) with equipment that answers every command at once, in-process, and a
job of a linear recipe in each of ``--scopes`` scopes, all started at once over MQTT. Prints
jobs/s and steps/s for each and the Cluster's ratio to the single node, with the load average
(the machine is shared: the figures are only comparable within one run).

The Cluster reads the scopes' work streams with pipelined non-blocking reads polled every
``redis.cluster_poll_ms`` (one node: one blocking XREADGROUP over all of them), so with one
gateway the Cluster's three nodes buy capacity, not single-step latency.

    python benchmarks/redis_cluster.py [--scopes 200] [--steps 5]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from gateway.app import Gateway
from gateway.equipment import EquipmentCommand, EquipmentDriver, EquipmentReply
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.testing import running
from gateway.testing.mqtt import connect_test_client
from gateway.testing.redis_ha import cluster_deployment
from gateway.testing.services import mosquitto, redis_server
from gateway_jobs.testing import JobsMes, job_order, work_master
from gateway_sfc.model import DATASCHEMA
from gateway_sfc.testing import linear_recipe


@dataclass
class InstantEquipment:
    """Answers every command at once; counts the replies per job."""

    name: str = "instant"
    gateway: Gateway | None = None
    replied: Counter[str] = field(default_factory=Counter)

    def serves(self, command: EquipmentCommand) -> bool:
        return True

    async def send(self, command: EquipmentCommand) -> None:
        assert self.gateway is not None
        reply = EquipmentReply(command.correlation_id, {"ok": True}, scope=command.scope)
        await self.gateway.equipment.reply(reply)
        self.replied[command.job_order_id] += 1

    @hookimpl
    def gateway_register_equipment_drivers(
        self, register: Callable[[EquipmentDriver], None], settings: Settings, gateway: Gateway
    ) -> None:
        self.gateway = gateway
        register(self)


async def run(redis_url: str, mqtt_url: str, prefix: str, scopes: int, steps: int) -> float:
    """Seconds from starting one job in each scope until every job has done every step."""
    equipment = InstantEquipment()
    environ = {
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": prefix,
        "GATEWAY_GATEWAY_INSTANCE_ID": prefix,
        "GATEWAY_GATEWAY_LOG_LEVEL": "WARNING",
        "GATEWAY_JOBS_TOPIC_PREFIX": prefix,
    }
    gateway = Gateway.from_environment(None, environ, extra_plugins={"bench": equipment})
    async with running(gateway), connect_test_client(mqtt_url) as client:
        lines = [JobsMes(client, prefix, f"cell{number}") for number in range(scopes)]
        limiter = anyio.CapacityLimiter(50)
        master = work_master("WM", linear_recipe(steps), dataschema=DATASCHEMA)

        async def configure(line: JobsMes) -> None:  # Work Masters are per scope
            async with limiter:
                await line.configure("workmaster", master)

        async with anyio.create_task_group() as tasks:
            for line in lines:
                tasks.start_soon(configure, line)
        started = time.perf_counter()

        async def start(number: int) -> None:
            async with limiter:
                order = job_order(f"J{number}", work_masters=["WM"])
                await lines[number].store(order, "StoreAndStart")

        async with anyio.create_task_group() as tasks:
            for number in range(scopes):
                tasks.start_soon(start, number)
        with anyio.fail_after(900):
            while sum(equipment.replied.values()) < scopes * steps:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        return time.perf_counter() - started


async def benchmark(scopes: int, steps: int) -> None:
    broker = mosquitto().start()
    single = redis_server().start()
    cluster = cluster_deployment(masters=3, replicas=0).start()
    mqtt_url = f"mqtt://127.0.0.1:{broker.port}"
    try:
        figures = {
            "single node": await run(
                f"redis://127.0.0.1:{single.port}/0", mqtt_url, "single", scopes, steps
            ),
            "3-master Cluster": await run(cluster.url, mqtt_url, "cluster", scopes, steps),
        }
    finally:
        cluster.close()
        single.close()
        broker.close()
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"{scopes} scopes, one job of {steps} steps each, one gateway; load average {load}")
    for name, seconds in figures.items():
        print(
            f"{name:>17}: {scopes / seconds:7.1f} jobs/s {scopes * steps / seconds:8.1f} steps/s"
            f"  ({seconds:.2f} s)"
        )
    ratio = figures["single node"] / figures["3-master Cluster"]
    print(f"Cluster : single node = {ratio:.2f} : 1 (throughput)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scopes", type=int, default=200)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    anyio.run(benchmark, args.scopes, args.steps)


if __name__ == "__main__":
    main()
