"""The MQTT equipment driver end to end: the MES over MQTT, jobs and the SFC engine on Redis,
the driver on the gateway's MQTT binding, and equipment played by an MQTT test client."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import JSON, CloudEvent
from gateway.codecs.mqtt import MqttMessage, from_mqtt, to_mqtt
from gateway.equipment import EquipmentCommand
from gateway.errors import GatewayError, SettingsError
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.testing import running, wait_until
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway.transport import Binding
from gateway_jobs.model import ReturnStatus
from gateway_jobs.testing import JobsMes, final_response, job_order, return_status, work_master
from gateway_jobs.testing import response_data as results
from gateway_jobs.testing import state_texts as states
from gateway_mqtt_equipment import (
    EQUIPMENT,
    HEARTBEAT_TYPE,
    JOB_ORDER,
    OFFLINE_TYPE,
    EquipmentTopics,
    MqttEquipmentDriver,
)
from gateway_sfc.model import DATASCHEMA

if TYPE_CHECKING:
    from anyio.abc import TaskStatus

    from gateway.equipment import EquipmentDriver

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

PRESS = "com.example.press.v1"
PART_SEEN = "com.example.part_seen.v1"
Answer = Callable[[CloudEvent], Awaitable[CloudEvent | None]]


@dataclass
class Failures:
    """Observer plugin: messages the gateway rejected."""

    seen: list[tuple[str, str]] = field(default_factory=list)

    @hookimpl
    def gateway_message_failed(self, binding: str, topic: str, code: str, reason: str) -> None:
        self.seen.append((topic, reason))


@dataclass
class Station:
    mqtt_url: str
    redis_url: str
    name: str
    failures: Failures = field(default_factory=Failures)

    @property
    def topics(self) -> EquipmentTopics:
        return EquipmentTopics(f"{self.name}-eq")

    def gateway(self, instance: str = "a", equipment: str = "press,camera", **env: str) -> Gateway:
        environ = {
            "GATEWAY_MQTT_URL": self.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": self.name,
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.name}-{instance}",
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            "GATEWAY_JOBS_TOPIC_PREFIX": self.name,
            "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
            "GATEWAY_MQTT_EQUIPMENT_TOPIC_PREFIX": self.topics.prefix,
            "GATEWAY_MQTT_EQUIPMENT_EQUIPMENT": equipment,
            **env,
        }
        plugins = {"failures": self.failures}
        return Gateway.from_environment(None, environ, extra_plugins=plugins)

    @asynccontextmanager
    async def mes(self, scope: str = "cell1") -> AsyncIterator[JobsMes]:
        async with connect_test_client(self.mqtt_url) as client:
            yield JobsMes(client, self.name, scope)


@pytest.fixture
def station(mqtt_url: str, redis_url: str, unique: str) -> Station:
    return Station(mqtt_url, redis_url, unique)


@asynccontextmanager
async def equipment(
    client: MqttTestClient, topics: EquipmentTopics, name: str, answer: Answer
) -> AsyncIterator[list[MqttMessage]]:
    """Equipment ``name`` answering its commands with ``answer`` (``None``: no reply)."""
    received: list[MqttMessage] = []

    async def respond(message: MqttMessage) -> None:
        reply = await answer(from_mqtt(message))
        if reply is not None and message.response_topic is not None:
            outgoing = to_mqtt(reply, message.response_topic)
            await client.publish(
                dataclasses.replace(outgoing, correlation_data=message.correlation_data)
            )

    async with client.watch(topics.commands(name)) as commands, anyio.create_task_group() as tasks:

        async def serve() -> None:
            async for message in commands:
                received.append(message)
                tasks.start_soon(respond, message)

        tasks.start_soon(serve)
        yield received
        tasks.cancel_scope.cancel()


def answering(data: Any) -> Answer:
    async def answer(command: CloudEvent) -> CloudEvent:
        return command.reply(source="urn:test:press", data=data)

    return answer


def press_recipe(**action: Any) -> dict[str, Any]:
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
                "timeout_seconds": 5,
                "parameters": {"force_kn": 12},
                **action,
            }
        ],
    }


async def run_job(
    mes: JobsMes, recipe: Any, job: str = "J1", parameters: dict[str, Any] | None = None
) -> None:
    configured = await mes.configure(
        "workmaster", work_master(f"WM-{job}", recipe, dataschema=DATASCHEMA)
    )
    assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data
    order = job_order(job, work_masters=[f"WM-{job}"])
    if parameters:
        order["JobOrderParameters"] = [{"ID": k, "Value": v} for k, v in parameters.items()]
    stored = await mes.store(order, method="StoreAndStart")
    assert return_status(stored) == ReturnStatus.NO_ERROR


def equipment_event(
    type: str, name: str, data: Any = None, *, job: str | None = None, **attributes: Any
) -> CloudEvent:
    extensions = {EQUIPMENT: name} if job is None else {EQUIPMENT: name, JOB_ORDER: job}
    return CloudEvent(
        type=type,
        source=f"urn:test:{name}",
        datacontenttype=JSON,
        data=data,
        extensions=extensions,
        **attributes,
    )


# -- commands and replies ------------------------------------------------------------------


async def test_a_command_with_response_topic_and_correlation_data_is_answered_to_completion(
    station: Station,
) -> None:
    async with (
        running(station.gateway()),
        station.mes() as mes,
        equipment(mes.client, station.topics, "press", answering({"pressed": True})) as received,
    ):
        await run_job(mes, press_recipe(), parameters={"variant": "left"})
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    assert results(response)["press"] == {"pressed": True}
    [message] = received
    assert message.topic == f"{station.topics.prefix}/press/commands"
    # Per equipment, not per instance: any instance takes the reply.
    assert message.response_topic == f"{station.topics.prefix}/press/replies"
    assert message.correlation_data == b"J1:press:1"
    assert message.message_expiry_interval == 5
    command = from_mqtt(message)
    assert command.type == PRESS
    assert command.subject == "cell1"
    assert command.correlationid == "J1:press:1"
    assert command.extensions == {EQUIPMENT: "press", JOB_ORDER: "J1", "action": "press"}
    assert command.data == {"parameters": {"force_kn": 12}, "job_parameters": {"variant": "left"}}


async def test_an_error_reply_aborts_the_job_with_the_equipments_code_and_message(
    station: Station,
) -> None:
    async def jammed(command: CloudEvent) -> CloudEvent:
        return command.error_reply(source="urn:test:press", code="jammed", message="ram stuck")

    async with (
        running(station.gateway()),
        station.mes() as mes,
        equipment(mes.client, station.topics, "press", jammed),
    ):
        await run_job(mes, press_recipe())
        response = await final_response(mes)
    assert states(response)[0] == "Aborted"
    assert "jammed: ram stuck" in results(response)["Error"]


async def test_a_reply_is_handled_by_another_instance_when_the_sender_is_gone(
    station: Station,
) -> None:
    """The command's Response Topic is shared: instance a sends and dies, b takes the reply."""
    release = anyio.Event()

    async def after_release(command: CloudEvent) -> CloudEvent | None:
        if len(received) > 1:
            return None  # b's recovery re-sends the command: only a's gets a reply
        await release.wait()
        return command.reply(source="urn:test:press", data={"pressed": True})

    # Session expiry 0: a's subscriptions end with its connection (it is gone for good).
    sender = station.gateway("a", GATEWAY_MQTT_SESSION_EXPIRY_SECONDS="0")
    async with (
        station.mes() as mes,
        equipment(mes.client, station.topics, "press", after_release) as received,
    ):
        async with running(sender):
            await run_job(mes, press_recipe(timeout_seconds=30))
            await wait_until(lambda: received)
        async with running(station.gateway("b")):
            release.set()
            response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    assert {message.correlation_data for message in received} == {b"J1:press:1"}


async def test_a_reply_without_correlation_id_is_rejected_and_the_next_reply_is_taken(
    station: Station,
) -> None:
    async def twice(command: CloudEvent) -> CloudEvent:
        anonymous = command.reply(source="urn:test:press", data={}).replace(correlationid=None)
        message = to_mqtt(anonymous, station.topics.replies("press"))
        await mes.client.publish(message)
        return command.reply(source="urn:test:press", data={"pressed": True})

    async with (
        running(station.gateway()),
        station.mes() as mes,
        equipment(mes.client, station.topics, "press", twice),
    ):
        await run_job(mes, press_recipe())
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    assert [topic for topic, _ in station.failures.seen] == [station.topics.replies("press")]
    assert "correlationid" in station.failures.seen[0][1]


# -- events --------------------------------------------------------------------------------


async def test_an_equipment_event_completes_the_waiting_pull_event_action(
    station: Station,
) -> None:
    recipe = {
        "steps": [{"name": "Watch", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "Watch", "target": "Done"}],
        "actions": [
            {
                "name": "seen",
                "step": "Watch",
                "interaction": "pull_event",
                "type_id": PART_SEEN,
                "equipment": "camera",
                "timeout_seconds": 10,
            }
        ],
    }
    async with running(station.gateway(equipment="*")), station.mes() as mes:
        await run_job(mes, recipe)
        seen = equipment_event(PART_SEEN, "camera", {"part": "P-7"}, job="J1", subject="cell1")
        await mes.client.send(station.topics.events("camera"), seen)
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    assert results(response)["seen"] == {"part": "P-7"}


# -- liveness ------------------------------------------------------------------------------


async def test_heartbeats_keep_equipment_online_and_silence_takes_it_offline_with_a_reason(
    station: Station,
) -> None:
    gateway = station.gateway(GATEWAY_MQTT_EQUIPMENT_HEARTBEAT_TIMEOUT_SECONDS="0.5")
    hub = gateway.equipment
    async with running(gateway), connect_test_client(station.mqtt_url) as press:
        assert await hub.offline_reason("camera") == (
            "equipment camera offline: never seen (no heartbeat yet)"
        )
        heartbeat = station.topics.heartbeat("press")
        for _ in range(4):  # 0.8 s of heartbeats, longer than the timeout
            await press.send(heartbeat, equipment_event(HEARTBEAT_TYPE, "press"))
            await anyio.sleep(0.2)
            assert (await hub.liveness("press")).online
        await anyio.sleep(0.6)
        assert not (await hub.liveness("press")).online
        reason = await hub.offline_reason("press")
        assert reason is not None
        assert re.fullmatch(r"equipment press offline: last heartbeat 0\.\d s ago", reason)
        await press.send(heartbeat, equipment_event(HEARTBEAT_TYPE, "press"))
        await eventually(lambda: online(gateway, "press"))
        await press.send(heartbeat, equipment_event(OFFLINE_TYPE, "press"))
        await eventually(lambda: offline(gateway, "press"))
        reason = await hub.offline_reason("press")
        assert reason is not None
        assert reason.startswith("equipment press offline: disconnected")


async def test_heartbeats_leave_no_de_duplication_marker_in_the_store(station: Station) -> None:
    """An idle station's heartbeats (one a second per device, for ever) are not claimed in the
    store: each would leave a marker for a day. Events with effects still are."""
    gateway = station.gateway()

    def handled() -> float:
        labels = {"binding": "mqtt", "outcome": "ok"}
        value = gateway.metrics.registry.get_sample_value("gateway_messages_total", labels)
        return value or 0.0

    async def markers() -> list[str]:
        assert gateway.store is not None
        pattern = f"{station.name}:*dedupe*"
        return [key async for key in gateway.store.client.scan_iter(match=pattern)]

    async with running(gateway), connect_test_client(station.mqtt_url) as press:
        heartbeat = station.topics.heartbeat("press")
        for _ in range(20):
            await press.send(heartbeat, equipment_event(HEARTBEAT_TYPE, "press"))
        await wait_until(lambda: handled() >= 20)
        assert await online(gateway, "press")
        assert await markers() == []
        # An event with effects is still claimed (the check does see markers). It names no
        # scope: one naming a scope no job ever ran in is refused before any claim.
        seen = equipment_event(PART_SEEN, "press", {"part": "P-1"})
        await press.send(station.topics.events("press"), seen)
        await wait_until(lambda: handled() >= 21)
        assert len(await markers()) == 1


async def eventually(condition: Callable[[], Awaitable[bool]], timeout: float = 5) -> None:
    with anyio.fail_after(timeout):
        while not await condition():  # noqa: ASYNC110
            await anyio.sleep(0.02)


async def online(gateway: Gateway, name: str) -> bool:
    return (await gateway.equipment.liveness(name)).online


async def offline(gateway: Gateway, name: str) -> bool:
    return not await online(gateway, name)


async def test_a_heartbeat_counts_for_the_equipment_of_its_topic_and_may_not_name_another(
    station: Station,
) -> None:
    gateway = station.gateway()
    async with running(gateway), connect_test_client(station.mqtt_url) as press:
        anonymous = equipment_event(HEARTBEAT_TYPE, "press").replace(extensions={})
        await press.send(station.topics.heartbeat("press"), anonymous)
        await eventually(lambda: online(gateway, "press"))
        impostor = equipment_event(HEARTBEAT_TYPE, "camera")
        await press.send(station.topics.heartbeat("press"), impostor)
        await wait_until(lambda: station.failures.seen)
        assert not await online(gateway, "camera")
    [(topic, reason)] = station.failures.seen
    assert topic == station.topics.heartbeat("press")
    assert reason == "equipment press may not speak for equipment camera"


# -- identity: the topic names the sender ------------------------------------------------------


async def test_equipment_cannot_complete_a_command_sent_to_other_equipment(
    station: Station,
) -> None:
    """The camera answers the press's command on its own replies topic (the only one the
    broker's ACL lets it write): refused, and the press's own answer completes the job."""
    forged = anyio.Event()

    async def press_after_the_forgery(command: CloudEvent) -> CloudEvent:
        stolen = command.reply(source="urn:test:camera", data={"pressed": "forged"})
        outgoing = to_mqtt(stolen, station.topics.replies("camera"))
        await mes.client.publish(dataclasses.replace(outgoing, correlation_data=b"J1:press:1"))
        await wait_until(lambda: station.failures.seen)
        forged.set()
        return command.reply(source="urn:test:press", data={"pressed": True})

    async with (
        running(station.gateway()),
        station.mes() as mes,
        equipment(mes.client, station.topics, "press", press_after_the_forgery),
    ):
        await run_job(mes, press_recipe())
        response = await final_response(mes)
    assert forged.is_set()
    assert states(response)[:2] == ["Ended", "Completed"]
    assert results(response)["press"] == {"pressed": True}
    [(topic, reason)] = station.failures.seen
    assert topic == station.topics.replies("camera")
    assert reason == "equipment camera may not answer command J1:press:1: it went to press"


async def test_an_event_is_the_equipment_of_its_topic_whatever_it_claims(
    station: Station,
) -> None:
    """An event on the press's topic naming the camera is refused; the pull_event waiting for
    the camera is completed only by the camera's own topic."""
    recipe = {
        "steps": [{"name": "Watch", "initial": True}, {"name": "Done"}],
        "transitions": [{"source": "Watch", "target": "Done"}],
        "actions": [
            {
                "name": "seen",
                "step": "Watch",
                "interaction": "pull_event",
                "type_id": PART_SEEN,
                "equipment": "camera",
                "timeout_seconds": 10,
            }
        ],
    }
    async with running(station.gateway()), station.mes() as mes:
        await run_job(mes, recipe)
        spoofed = equipment_event(PART_SEEN, "camera", {"part": "fake"}, job="J1", subject="cell1")
        await mes.client.send(station.topics.events("press"), spoofed)
        await wait_until(lambda: station.failures.seen)
        seen = equipment_event(PART_SEEN, "camera", {"part": "P-7"}, job="J1", subject="cell1")
        await mes.client.send(station.topics.events("camera"), seen)
        response = await final_response(mes)
    assert results(response)["seen"] == {"part": "P-7"}
    [(topic, reason)] = station.failures.seen
    assert topic == station.topics.events("press")
    assert reason == "equipment press may not speak for equipment camera"


async def test_a_command_to_offline_equipment_is_still_delivered(station: Station) -> None:
    gateway = station.gateway()
    async with (
        running(gateway),
        station.mes() as mes,
        equipment(mes.client, station.topics, "press", answering({"pressed": True})),
    ):
        await gateway.equipment.gone("press")
        await run_job(mes, press_recipe())
        response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]


# -- configuration -------------------------------------------------------------------------


def test_the_driver_is_off_until_equipment_is_configured(station: Station) -> None:
    gateway = station.gateway(equipment="")
    assert not [d for d in gateway.equipment.drivers if isinstance(d, MqttEquipmentDriver)]
    assert not [p for p in gateway.processors if p.name.startswith("mqtt-equipment")]


def test_the_driver_subscribes_per_equipment_or_with_a_wildcard(station: Station) -> None:
    listed = station.gateway(equipment="press,camera")
    topics = {s.topic for p in listed.processors for s in p.subscriptions}
    prefix = station.topics.prefix
    assert {
        f"{prefix}/camera/replies",
        f"{prefix}/press/replies",
        f"{prefix}/camera/events",
        f"{prefix}/press/events",
        f"{prefix}/camera/heartbeat",
        f"{prefix}/press/heartbeat",
    } <= topics
    anything = station.gateway(equipment="*")
    topics = {s.topic for p in anything.processors for s in p.subscriptions}
    assert {f"{prefix}/+/replies", f"{prefix}/+/events", f"{prefix}/+/heartbeat"} <= topics
    [driver] = [d for d in anything.equipment.drivers if isinstance(d, MqttEquipmentDriver)]
    assert driver.catch_all


@pytest.mark.parametrize(
    ("key", "value"),
    [("TOPIC_PREFIX", "equipment/+"), ("TOPIC_PREFIX", "/equipment"), ("EQUIPMENT", "a/b")],
)
def test_bad_topic_settings_stop_start_up(station: Station, key: str, value: str) -> None:
    with pytest.raises(SettingsError, match=r"\[mqtt_equipment\]"):
        station.gateway(**{f"GATEWAY_MQTT_EQUIPMENT_{key}": value})


def test_the_default_payload_can_be_reshaped_by_a_subclass(station: Station) -> None:
    class Shaped(MqttEquipmentDriver):
        def payload_for(self, command: Any) -> Any:
            return {"Force": command.parameters["force_kn"]}

    gateway = station.gateway(equipment="")
    driver = Shaped(gateway, name="shaped", equipment=["press"])
    command = EquipmentCommand(
        correlation_id="J1:press:1",
        type=PRESS,
        equipment="press",
        scope="cell1",
        job_order_id="J1",
        action="press",
        parameters={"force_kn": 12},
    )
    event = driver.command_event(command)
    assert json.loads(to_mqtt(event, "t").payload) == {"Force": 12}


async def test_without_the_plugin_that_receives_replies_a_command_fails_at_once(
    station: Station,
) -> None:
    """An integrator's driver relies on the mqtt-equipment plugin for its processors."""
    gateway = station.gateway(equipment="", GATEWAY_PLUGINS_BLOCK="mqtt-equipment")
    driver = MqttEquipmentDriver(gateway, name="orphan", equipment=["press"])
    command = EquipmentCommand(
        correlation_id="J1:press:1",
        type=PRESS,
        equipment="press",
        scope="cell1",
        job_order_id="J1",
        action="press",
    )
    with pytest.raises(GatewayError, match="is it blocked"):
        await driver.send(command)


# -- sending through the binding's public API ------------------------------------------------


@dataclass
class RecordingBinding:
    """A binding that records what is published (or fails like a disconnected one)."""

    name: str = "recording"
    published: list[tuple[str, CloudEvent, int, str | None]] = field(default_factory=list)
    failure: GatewayError | None = None
    ready: bool = True

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        task_status.started()

    async def publish(
        self,
        topic: str,
        event: CloudEvent,
        *,
        retain: bool = False,
        qos: int = 1,
        response_topic: str | None = None,
    ) -> None:
        if self.failure is not None:
            raise self.failure
        self.published.append((topic, event, qos, response_topic))

    async def request(self, topic: str, event: CloudEvent, *, timeout: float) -> CloudEvent:
        raise NotImplementedError


@dataclass
class RecordingTransport:
    """Plugin: the recording binding, and an MQTT equipment driver sending through it."""

    binding: RecordingBinding = field(default_factory=RecordingBinding)

    @hookimpl
    def gateway_register_bindings(
        self, register: Callable[[Binding], None], settings: Settings
    ) -> None:
        register(self.binding)

    @hookimpl
    def gateway_register_equipment_drivers(
        self, register: Callable[[EquipmentDriver], None], settings: Settings, gateway: Gateway
    ) -> None:
        register(
            MqttEquipmentDriver(
                gateway,
                name="recorded",
                topic_prefix="rec",
                equipment=["press"],
                binding="recording",
            )
        )


def press_command() -> EquipmentCommand:
    return EquipmentCommand(
        correlation_id="J1:press:1",
        type=PRESS,
        equipment="press",
        scope="cell1",
        job_order_id="J1",
        action="press",
        parameters={"force_kn": 12},
        timeout_seconds=5,
    )


def recorded_driver() -> tuple[MqttEquipmentDriver, RecordingBinding]:
    transport = RecordingTransport()
    gateway = Gateway.from_environment(
        None, {"GATEWAY_PLUGINS_ALLOW": "mqtt-equipment"}, extra_plugins={"rec": transport}
    )
    [driver] = [d for d in gateway.equipment.drivers if isinstance(d, MqttEquipmentDriver)]
    return driver, transport.binding


async def test_a_command_is_published_with_its_equipments_replies_topic_as_response_topic() -> None:
    driver, binding = recorded_driver()
    await driver.send(press_command())
    [(topic, event, qos, response_topic)] = binding.published
    assert (topic, qos, response_topic) == ("rec/press/commands", 1, "rec/press/replies")
    assert event.correlationid == "J1:press:1"
    assert event.extensions == {EQUIPMENT: "press", JOB_ORDER: "J1", "action": "press"}
    assert event.expiryinterval == 5


async def test_a_command_the_binding_cannot_publish_fails_with_the_drivers_name() -> None:
    driver, binding = recorded_driver()
    binding.failure = GatewayError("MQTT not connected to broker:1883")
    with pytest.raises(GatewayError, match=r"recorded: command J1:press:1 not sent: MQTT not"):
        await driver.send(press_command())


async def test_a_reply_for_a_job_that_does_not_exist_is_refused_in_one_line_without_traceback(
    station: Station, caplog: pytest.LogCaptureFixture
) -> None:
    """Equipment answering a command nobody sent (a job id the store does not know, again and
    again): each is refused and counted, the log says so once, without a traceback, and the
    gateway goes on to run a real job."""
    async with running(station.gateway()), station.mes() as mes:
        for attempt in range(1, 6):
            stray = CloudEvent(
                type=PRESS, source="urn:test:press", datacontenttype=JSON, data={"pressed": True}
            )
            outgoing = to_mqtt(stray, station.topics.replies("press"))
            await mes.client.publish(
                dataclasses.replace(outgoing, correlation_data=f"NOJOB:press:{attempt}".encode())
            )
        await wait_until(lambda: len(station.failures.seen) == 5)
        async with equipment(mes.client, station.topics, "press", answering({"pressed": 1})):
            await run_job(mes, press_recipe())
            response = await final_response(mes)
    assert states(response)[:2] == ["Ended", "Completed"]
    assert {reason for _, reason in station.failures.seen} == {
        f"equipment press may not answer command NOJOB:press:{n}: none is waiting for a reply"
        for n in range(1, 6)
    }
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    lines = [r.getMessage() for r in caplog.records if "NOJOB" in r.getMessage()]
    assert len(lines) <= 1, lines
