"""The station the attacks run against: shipped broker configuration, a gateway process with an
open-file limit of 1024, and a black-box MES that must keep being answered meanwhile.

- ``Deployment``: mosquitto running ``deploy/mosquitto/mosquitto.conf`` and ``acl`` byte for
  byte, its password file made by ``deploy/mosquitto/passwd.sh`` (users ``gateway``, ``mes``
  and one per piece of equipment), and the session's redis-server.
- ``HostileStation``: one ``gateway run`` process (role ``all``, ``ulimit -n 1024``) with its
  HTTP endpoint and MessagePack-RPC server on loopback ports, the default topic prefixes the
  ACL is written for, and the three simulated devices' names as MQTT equipment. Its scope is
  configured (a Work Master) before a test starts.
- ``MesProbe``: an MES that stores a job and reads it back, again and again, during an attack;
  each call must be answered within ``ANSWER_SECONDS``, and every job it stored must be there
  afterwards (nothing lost).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import to_mqtt
from gateway.testing import poll_until
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway.testing.processes import GatewayProcess
from gateway.testing.services import ServerProcess, find_executable, free_port, mosquitto_deployed
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, job_order, return_status, work_master
from gateway_sfc.model import DATASCHEMA

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MOSQUITTO = DEPLOY / "mosquitto"
PREFIX = "jobs"  # the ACL's MES topics
EQUIPMENT = ("positioner", "tightener", "camera")
EQUIPMENT_PREFIX = "equipment"  # the ACL's equipment topics
MES_REPLIES = "mes/replies"  # the ACL's replies to the MES
ANSWER_SECONDS = 5.0  # every MES call is answered within this, attack or not
OPEN_FILES = 1024  # the gateway's open-file limit (ulimit -n)
RPC_TOKEN = "press-token-" + uuid.uuid4().hex


def tighten_recipe() -> dict[str, Any]:
    return {
        "steps": [{"name": "Tighten", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "Tighten", "target": "Done"}],
        "actions": [
            {
                "name": "tighten",
                "step": "Tighten",
                "interaction": "push_command",
                "type_id": "com.example.tighten.v1",
                "equipment": "tightener",
                "timeout_seconds": 30,
            }
        ],
    }


@dataclass
class Deployment:
    """The shipped broker (its users' passwords in ``passwords``) and a Redis URL."""

    broker: ServerProcess
    secrets: Path
    passwords: dict[str, str]
    redis_url: str

    def url(self, user: str) -> str:
        return f"mqtt://{user}:{self.passwords[user]}@127.0.0.1:{self.broker.port}"

    @asynccontextmanager
    async def client(
        self, user: str, *, client_id: str | None = None
    ) -> AsyncIterator[MqttTestClient]:
        """A client logged in as ``user``; its replies come to mes/replies/<id> (the ACL's)."""
        async with connect_test_client(
            self.url(user), reply_prefix=MES_REPLIES, client_id=client_id
        ) as client:
            yield client


def make_deployment(directory: Path, redis_url: str) -> Deployment:
    passwords = {user: f"{user}-{uuid.uuid4().hex}" for user in ("gateway", "mes", *EQUIPMENT)}
    (directory / "mqtt_password").write_text(passwords["gateway"] + "\n")
    (directory / "mqtt_mes_password").write_text(passwords["mes"] + "\n")
    devices = ",".join(f"{name}={passwords[name]}" for name in EQUIPMENT)
    (directory / "mqtt_device_passwords").write_text(devices + "\n")
    passwd = directory / "passwd"
    subprocess.run(
        ["sh", str(MOSQUITTO / "passwd.sh"), str(directory), str(passwd)],
        env={"MOSQUITTO_PASSWD": find_executable("mosquitto_passwd"), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    files = {"config/acl": MOSQUITTO / "acl", "auth/passwd": passwd}
    broker = mosquitto_deployed(MOSQUITTO / "mosquitto.conf", files, directory=directory / "mq")
    return Deployment(broker.start(), directory, passwords, redis_url)


@dataclass
class HostileStation:
    deployment: Deployment
    directory: Path
    name: str = field(default_factory=lambda: f"sec{uuid.uuid4().hex[:10]}")
    http_port: int = field(default_factory=free_port)
    rpc_port: int = field(default_factory=free_port)
    environ: dict[str, str] = field(default_factory=dict)  # more settings, before ``start``
    process: GatewayProcess | None = None

    @property
    def scope(self) -> str:
        return self.name

    def tokens_file(self) -> Path:
        path = self.directory / "device-tokens"
        digest = hashlib.sha256(RPC_TOKEN.encode()).hexdigest()
        # The tightener's line too: a device that knows a valid token for an equipment id
        # another driver serves (MQTT) must still not take that equipment's commands.
        path.write_text(f"press sha256:{digest}\ntightener sha256:{digest}\n")
        return path

    def gateway_environ(self) -> dict[str, str]:
        deployment = self.deployment
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")},
            "GATEWAY_MQTT_URL": f"mqtt://127.0.0.1:{deployment.broker.port}",
            "GATEWAY_MQTT_USERNAME": "gateway",
            "GATEWAY_MQTT_PASSWORD_FILE": str(deployment.secrets / "mqtt_password"),
            "GATEWAY_MQTT_SHARE_GROUP": self.name,
            "GATEWAY_MQTT_SESSION_EXPIRY_SECONDS": "60",
            "GATEWAY_REDIS_URL": deployment.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": self.name,
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "3",
            "GATEWAY_GATEWAY_DATA_DIR": str(self.directory / "data"),
            "GATEWAY_HTTP_PORT": str(self.http_port),
            "GATEWAY_MSGPACK_RPC_PORT": str(self.rpc_port),
            "GATEWAY_MSGPACK_RPC_DEVICE_AUTH": "token",
            "GATEWAY_MSGPACK_RPC_DEVICE_TOKENS_FILE": str(self.tokens_file()),
            "GATEWAY_MSGPACK_RPC_KNOWN_EQUIPMENT": "press",
            "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": ",".join(EQUIPMENT),
            "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.05",
            # SECURITY_BASELINE=/path/to/an/older/checkout runs that code instead (to see an
            # attack succeed without the defences).
            **(
                {"PYTHONPATH": f"{baseline}:{baseline}/plugins", "PYTHONSAFEPATH": "1"}
                if (baseline := os.environ.get("SECURITY_BASELINE"))
                else {}
            ),
            **self.environ,
        }

    async def start(self) -> None:
        self.process = GatewayProcess(
            None,
            self.gateway_environ(),
            self.directory / "gateway.log",
            ready_line=" started (role all)",
            arguments=("run",),
            max_open_files=OPEN_FILES,
        )
        self.process.start()
        await poll_until(self._up, timeout=60)
        await poll_until(self.ready, timeout=30)
        async with self.mes() as mes:
            configured = await mes.configure(
                "workmaster", work_master("WM", tighten_recipe(), dataschema=DATASCHEMA)
            )
            assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data

    async def _up(self) -> bool:
        assert self.process is not None
        assert self.process.returncode is None, self.log_tail()
        return self.process.ready()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def log_text(self) -> str:
        path = self.directory / "gateway.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    @asynccontextmanager
    async def mes(self) -> AsyncIterator[JobsMes]:
        async with self.deployment.client("mes") as client:
            yield JobsMes(client, PREFIX, self.scope)

    async def http(
        self, path: str, *, method: str = "GET", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """One request on a connection of its own: status, headers, body (status 0: none)."""
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.http_port}\r\n"
        for name, value in (headers or {}).items():
            head += f"{name}: {value}\r\n"
        head += "Connection: close\r\nContent-Length: 0\r\n\r\n"
        try:
            with anyio.fail_after(ANSWER_SECONDS):
                stream = await anyio.connect_tcp("127.0.0.1", self.http_port)
                async with stream:
                    await stream.send(head.encode())
                    data = b""
                    while True:
                        try:
                            data += await stream.receive()
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            break
        except (OSError, TimeoutError):
            return 0, {}, b""
        raw_head, _, body = data.partition(b"\r\n\r\n")
        lines = raw_head.decode("latin-1").split("\r\n")
        if not lines or len(lines[0].split(" ")) < 2:
            return 0, {}, b""
        fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in fields.items()}, body

    async def ready(self) -> bool:
        status, _, _ = await self.http("/readyz")
        return status == 200

    async def metric(self, name: str) -> float:
        """The sum of a metric's samples on ``/metrics``."""
        _, _, body = await self.http("/metrics")
        total = 0.0
        for line in body.decode().splitlines():
            if line.startswith(name) and not line.startswith("#"):
                key = line.split(" ")[0].split("{")[0]
                if key == name:
                    total += float(line.rsplit(" ", 1)[1])
        return total


@dataclass
class MesProbe:
    """Stores a job and reads it back, over and over: the MES's view during an attack."""

    station: HostileStation
    stored: list[str] = field(default_factory=list)
    slowest: float = 0.0
    not_ready: list[int] = field(default_factory=list)  # /readyz answers other than 200
    rounds: int = 0

    async def run(self, stop: anyio.Event) -> None:
        async with self.station.mes() as mes:
            while not stop.is_set() or self.rounds < 3:
                job = f"P{len(self.stored)}-{uuid.uuid4().hex[:6]}"
                stored = await self._timed(mes.store(job_order(job, work_masters=["WM"])))
                assert return_status(stored) == ReturnStatus.NO_ERROR, stored.data
                self.stored.append(job)
                answer = await self._timed(mes.job_response(job))
                assert return_status(answer) == ReturnStatus.NO_ERROR, answer.data
                status, _, body = await self.station.http("/readyz")
                if status != 200:
                    self.not_ready.append(status)
                    print("readyz", status, body[:300])
                self.rounds += 1

    async def _timed(self, call: Any) -> CloudEvent:
        started = time.monotonic()
        with anyio.fail_after(ANSWER_SECONDS):
            reply: CloudEvent = await call
        self.slowest = max(self.slowest, time.monotonic() - started)
        return reply

    async def all_there(self) -> None:
        """Every job stored during the attack is known to the gateway (nothing lost)."""
        async with self.station.mes() as mes:
            for job in self.stored:
                answer = await mes.job_response(job)
                assert return_status(answer) == ReturnStatus.NO_ERROR, (job, answer.data)


@asynccontextmanager
async def probing(station: HostileStation) -> AsyncIterator[MesProbe]:
    """An MES probing ``station`` while the block runs (the attack); afterwards it checks
    that every call was answered in time, ``/readyz`` stayed 200 and nothing was lost."""
    probe = MesProbe(station)
    stop = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(probe.run, stop)
        yield probe
        stop.set()
    assert station.running, station.log_tail()
    assert probe.rounds >= 3
    assert probe.slowest < ANSWER_SECONDS
    assert probe.not_ready == [], station.log_tail()
    await probe.all_there()


def forged_reply_topic_event(topic: str, response_topic: str) -> Any:
    """A malformed message (no CloudEvent attributes) asking for a reply on ``response_topic``."""
    message = to_mqtt(CloudEvent(type="x", source="urn:x", data={}), topic)
    return dataclasses.replace(
        message,
        user_properties=[],
        payload=json.dumps({"not": "a cloudevent"}).encode(),
        response_topic=response_topic,
        correlation_data=b"forged",
    )
