"""The fault suite's harness: a whole station of real processes that tests kill, freeze, restart.

``fault_station`` gives a ``FaultStation``: a private redis-server (AOF, fsync every second) and a
private mosquitto, two ``gateway run`` processes (role ``all``: job management, SFC engine,
publisher; each with its ``/readyz`` on a port of its own) and a ``gateway run --role simulator``
process with the simulated station (positioner, tightener, camera over MQTT). Nothing in it is
a stand-in: the tests kill -9 / SIGSTOP / restart these processes and watch what the MES sees.

Timeouts are shorter than production so a run takes seconds: work entries of a silent instance
are claimed after ``CLAIM_IDLE_SECONDS``, retries back off up to ``RETRY_MAX_SECONDS``; tests
pass their own ``GATEWAY_...`` overrides through ``fault_station.environ`` before ``start``.

Helpers: ``FaultStation.mes()`` (an MES over MQTT, ``JobsMes``), ``readyz(instance)``,
``rear_axle(timeout_seconds=..., recipe_format=...)`` (the example recipe, an SFC chart or the
same station work as a sequence, with every action's timeout changed and any failure aborting),
``store_jobs``, ``wait_for_all_ended`` (asks each job's response until all ended, surviving
unanswered calls), ``endings`` (how often each job ended, from the scope's change stream).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import pytest
from redis.asyncio import Redis

from gateway.changes import ChangeRecord
from gateway.cloudevents import CloudEvent
from gateway.testing import poll_until as poll_until  # the fault tests import it from here
from gateway.testing import wait_until
from gateway.testing.mqtt import connect_test_client
from gateway.testing.processes import GatewayProcess
from gateway.testing.redis_ha import redis_client
from gateway.testing.services import ServerProcess, free_port, mosquitto, redis_server
from gateway_jobs.testing import JobsMes, job_order, state_texts, work_master
from gateway_sequence import DATASCHEMA as SEQUENCE
from gateway_sfc.model import DATASCHEMA as SFC

T = TypeVar("T")

SCOPE = "cell1"
CLAIM_IDLE_SECONDS = 2.0
RETRY_MAX_SECONDS = 0.5
EQUIPMENT = ("positioner", "tightener", "camera")
EXAMPLES = Path(__file__).parents[2] / "examples"
REAR_AXLE: dict[str, Any] = json.loads((EXAMPLES / "recipes" / "rear_axle.json").read_text())
AXLE_SEQUENCE: dict[str, Any] = json.loads((EXAMPLES / "sequences" / "axle.json").read_text())
STORE_AND_START = "org.opcfoundation.ISA95-JOBCONTROL_V2.StoreAndStart.v2"
JOB_RESPONSE = "org.opcfoundation.Machinery.Jobs.RequestJobResponseByJobOrderID.v1"
WORKMASTER = "com.github.aschamberger.ISA95-JOBCONTROL_V2.config.workmaster.v1"


@dataclass(frozen=True)
class StationRecipe:
    """A Work Master's recipe and its format."""

    dataschema: str
    data: dict[str, Any]


def rear_axle(timeout_seconds: float | None = None, recipe_format: str = "sfc") -> StationRecipe:
    """The example rear-axle work as an SFC chart (``recipe_format`` ``"sfc"``) or a sequence
    (``"sequence"``: the example's steps, a failure aborting the job rather than holding it);
    ``timeout_seconds`` replaces every action's timeout."""
    if recipe_format == "sequence":
        return StationRecipe(SEQUENCE, _sequence(AXLE_SEQUENCE, timeout_seconds))
    if timeout_seconds is None:
        return StationRecipe(SFC, REAR_AXLE)
    actions = [{**action, "timeout_seconds": timeout_seconds} for action in REAR_AXLE["actions"]]
    return StationRecipe(SFC, {**REAR_AXLE, "actions": actions})


def _sequence(recipe: dict[str, Any], timeout_seconds: float | None) -> dict[str, Any]:
    def command(step: dict[str, Any]) -> dict[str, Any]:
        changed = {key: value for key, value in step.items() if key != "on_error"}
        if timeout_seconds is not None:
            changed["timeout_seconds"] = timeout_seconds
        return changed

    steps = [
        {**step, "par": [command(inner) for inner in step["par"]]}
        if "par" in step
        else command(step)
        for step in recipe["steps"]
    ]
    return {**recipe, "steps": steps}


@dataclass
class FaultStation:
    name: str
    directory: Path
    redis: ServerProcess
    broker: ServerProcess
    environ: dict[str, str] = field(default_factory=dict)  # overrides for every process
    gateways: dict[str, GatewayProcess] = field(default_factory=dict)
    simulator: GatewayProcess | None = None
    http_ports: dict[str, int] = field(default_factory=dict)

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis.port}/0"

    @property
    def mqtt_url(self) -> str:
        return f"mqtt://127.0.0.1:{self.broker.port}"

    @property
    def processes(self) -> list[GatewayProcess]:
        made = list(self.gateways.values())
        return [*made, self.simulator] if self.simulator is not None else made

    def base_environ(self) -> dict[str, str]:
        name = self.name
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")},
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": name,
            "GATEWAY_REDIS_DEDUPE_LEASE_SECONDS": "2",
            "GATEWAY_REDIS_CONNECT_TIMEOUT_SECONDS": "1",
            "GATEWAY_MQTT_URL": self.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": name,
            "GATEWAY_MQTT_RECONNECT_MAX_SECONDS": "0.5",
            "GATEWAY_MQTT_SESSION_EXPIRY_SECONDS": "300",
            "GATEWAY_JOBS_TOPIC_PREFIX": name,
            "GATEWAY_PUBLISHER_TOPIC_PREFIX": name,
            "GATEWAY_RUNTIME_CLAIM_IDLE_SECONDS": str(CLAIM_IDLE_SECONDS),
            "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.02",
            "GATEWAY_RUNTIME_SCOPE_POLL_SECONDS": "0.2",
            "GATEWAY_RUNTIME_RECONCILE_SECONDS": "1",
            "GATEWAY_GATEWAY_RETRY_MAX_SECONDS": str(RETRY_MAX_SECONDS),
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            "GATEWAY_GATEWAY_DATA_DIR": str(self.directory / "data"),
            "GATEWAY_MQTT_EQUIPMENT_TOPIC_PREFIX": f"{name}-sim",
            "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": ",".join(EQUIPMENT),
            "GATEWAY_MQTT_EQUIPMENT_HEARTBEAT_TIMEOUT_SECONDS": "3",
            "GATEWAY_SIMULATOR_TOPIC_PREFIX": f"{name}-sim",
            "GATEWAY_SIMULATOR_POSITION_SECONDS": "0.05",
            "GATEWAY_SIMULATOR_TIGHTEN_SECONDS": "0.05",
            "GATEWAY_SIMULATOR_INSPECT_SECONDS": "0.1",
            "GATEWAY_SIMULATOR_HEARTBEAT_SECONDS": "0.5",
            "GATEWAY_SIMULATOR_SEED": "1",
            # Faults under load: many jobs at once on the three devices, as before scheduling.
            "GATEWAY_JOBS_MAX_RUNNING_JOB_ORDERS": "0",
            "GATEWAY_JOBS_EQUIPMENT_ALLOCATION": "false",
            **self.environ,
        }

    def _gateway(self, instance: str) -> GatewayProcess:
        port = self.http_ports.setdefault(instance, free_port())
        environ = {
            **self.base_environ(),
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.name}-{instance}",
            "GATEWAY_HTTP_PORT": str(port),
        }
        return GatewayProcess(
            None,
            environ,
            self.directory / f"{instance}.log",
            ready_line=" started (role all)",
            arguments=("run",),
        )

    def _simulator(self) -> GatewayProcess:
        environ = {
            **self.base_environ(),
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.name}-sim",
            "GATEWAY_SIMULATOR_ENABLED": "true",
        }
        return GatewayProcess(
            None,
            environ,
            self.directory / "simulator.log",
            ready_line=" started (role simulator)",
            arguments=("run", "--role", "simulator"),
        )

    async def start(self, instances: tuple[str, ...] = ("a", "b")) -> None:
        """Start the simulator and the gateway instances; return once all are up."""
        self.simulator = self._simulator()
        self.gateways = {instance: self._gateway(instance) for instance in instances}
        for process in self.processes:
            process.start()
        for process in self.processes:
            await wait_until(lambda p=process: p.ready() or p.returncode is not None, timeout=60)  # type: ignore[misc]
            assert process.returncode is None, self.log_tail(process)
        await self.wait_ready()

    async def wait_ready(self, timeout: float = 30) -> None:
        """Until every gateway instance's ``/readyz`` answers 200."""
        for instance in self.gateways:
            await poll_until(lambda i=instance: self.ready(i), timeout=timeout)  # type: ignore[misc]

    async def ready(self, instance: str) -> bool:
        return (await self.readyz(instance))[0] == 200

    def running(self) -> dict[str, int | None]:
        """Each process's return code (``None``: still running)."""
        return {process.log.stem: process.returncode for process in self.processes}

    async def readyz(self, instance: str) -> tuple[int, dict[str, Any]]:
        """``/readyz`` of ``instance``: status and body (status 0: no answer at all)."""
        try:
            with anyio.fail_after(5):
                stream = await anyio.connect_tcp("127.0.0.1", self.http_ports[instance])
                async with stream:
                    await stream.send(
                        b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    )
                    data = b""
                    while True:
                        try:
                            data += await stream.receive()
                        except anyio.EndOfStream:
                            break
        except (OSError, TimeoutError):
            return 0, {}
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        # The body is what Content-Length says, not whatever else the socket held.
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        if length is not None:
            body = body[: int(length.group(1))]
        return status, json.loads(body) if body else {}

    @asynccontextmanager
    async def mes(self) -> AsyncIterator[JobsMes]:
        async with connect_test_client(self.mqtt_url) as client:
            yield JobsMes(client, self.name, SCOPE)

    @asynccontextmanager
    async def store(self) -> AsyncIterator[Redis]:
        """A client of the station's Redis (for looking, not for changing what gateways do)."""
        async with redis_client(self.redis_url) as client:
            yield client

    def log_tail(self, process: GatewayProcess, lines: int = 60) -> str:
        text = process.log.read_text(errors="replace") if process.log.exists() else ""
        return f"--- {process.log.name} ---\n" + "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for process in self.processes:
            process.stop()


@pytest.fixture
def fault_station(unique: str) -> Iterator[FaultStation]:
    """A station of its own: private servers (killed, frozen, restarted by the test)."""
    directory = Path(tempfile.mkdtemp(prefix="gw-faults-"))
    (directory / "redis").mkdir()
    (directory / "mosquitto").mkdir()
    redis = redis_server(directory / "redis")
    broker = mosquitto(directory / "mosquitto")
    redis.start()
    broker.start()
    station = FaultStation(unique, directory, redis, broker)
    try:
        yield station
    finally:
        station.stop()
        for process in station.processes:  # shown when the test failed
            print(station.log_tail(process, 200))
        redis.stop()
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def patiently(request: Callable[[], Awaitable[T]], tries: int = 30) -> T:
    """An MES request that survives going unanswered for a while (a server away)."""
    for _ in range(tries - 1):
        try:
            return await request()
        except TimeoutError:
            continue
    return await request()


async def configure_rear_axle(mes: JobsMes, recipe: StationRecipe | None = None) -> None:
    """Store the Work Master ``WM`` with the rear-axle recipe (or ``recipe``)."""
    recipe = recipe or rear_axle()
    event = mes.event(WORKMASTER, work_master("WM", recipe.data, dataschema=recipe.dataschema))
    await patiently(lambda: mes.client.request(mes.commands_topic, event, timeout=5))


async def store_jobs(mes: JobsMes, jobs: list[str], *, concurrency: int = 10) -> None:
    """StoreAndStart each job of ``jobs`` (Work Master ``WM``), ``concurrency`` at a time."""
    limiter = anyio.CapacityLimiter(concurrency)

    async def store(job: str) -> None:
        async with limiter:
            event = mes.event(STORE_AND_START, {"JobOrder": job_order(job, work_masters=["WM"])})
            await patiently(lambda: mes.client.request(mes.commands_topic, event, timeout=5))

    async with anyio.create_task_group() as tasks:
        for job in jobs:
            tasks.start_soon(store, job)


async def job_response(mes: JobsMes, job: str, timeout: float = 5) -> dict[str, Any]:
    event = mes.event(JOB_RESPONSE, {"JobOrderID": job})
    reply: CloudEvent = await mes.client.request(mes.commands_topic, event, timeout=timeout)
    return cast(dict[str, Any], reply.data.get("JobResponse") or {})


async def wait_for_all_ended(
    mes: JobsMes, jobs: list[str], timeout: float = 90
) -> dict[str, dict[str, Any]]:
    """Ask for every job's response until all have ended (Ended or Aborted); returns them."""
    pending = set(jobs)
    ended: dict[str, dict[str, Any]] = {}
    last: dict[str, list[str]] = {}
    with anyio.move_on_after(timeout):
        while pending:
            for job in sorted(pending):
                try:
                    response = await job_response(mes, job)
                except TimeoutError:
                    continue
                states = state_texts(response)
                last[job] = states
                if states and states[0] in ("Ended", "Aborted"):
                    ended[job] = response
                    pending.discard(job)
            if pending:
                await anyio.sleep(0.2)
    assert not pending, {job: last.get(job) for job in sorted(pending)}
    return ended


async def endings(station: FaultStation) -> Counter[str]:
    """How many times each job entered an end state (Ended or Aborted), per the change stream."""
    async with station.store() as client:
        changes = cast(
            list[tuple[str, dict[str, str]]],
            await client.xrange(f"{station.name}:{{{SCOPE}}}:changes"),
        )
    return Counter(
        record.job_order_id
        for record in (ChangeRecord.parse(entry_id, fields) for entry_id, fields in changes)
        if record.state.final
    )
