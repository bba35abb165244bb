"""Chaos: two gateway processes share 200 jobs while one or the other is SIGKILLed and restarted.

Every job must end exactly once, Completed, with every action's result; every action must have
been dispatched with attempt 1 only (a re-dispatch after a crash repeats the same correlation id,
which is what the at-least-once contract with the equipment allows). An SFC chart on every
Redis deployment, and the same work as a sequence (100 jobs, one Redis): the runtime is shared,
so is what it must survive.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import pytest

from gateway.changes import ChangeRecord
from gateway.cloudevents import CloudEvent
from gateway.jobstates import TopState
from gateway.testing import wait_until
from gateway.testing.mqtt import connect_test_client
from gateway.testing.processes import GatewayProcess
from gateway.testing.redis_ha import redis_client
from gateway_jobs.testing import JobsMes, job_order, work_master
from gateway_sequence import DATASCHEMA as SEQUENCE
from gateway_sfc.model import DATASCHEMA as SFC

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ACTIONS = ("position", "tighten", "scan", "verify")
NODE = Path(__file__).with_name("chaos_node.py")
T = TypeVar("T")


def push(name: str, step: str) -> dict[str, Any]:
    return {"name": name, "step": step, "interaction": "push_command", "type_id": f"chaos.{name}"}


RECIPE = {
    "steps": [
        {"name": "Init", "initial": True},
        {"name": "Position"},
        {"name": "Tighten"},
        {"name": "Scan"},
        {"name": "Verify"},
        {"name": "Done"},
    ],
    "branches": [
        {"name": "Work", "type": "simultaneous", "branches": [["Position", "Tighten"], ["Scan"]]}
    ],
    "transitions": [
        {"source": "Init", "target": "Work"},
        {"source": "Work", "target": "Verify"},
        {"source": "Verify", "target": "Done", "condition": "verify.ok"},
    ],
    "actions": [
        push("position", "Position"),
        push("tighten", "Tighten"),
        push("scan", "Scan"),
        push("verify", "Verify"),
    ],
}
SEQUENCE_RECIPE = {  # the same commands: position, tighten and scan side by side, then verify
    "timeout_seconds": 30,
    "steps": [
        {"name": "position", "type_id": "chaos.position"},
        {
            "name": "work",
            "par": [
                {"name": "tighten", "type_id": "chaos.tighten"},
                {"name": "scan", "type_id": "chaos.scan"},
            ],
        },
        {"name": "verify", "type_id": "chaos.verify"},
    ],
}


@dataclass
class Chaos:
    nodes: list[GatewayProcess]
    kills: int = 0
    log: list[str] = field(default_factory=list)

    async def run(self, done: anyio.Event) -> None:
        """Kill a random node at random moments, and bring it back, until ``done``."""
        rng = random.Random(os.environ.get("CHAOS_SEED", "1"))
        while not done.is_set() or self.kills < 3:
            await anyio.sleep(rng.uniform(0.2, 0.7))
            node = rng.choice(self.nodes)
            node.kill()
            self.kills += 1
            self.log.append(f"killed {node.log.stem}")
            await anyio.sleep(rng.uniform(0.05, 0.3))
            node.start()
            await wait_until(node.ready, timeout=60)  # a loaded machine starts Python slowly


@pytest.fixture
def nodes(
    redis_url: str, mqtt_url: str, unique: str, tmp_path: Path
) -> Iterator[list[GatewayProcess]]:
    yield from two_nodes(redis_url, mqtt_url, unique, tmp_path)


@pytest.fixture
def nodes_on_one_redis(
    redis_single_url: str, mqtt_url: str, unique: str, tmp_path: Path
) -> Iterator[list[GatewayProcess]]:
    yield from two_nodes(redis_single_url, mqtt_url, unique, tmp_path)


def two_nodes(
    redis_url: str, mqtt_url: str, unique: str, tmp_path: Path
) -> Iterator[list[GatewayProcess]]:
    base = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")},
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": unique,
        "GATEWAY_REDIS_DEDUPE_LEASE_SECONDS": "2",
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": unique,
        "GATEWAY_MQTT_RECONNECT_MAX_SECONDS": "1",
        "GATEWAY_JOBS_TOPIC_PREFIX": unique,
        "GATEWAY_RUNTIME_CLAIM_IDLE_SECONDS": "1",
        "GATEWAY_RUNTIME_OUTBOX_GRACE_SECONDS": "1",
        "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.02",
        "GATEWAY_RUNTIME_SCOPE_POLL_SECONDS": "0.2",
        "GATEWAY_RUNTIME_RECONCILE_SECONDS": "1",
        # Faults under load: many jobs at once on the three devices, as before scheduling.
        "GATEWAY_JOBS_MAX_RUNNING_JOB_ORDERS": "0",
        "GATEWAY_JOBS_EQUIPMENT_ALLOCATION": "false",
        "GATEWAY_GATEWAY_DATA_DIR": str(tmp_path),
        "CHAOS_RECORD_KEY": f"{unique}:chaos:dispatched",
    }
    made = [
        GatewayProcess(
            NODE,
            {**base, "GATEWAY_GATEWAY_INSTANCE_ID": f"{unique}-{name}"},
            tmp_path / f"{name}.log",
            ready_line=" started (role all)",
        )
        for name in ("a", "b")
    ]
    try:
        yield made
    finally:
        for node in made:
            node.stop()


async def patiently(request: Callable[[], Awaitable[T]], tries: int = 20) -> T:
    """An MES request that survives the gateway instance answering it being killed."""
    for _ in range(tries - 1):
        try:
            return await request()
        except TimeoutError:
            continue
    return await request()


async def test_every_job_ends_exactly_once_while_instances_are_killed(
    nodes: list[GatewayProcess], redis_url: str, mqtt_url: str, unique: str
) -> None:
    await killed_while_running(nodes, redis_url, mqtt_url, unique, SFC, RECIPE, jobs=200)


async def test_every_sequence_job_ends_exactly_once_while_instances_are_killed(
    nodes_on_one_redis: list[GatewayProcess], redis_single_url: str, mqtt_url: str, unique: str
) -> None:
    nodes, redis_url = nodes_on_one_redis, redis_single_url
    await killed_while_running(
        nodes, redis_url, mqtt_url, unique, SEQUENCE, SEQUENCE_RECIPE, jobs=100
    )


async def killed_while_running(
    nodes: list[GatewayProcess],
    redis_url: str,
    mqtt_url: str,
    unique: str,
    dataschema: str,
    recipe: Any,
    *,
    jobs: int,
) -> None:
    """Run ``jobs`` jobs of ``recipe`` on ``nodes`` while they are killed; check each ended
    once, completed, every action dispatched once (a repeat has the same correlation id)."""
    for node in nodes:
        node.start()
    for node in nodes:
        await wait_until(node.ready, timeout=60)
    chaos = Chaos(nodes)
    async with connect_test_client(mqtt_url) as client:
        mes = JobsMes(client, unique, "cell")

        async def send(event: CloudEvent) -> CloudEvent:
            return await patiently(lambda: client.request(mes.commands_topic, event, timeout=3))

        wm = work_master("WM", recipe, dataschema=dataschema)
        await send(
            mes.event("com.github.aschamberger.ISA95-JOBCONTROL_V2.config.workmaster.v1", wm)
        )
        done = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(chaos.run, done)
            limiter = anyio.CapacityLimiter(10)

            async def store(number: int) -> None:
                async with limiter:
                    order = job_order(f"J{number}", work_masters=["WM"])
                    await send(mes.event(_method("StoreAndStart"), {"JobOrder": order}))

            async with anyio.create_task_group() as stores:
                for number in range(jobs):
                    stores.start_soon(store, number)
            responses = await wait_for_all_ended(mes, send, jobs)
            done.set()
    for node in nodes:
        node.stop()

    assert chaos.kills >= 3, chaos.log
    assert len(responses) == jobs
    for job, response in responses.items():
        assert [s["StateText"]["Text"] for s in response["JobState"]][:2] == [
            "Ended",
            "Completed",
        ], job
        results = {entry["ID"] for entry in response.get("JobResponseData", [])}
        assert set(ACTIONS) <= results, job

    async with redis_client(redis_url) as redis:
        dispatched = Counter(
            cast(list[str], await redis.lrange(f"{unique}:chaos:dispatched", 0, -1))
        )
        changes = cast(
            list[tuple[str, dict[str, str]]], await redis.xrange(f"{unique}:{{cell}}:changes")
        )
    expected = {f"J{n}:{action}:1" for n in range(jobs) for action in ACTIONS}
    assert set(dispatched) == expected  # all dispatched; never a second attempt number
    records = [ChangeRecord.parse(entry_id, fields) for entry_id, fields in changes]
    endings = Counter(r.job_order_id for r in records if r.state.top is TopState.ENDED)
    assert endings == Counter({f"J{n}": 1 for n in range(jobs)})  # each job ended exactly once
    repeats = sum(count - 1 for count in dispatched.values())
    print(f"chaos: {chaos.kills} kills, {repeats} re-dispatched commands (same correlation id)")


def _method(name: str) -> str:
    return f"org.opcfoundation.ISA95-JOBCONTROL_V2.{name}.v2"


async def wait_for_all_ended(
    mes: JobsMes, send: Callable[[CloudEvent], Awaitable[CloudEvent]], jobs: int
) -> dict[str, dict[str, Any]]:
    """Ask for the responses of every ended or aborted job until all jobs are; returns them.

    Two requests per round whatever the number of jobs (by state, not by job), so a round
    stays short on a loaded machine even when requests reach a killed instance and are retried.
    """
    wanted = {f"J{number}" for number in range(jobs)}
    ended: dict[str, dict[str, Any]] = {}
    with anyio.move_on_after(300):
        while ended.keys() < wanted:
            for state in ("Ended", "Aborted"):
                event = mes.event(
                    "org.opcfoundation.Machinery.Jobs.RequestJobResponseByJobOrderState.v1",
                    {"JobOrderState": [{"StateText": {"Text": state}}]},
                )
                for response in (await send(event)).data.get("JobResponses") or []:
                    ended[response["JobOrderID"]] = response
            if ended.keys() < wanted:
                await anyio.sleep(0.2)
    assert ended.keys() == wanted, sorted(wanted - ended.keys())
    return ended
