"""The MQTT binding beyond the shared contract: commands it sends, reconnects, start-up errors.

Tests taking ``broker_url`` run on mosquitto and on the in-process broker (``memory://``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import from_mqtt, to_mqtt
from gateway.errors import GatewayError, SettingsError
from gateway.hookspecs import hookimpl
from gateway.resilience import TransientError
from gateway.settings import Settings
from gateway.testing import running, wait_until
from gateway.testing.services import ServerProcess, free_port, mosquitto
from gateway.transport import MES_LANE, Processor, Subscription
from gateway_mqtt import memory
from gateway_mqtt.clients import connect_test_client

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def make_gateway(
    mqtt_url: str, unique: str, *extra: object, overrides: dict[str, str] | None = None
) -> Gateway:
    environ = {
        "GATEWAY_PLUGINS_BLOCK": "redis",
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": unique,
        "GATEWAY_MQTT_RECONNECT_MIN_SECONDS": "0.05",
        "GATEWAY_MQTT_RECONNECT_MAX_SECONDS": "0.5",
        "GATEWAY_GATEWAY_INSTANCE_ID": unique,
        **(overrides or {}),
    }
    plugins = {f"extra{index}": plugin for index, plugin in enumerate(extra)}
    return Gateway.from_environment(None, environ, extra_plugins=plugins)


@pytest.fixture(params=["mqtt", "inprocess"])
def broker_url(request: Any, unique: str) -> Iterator[str]:
    if request.param == "mqtt":
        yield request.getfixturevalue("mqtt_url")
        return
    yield f"memory://{unique}"
    memory.drop_broker(unique)


async def test_request_waits_for_the_reply_on_the_instance_reply_topic(
    broker_url: str, unique: str
) -> None:
    """The gateway commands a device; the device answers on the gateway's own reply topic."""
    gateway = make_gateway(broker_url, unique)
    async with (
        running(gateway),
        connect_test_client(broker_url) as device,
        device.watch(f"{unique}/tool/commands") as commands,
        anyio.create_task_group() as tasks,
    ):

        async def answer() -> None:
            incoming = await commands.receive()
            command = from_mqtt(incoming)
            reply = command.reply(source="urn:device", data={"torque": 12.5})
            assert incoming.response_topic is not None
            await device.publish(to_mqtt(reply, incoming.response_topic))

        tasks.start_soon(answer)
        command = CloudEvent(type="com.example.tighten.v1", source=gateway.source, data={})
        reply = await gateway.binding("mqtt").request(f"{unique}/tool/commands", command, timeout=5)
    assert reply.data == {"torque": 12.5}
    assert reply.correlationid == command.id
    assert f"gateway/replies/{unique}" == gateway.binding("mqtt").reply_topic  # type: ignore[attr-defined]


async def test_request_without_reply_times_out_with_a_clear_error(
    broker_url: str, unique: str
) -> None:
    gateway = make_gateway(broker_url, unique)
    async with running(gateway):
        command = CloudEvent(type="com.example.tighten.v1", source=gateway.source)
        with pytest.raises(GatewayError, match=r"no reply to com\.example\.tighten\.v1"):
            await gateway.binding("mqtt").request(f"{unique}/nobody", command, timeout=0.3)


async def test_publish_with_a_response_topic(broker_url: str, unique: str) -> None:
    """What equipment drivers use: the reply goes to a topic every instance shares."""
    gateway = make_gateway(broker_url, unique)
    async with (
        running(gateway),
        connect_test_client(broker_url) as device,
        device.watch(f"{unique}/tool/commands") as commands,
    ):
        command = CloudEvent(
            type="com.example.tighten.v1", source=gateway.source, correlationid="job:act:1"
        )
        await gateway.binding("mqtt").publish(
            f"{unique}/tool/commands", command, response_topic=f"{unique}/replies"
        )
        with anyio.fail_after(5):
            incoming = await commands.receive()
    assert incoming.response_topic == f"{unique}/replies"
    assert incoming.correlation_data == b"job:act:1"


@pytest.fixture
def own_broker() -> Iterator[ServerProcess]:
    """A broker of this test's own, which the test restarts."""
    broker = mosquitto().start()
    try:
        yield broker
    finally:
        broker.close()


class Counter:
    def __init__(self, topic_root: str) -> None:
        self.topic_root = topic_root
        self.handled = 0

    @hookimpl
    def gateway_register_processors(
        self, register: Callable[[Processor], None], settings: Settings
    ) -> None:
        async def handle(event: CloudEvent) -> Sequence[CloudEvent]:
            self.handled += 1
            return [event.reply(source="urn:gw", data={"count": self.handled})]

        register(Processor("counter", [Subscription(f"{self.topic_root}/+/commands")], handle))


async def test_reconnects_and_resubscribes_after_the_broker_restarts(
    own_broker: ServerProcess, unique: str
) -> None:
    url = f"mqtt://127.0.0.1:{own_broker.port}"
    counter = Counter(unique)
    gateway = make_gateway(url, unique, counter)
    command = CloudEvent(type="com.example.count.v1", source="urn:mes", subject="s1")
    async with running(gateway):
        async with connect_test_client(url) as mes:
            first = await mes.request(f"{unique}/s1/commands", command)
        # The broker keeps no sessions across this restart: the binding must subscribe again.
        own_broker.restart()
        await wait_until(lambda: gateway.binding("mqtt").reconnects > 0)  # type: ignore[attr-defined]
        async with connect_test_client(url) as mes:
            with anyio.fail_after(10):
                while True:  # the gateway may not be resubscribed at the very first attempt
                    try:
                        second = await mes.request(
                            f"{unique}/s1/commands", command.replace(id="second"), timeout=0.5
                        )
                        break
                    except TimeoutError:
                        continue
    assert first.data == {"count": 1}
    assert second.data["count"] >= 2


async def test_reconnects_and_resubscribes_after_the_in_process_broker_restarts(
    unique: str,
) -> None:
    url = f"memory://{unique}"
    counter = Counter(unique)
    gateway = make_gateway(url, unique, counter)
    command = CloudEvent(type="com.example.count.v1", source="urn:mes", subject="s1")
    try:
        async with running(gateway):
            async with connect_test_client(url) as mes:
                first = await mes.request(f"{unique}/s1/commands", command)
            memory.get_broker(unique).restart()  # forgets sessions, like mosquitto's restart
            await wait_until(lambda: gateway.binding("mqtt").reconnects > 0)  # type: ignore[attr-defined]
            await wait_until(lambda: memory.get_broker(unique).has_session(f"gw-{unique}"))
            async with connect_test_client(url) as mes:
                second = await mes.request(f"{unique}/s1/commands", command.replace(id="second"))
    finally:
        memory.drop_broker(unique)
    assert first.data == {"count": 1}
    assert second.data == {"count": 2}


def test_a_memory_url_needs_a_broker_name(unique: str) -> None:
    with pytest.raises(SettingsError, match="memory://<broker name>"):
        make_gateway("memory://", unique)


async def test_refused_credentials_stop_start_up_with_a_clear_message(unique: str) -> None:
    with_password = mosquitto()
    # No anonymous clients and no password file: every login is refused.
    config = with_password.directory / "mosquitto.conf"
    config.write_text(config.read_text().replace("allow_anonymous true", "allow_anonymous false"))
    with_password.start()
    try:
        url = f"mqtt://someone:wrong@127.0.0.1:{with_password.port}"
        gateway = make_gateway(url, unique)
        with pytest.raises(GatewayError) as raised:
            await gateway.run()
    finally:
        with_password.close()
    message = str(raised.value)
    assert "refused" in message
    assert "wrong" not in message


async def test_a_stop_request_ends_the_first_connection_attempts(unique: str) -> None:
    """No broker yet: the gateway keeps retrying, and a SIGTERM-like stop still ends it."""
    gateway = make_gateway(f"mqtt://127.0.0.1:{free_port()}", unique)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run_until_stopped, gateway)
            await wait_until(lambda: gateway.binding("mqtt").reconnects >= 2)  # type: ignore[attr-defined]
            gateway.request_stop("stop during start-up")
    assert gateway.stop_reason == "stop during start-up"


async def run_until_stopped(gateway: Gateway) -> None:
    with contextlib.suppress(GatewayError):  # start-up did not complete: run() says so
        await gateway.run()


class Flaky:
    """A processor whose store is away for the first ``outage`` tries, then broken for good
    on type ``broken``."""

    def __init__(self, topic_root: str, outage: int) -> None:
        self.topic_root = topic_root
        self.outage = outage
        self.tries = 0

    @hookimpl
    def gateway_register_processors(
        self, register: Callable[[Processor], None], settings: Settings
    ) -> None:
        async def handle(event: CloudEvent) -> Sequence[CloudEvent]:
            if event.type.endswith("broken.v1"):
                raise RuntimeError("a bug")
            self.tries += 1
            if self.tries <= self.outage:
                raise TransientError("store unavailable")
            return [event.reply(source="urn:gw", data={"tries": self.tries})]

        register(Processor("flaky", [Subscription(f"{self.topic_root}/+/commands")], handle))


async def test_a_transient_failure_is_retried_until_it_succeeds_never_answered_as_an_error(
    broker_url: str, unique: str
) -> None:
    flaky = Flaky(unique, outage=3)
    gateway = make_gateway(broker_url, unique, flaky)
    gateway.resilience.minimum_seconds, gateway.resilience.maximum_seconds = 0.01, 0.05
    command = CloudEvent(type="com.example.flaky.v1", source="urn:mes", subject="s1")
    broken = CloudEvent(type="com.example.broken.v1", source="urn:mes", subject="s1")
    async with running(gateway), connect_test_client(broker_url) as mes:
        reply = await mes.request(f"{unique}/s1/commands", command, timeout=10)
        error = await mes.request(f"{unique}/s1/commands", broken, timeout=10)
        assert gateway.readiness.ready
    assert reply.errorcode is None
    assert reply.data == {"tries": 4}
    assert error.errorcode == "processing-failed"  # permanent: answered (and acknowledged)


class Lanes:
    """A processor whose handler waits until released (on the main lane), and one answering
    at once on the MES lane."""

    def __init__(self, topic_root: str) -> None:
        self.topic_root = topic_root
        self.entered = anyio.Event()
        self.release = anyio.Event()

    @hookimpl
    def gateway_register_processors(
        self, register: Callable[[Processor], None], settings: Settings
    ) -> None:
        async def busy(event: CloudEvent) -> Sequence[CloudEvent]:
            self.entered.set()
            await self.release.wait()
            return [event.reply(source="urn:gw", data="done")]

        async def answer(event: CloudEvent) -> Sequence[CloudEvent]:
            return [event.reply(source="urn:gw", data="answered")]

        root = self.topic_root
        register(Processor("busy", [Subscription(f"{root}/+/replies")], busy))
        mes = [Subscription(f"{root}/+/commands", lane=MES_LANE)]
        register(Processor("mes", mes, answer))


@pytest.mark.parametrize("sessions", ["new", "resumed"])
async def test_mes_calls_are_answered_while_every_handler_of_the_main_lane_is_busy(
    broker_url: str, unique: str, sessions: str
) -> None:
    lanes = Lanes(unique)
    one = {"GATEWAY_MQTT_MAX_CONCURRENT_HANDLERS": "1"}
    if sessions == "resumed":  # the sessions of an earlier run of this instance, resumed
        async with running(make_gateway(broker_url, unique, Lanes(unique), overrides=one)):
            pass
    gateway = make_gateway(broker_url, unique, lanes, overrides=one)
    async with running(gateway), connect_test_client(broker_url) as client:
        event = CloudEvent(type="com.example.reply.v1", source="urn:equipment", subject="s1")
        async with anyio.create_task_group() as tasks:

            async def flood() -> None:
                reply = await client.request(f"{unique}/s1/replies", event, timeout=10)
                assert reply.data == "done"

            tasks.start_soon(flood)
            with anyio.fail_after(10):
                await lanes.entered.wait()  # the main lane's only handler slot is taken
            command = CloudEvent(type="com.example.call.v1", source="urn:mes", subject="s1")
            reply = await client.request(f"{unique}/s1/commands", command, timeout=10)
            assert reply.data == "answered"
            assert not lanes.release.is_set()
            lanes.release.set()
