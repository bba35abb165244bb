"""Least privilege on the wire, against a real mosquitto running the shipped files.

The broker runs ``deploy/mosquitto/mosquitto.conf`` with ``deploy/mosquitto/acl``, and its
password file is made by ``deploy/mosquitto/passwd.sh`` from secret files, as compose does. The
gateway logs in as ``gateway``, the MES as ``mes``, each piece of equipment as itself, all with
the default topic prefixes the ACL is written for.

Absence is proved with the broker's ordering, never with a sleep: a refused publish is
acknowledged before the next message is sent, so had the broker taken it, a subscriber would have
received it before that next one.
"""

from __future__ import annotations

import dataclasses
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import MqttMessage, from_mqtt, to_mqtt
from gateway.hookspecs import hookimpl
from gateway.testing import running, wait_until
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway.testing.services import ServerProcess, find_executable, mosquitto_deployed
from gateway.topics import MES_REPLY_PREFIX, MesTopics
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import (
    JobsMes,
    final_response,
    job_order,
    response_data,
    return_status,
    state_texts,
    work_master,
)
from gateway_sfc.model import DATASCHEMA

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MOSQUITTO = DEPLOY / "mosquitto"
PASSWORDS = {
    "gateway": f"gw-{uuid.uuid4().hex}",
    "mes": f"mes-{uuid.uuid4().hex}",
    "press": f"press-{uuid.uuid4().hex}",
    "camera": f"camera-{uuid.uuid4().hex}",
}
PRESS = "com.example.press.v1"
PREFIX = "jobs"  # the ACL's MES topics
EQUIPMENT = "equipment"  # the ACL's equipment topics


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The secret files compose mounts (deploy/make-secrets.sh makes random ones)."""
    directory = tmp_path_factory.mktemp("secrets")
    (directory / "mqtt_password").write_text(PASSWORDS["gateway"] + "\n")
    (directory / "mqtt_mes_password").write_text(PASSWORDS["mes"] + "\n")
    devices = f"press={PASSWORDS['press']},camera={PASSWORDS['camera']}"
    (directory / "mqtt_device_passwords").write_text(devices + "\n")
    return directory


@pytest.fixture(scope="module")
def broker(secrets: Path) -> Iterator[ServerProcess]:
    passwd = secrets / "passwd"
    subprocess.run(
        ["sh", str(MOSQUITTO / "passwd.sh"), str(secrets), str(passwd)],
        env={"MOSQUITTO_PASSWD": find_executable("mosquitto_passwd"), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    files = {"config/acl": MOSQUITTO / "acl", "auth/passwd": passwd}
    server = mosquitto_deployed(MOSQUITTO / "mosquitto.conf", files).start()
    try:
        yield server
    finally:
        server.close()


@dataclass
class Failures:
    """Observer plugin: messages the gateway refused, as (topic, code, reason)."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)

    @hookimpl
    def gateway_message_failed(self, binding: str, topic: str, code: str, reason: str) -> None:
        self.seen.append((topic, code, reason))


@dataclass
class Station:
    broker: ServerProcess
    secrets: Path
    redis_url: str
    name: str
    failures: Failures = field(default_factory=Failures)

    def url(self, user: str) -> str:
        return f"mqtt://{user}:{PASSWORDS[user]}@127.0.0.1:{self.broker.port}"

    def gateway(self, **settings: str) -> Gateway:
        environ = {
            "GATEWAY_MQTT_URL": f"mqtt://127.0.0.1:{self.broker.port}",
            "GATEWAY_MQTT_USERNAME": "gateway",
            "GATEWAY_MQTT_PASSWORD_FILE": str(self.secrets / "mqtt_password"),
            "GATEWAY_MQTT_SHARE_GROUP": self.name,
            "GATEWAY_MQTT_SESSION_EXPIRY_SECONDS": "0",
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": self.name,
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
            "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": "press,camera",
            **settings,
        }
        plugins = {"failures": self.failures}
        return Gateway.from_environment(None, environ, extra_plugins=plugins)

    @asynccontextmanager
    async def client(self, user: str) -> AsyncIterator[MqttTestClient]:
        """A client logged in as ``user``; the MES's replies come to mes/replies/<id>."""
        async with connect_test_client(self.url(user), reply_prefix=MES_REPLY_PREFIX) as client:
            yield client

    @asynccontextmanager
    async def mes(self) -> AsyncIterator[JobsMes]:
        async with self.client("mes") as client:
            yield JobsMes(client, PREFIX, self.name)


@pytest.fixture
def station(broker: ServerProcess, secrets: Path, redis_url: str, unique: str) -> Station:
    return Station(broker, secrets, redis_url, unique)  # the scope is unique per test too


def press_recipe() -> dict[str, Any]:
    return {
        "steps": [{"name": "Press", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "Press", "target": "Done"}],
        "actions": [
            {
                "name": "press",
                "step": "Press",
                "interaction": "push_command",
                "type_id": PRESS,
                "equipment": "press",
                "timeout_seconds": 20,
            }
        ],
    }


async def store_and_start(mes: JobsMes, job: str = "J1") -> None:
    configured = await mes.configure(
        "workmaster", work_master(f"WM-{job}", press_recipe(), dataschema=DATASCHEMA)
    )
    assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data
    stored = await mes.store(job_order(job, work_masters=[f"WM-{job}"]), method="StoreAndStart")
    assert return_status(stored) == ReturnStatus.NO_ERROR, stored.data


async def reply_to(client: MqttTestClient, command: MqttMessage, topic: str, data: Any) -> None:
    """Answer ``command`` on ``topic`` with its Correlation Data (what equipment does)."""
    reply = from_mqtt(command).reply(source="urn:test:equipment", data=data)
    outgoing = dataclasses.replace(to_mqtt(reply, topic), correlation_data=command.correlation_data)
    await client.publish(outgoing)


async def test_the_roles_are_enough_for_a_whole_job(station: Station) -> None:
    """MES commands and replies, equipment commands and replies, the retained state index:
    everything the gateway, the MES and the equipment need is allowed."""
    async with (
        running(station.gateway()),
        station.mes() as mes,
        station.client("press") as press,
        press.watch(f"{EQUIPMENT}/press/commands") as commands,
    ):
        await store_and_start(mes)
        with anyio.fail_after(15):
            command = await commands.receive()
        assert command.response_topic == f"{EQUIPMENT}/press/replies"
        await reply_to(press, command, command.response_topic, {"pressed": True})
        response = await final_response(mes)
        # The index follows the result topic: the first one that says the result is there.
        index = await mes_index(
            mes, lambda index: any(job.get("has_result") for job in index["jobs"])
        )
        queue = await mes.queue(lambda document: "Running" in document)
    assert state_texts(response)[:2] == ["Ended", "Completed"]
    assert response_data(response)["press"] == {"pressed": True}
    # The design's state index, jobs inline: the MES sees the job under the shipped ACL.
    assert index is not None
    assert [(job["job_order_id"], job["has_result"]) for job in index["jobs"]] == [("J1", True)]
    assert queue["Online"] is True
    assert station.failures.seen == []


async def mes_index(
    mes: JobsMes, until: Callable[[dict[str, Any]], bool] = lambda _: True
) -> dict[str, Any] | None:
    """The retained state index (the first one ``until`` holds for), as raw JSON."""
    async with mes.client.watch(MesTopics(PREFIX).state_index(mes.scope)) as messages:
        with anyio.fail_after(10):
            async for message in messages:
                data: dict[str, Any] = from_mqtt(message).data
                if until(data):
                    return data
    return None


async def test_equipment_cannot_reach_the_job_commands(station: Station) -> None:
    """A Store from the press user is dropped by the broker: no reply, no job."""
    attack = CloudEvent(
        type="org.opcfoundation.ISA95-JOBCONTROL_V2.Store.v2",
        source="urn:attacker",
        subject=station.name,
        data={"JobOrder": job_order("EVIL", work_masters=["WM-EVIL"])},
    )
    async with (
        running(station.gateway()),
        station.client("press") as press,
        station.mes() as mes,
        station.client("gateway") as spy,  # reads the commands topic as the gateway does
        spy.watch(f"{PREFIX}/{station.name}/commands") as seen,
    ):
        commands = f"{PREFIX}/{station.name}/commands"
        # Its only readable topic as Response Topic; acknowledged (QoS 1), and dropped.
        await press.publish(
            dataclasses.replace(
                to_mqtt(attack, commands), response_topic=f"{EQUIPMENT}/press/commands"
            )
        )
        query = await mes.act("RequestJobResponseByJobOrderID", "EVIL")
        first = from_mqtt(await seen.receive())
    assert first.source == mes.source, "the broker passed the equipment's command on"
    assert return_status(query) == ReturnStatus.UNKNOWN_JOB_ORDER_ID
    assert station.failures.seen == []


async def test_nobody_but_the_gateway_writes_retained_mes_topics(station: Station) -> None:
    forged = {"seq": 999999, "epoch": "attacker", "scope": station.name, "jobs": []}
    topics = [f"{PREFIX}/{station.name}/state-index", f"{PREFIX}/{station.name}/result/J1"]
    async with (
        running(station.gateway()),
        station.client("press") as press,
        station.mes() as mes,
        mes.client.watch(topics[0]) as indexes,
    ):
        for writer in (press, mes.client):  # equipment, and the MES itself
            for topic in topics:
                event = CloudEvent(type="forged", source="urn:attacker", data=forged)
                await writer.publish(to_mqtt(event, topic, retain=True))
        await store_and_start(mes)  # the gateway publishes the real index
        with anyio.fail_after(10):
            first = from_mqtt(await indexes.receive()).data
        assert first["epoch"] != "attacker"
        async with station.mes() as fresh:  # what a new subscriber gets retained
            retained = await mes_index(fresh)
            results = await fresh.act("RequestJobResponseByJobOrderID", "J1")
    assert retained is not None
    assert retained["epoch"] == first["epoch"] != "attacker"
    assert retained["seq"] < 999999
    assert return_status(results) == ReturnStatus.NO_ERROR


async def test_equipment_cannot_complete_another_equipments_command(station: Station) -> None:
    """The camera answers the press's command: on the press's replies topic the broker drops
    it; on its own the gateway refuses it. The press's answer completes the job."""
    async with (
        running(station.gateway()),
        station.mes() as mes,
        station.client("press") as press,
        station.client("camera") as camera,
        press.watch(f"{EQUIPMENT}/press/commands") as commands,
    ):
        await store_and_start(mes)
        with anyio.fail_after(15):
            command = await commands.receive()
        await reply_to(camera, command, f"{EQUIPMENT}/press/replies", {"pressed": "forged"})
        await reply_to(camera, command, f"{EQUIPMENT}/camera/replies", {"pressed": "forged"})
        await wait_until(lambda: station.failures.seen, timeout=10)
        await reply_to(press, command, f"{EQUIPMENT}/press/replies", {"pressed": True})
        response = await final_response(mes)
    assert response_data(response)["press"] == {"pressed": True}
    [(topic, code, reason)] = station.failures.seen
    assert (topic, code) == (f"{EQUIPMENT}/camera/replies", "not-permitted")
    assert reason.startswith("equipment camera may not answer command J1:press:1")


async def test_the_gateway_user_cannot_issue_mes_commands(station: Station) -> None:
    """No more than it needs: gateway processes answer commands, they do not send them."""
    forged = CloudEvent(
        type="org.opcfoundation.ISA95-JOBCONTROL_V2.Abort.v2",
        source="urn:gateway-user",
        subject=station.name,
        data={"JobOrderID": "J1"},
    )
    async with (
        running(station.gateway()),
        station.mes() as mes,
        station.client("gateway") as insider,
        insider.watch(f"{PREFIX}/{station.name}/commands") as seen,
    ):
        await insider.publish(to_mqtt(forged, f"{PREFIX}/{station.name}/commands"))
        query = await mes.act("RequestJobResponseByJobOrderID", "J1")
        first = from_mqtt(await seen.receive())
    assert first.source == mes.source, "the broker passed the gateway user's command on"
    assert return_status(query) == ReturnStatus.UNKNOWN_JOB_ORDER_ID


async def test_a_reply_the_broker_refuses_is_logged_once_per_topic_and_counted(
    station: Station, caplog: pytest.LogCaptureFixture
) -> None:
    """The old CLI's mistake: replies asked on a topic the gateway's user may not write (the
    gateway's own setting lets replies go there, the broker's ACL does not). The broker answers
    the reply's PUBLISH with 0x87 Not authorized; the gateway says so once and counts every
    refusal, and the commands are still handled."""
    gateway = station.gateway(GATEWAY_JOBS_REPLY_TOPIC_PREFIXES=f"mes/replies,{PREFIX}/cli-replies")
    refused = f"{PREFIX}/cli-replies/{station.name}"
    async with running(gateway), station.mes() as mes:
        for number in range(3):
            query = mes.event(
                "org.opcfoundation.Machinery.Jobs.RequestJobResponseByJobOrderID.v1",
                {"JobOrderID": f"J{number}"},
                correlationid=f"c{number}",
            )
            message = to_mqtt(query, MesTopics(PREFIX).commands(mes.scope), response_topic=refused)
            await mes.client.publish(dataclasses.replace(message, correlation_data=b"c"))

        def count() -> float:
            labels = {"kind": "reply", "reason": "Not authorized (0x87)"}
            value = gateway.metrics.registry.get_sample_value(
                "gateway_mqtt_publishes_refused_total", labels
            )
            return value or 0.0

        await wait_until(lambda: count() == 3, timeout=10)
        answered = await mes.act("RequestJobResponseByJobOrderID", "J9")  # still serving
    assert return_status(answered) == ReturnStatus.UNKNOWN_JOB_ORDER_ID
    warnings = [
        r.getMessage() for r in caplog.records if "refused by the broker on" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert refused in warnings[0]
    assert "Not authorized (0x87)" in warnings[0]
    assert "user gateway write" in warnings[0]


def refused_at_least(gateway: Gateway, count: int) -> bool:
    return refused(gateway, "publish") >= count


def refused(gateway: Gateway, kind: str) -> float:
    labels = {"kind": kind, "reason": "Not authorized (0x87)"}
    value = gateway.metrics.registry.get_sample_value(
        "gateway_mqtt_publishes_refused_total", labels
    )
    return value or 0.0


async def test_a_retained_topic_the_broker_refuses_is_logged_once_and_counted(
    station: Station, caplog: pytest.LogCaptureFixture
) -> None:
    """The publisher on a prefix the ACL does not allow: every index publish is refused; the
    first is said, the rest counted, and the publisher goes on (it does not retry for ever)."""
    gateway = station.gateway(GATEWAY_PUBLISHER_TOPIC_PREFIX="elsewhere")
    recipe = work_master("WM-X", press_recipe(), dataschema=DATASCHEMA)
    async with running(gateway), station.mes() as mes:
        assert return_status(await mes.configure("workmaster", recipe)) == ReturnStatus.NO_ERROR
        for number, job in enumerate(("J1", "J2", "J3"), start=1):
            stored = await mes.store(job_order(job, work_masters=["WM-X"]))
            assert return_status(stored) == ReturnStatus.NO_ERROR
            # Each Store: its order and the index, both refused; the next one still goes out.
            await wait_until(partial(refused_at_least, gateway, 2 * number), timeout=10)
    index = f"elsewhere/{station.name}/state-index"
    said = [r.getMessage() for r in caplog.records if "refused by the broker on" in r.getMessage()]
    about_index = [text for text in said if index in text]
    assert len(about_index) == 1, said
    assert about_index[0].startswith(f"publish refused by the broker on {index}: Not authorized")
