"""The transport contract: what every binding guarantees, shown against real servers.

Each case runs the gateway with the real Redis store (de-duplication on) and talks to it the way
an MES does, over the transport only. ``harness`` is parametrized per transport: ``mqtt`` is a
private mosquitto, ``inprocess`` the in-process broker (``memory://``, ``gateway_mqtt.memory``)
that ``gateway demo`` uses. Every case runs on both and must pass identically.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import MqttMessage, from_mqtt
from gateway.errors import ValidationError
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.testing import running, wait_until
from gateway.testing.mqtt import MqttTestClient
from gateway.transport import Processor, Subscription
from gateway_mqtt import memory
from gateway_mqtt.clients import connect_test_client

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ECHO = "com.example.echo.v1"
FAIL = "com.example.fail.v1"
INVALID = "com.example.invalid.v1"
SLOW = "com.example.slow.v1"


@dataclass
class EchoPlugin:
    """A processor plugin shared by the instances of one test: it records what each handled."""

    topic_root: str
    handled: list[tuple[str, str]] = field(default_factory=list)  # (instance, event id)

    @hookimpl
    def gateway_register_processors(
        self, register: Callable[[Processor], None], settings: Settings
    ) -> None:
        instance = settings.section("gateway").effective_instance_id
        source = settings.section("gateway").effective_source

        async def handle(event: CloudEvent) -> Sequence[CloudEvent]:
            if event.type == FAIL:
                raise RuntimeError("the handler broke")
            if event.type == INVALID:
                raise ValidationError("data.Quantity", "must be positive")
            if event.type == SLOW:
                await anyio.sleep(0.5)
            self.handled.append((instance, event.id))
            return [event.reply(source=source, data={"echo": event.data, "instance": instance})]

        register(
            Processor(
                name="echo",
                subscriptions=[Subscription(f"{self.topic_root}/+/commands")],
                handle=handle,
                event_types=frozenset({ECHO, FAIL, INVALID, SLOW}),
            )
        )


class Harness(Protocol):
    plugin: EchoPlugin

    def gateway(self, instance_id: str) -> Gateway: ...

    def mes(self) -> AbstractAsyncContextManager[MqttTestClient]: ...


@dataclass
class MqttHarness:
    """Gateways and an MES on one MQTT v5 broker: mosquitto or the in-process one."""

    mqtt_url: str
    redis_url: str
    unique: str
    plugin: EchoPlugin

    def gateway(self, instance_id: str) -> Gateway:
        environ = {
            "GATEWAY_MQTT_URL": self.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": self.unique,
            "GATEWAY_MQTT_RECONNECT_MAX_SECONDS": "1",
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.unique,
            "GATEWAY_REDIS_DEDUPE_LEASE_SECONDS": "2",
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.unique}-{instance_id}",
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
        }
        return Gateway.from_environment(None, environ, extra_plugins={"echo": self.plugin})

    def mes(self) -> AbstractAsyncContextManager[MqttTestClient]:
        return connect_test_client(self.mqtt_url)


@pytest.fixture(params=["mqtt", "inprocess"])
def harness(request: Any, redis_url: str, unique: str) -> Iterator[Harness]:
    plugin = EchoPlugin(topic_root=unique)
    if request.param == "mqtt":
        yield MqttHarness(request.getfixturevalue("mqtt_url"), redis_url, unique, plugin)
        return
    yield MqttHarness(f"memory://{unique}", redis_url, unique, plugin)
    memory.drop_broker(unique)


def command(type_: str = ECHO, data: Any = None, scope: str = "s1") -> CloudEvent:
    return CloudEvent(type=type_, source="urn:test:mes", subject=scope, data=data or {"n": 1})


def commands_topic(harness: Harness, scope: str = "s1") -> str:
    return f"{harness.plugin.topic_root}/{scope}/commands"


def raw_command(harness: Harness, payload: bytes, **attributes: str) -> MqttMessage:
    """A command as raw MQTT: its CloudEvent attributes are the user properties given."""
    return MqttMessage(
        topic=commands_topic(harness),
        payload=payload,
        content_type="application/json",
        user_properties=tuple(attributes.items()),
    )


async def test_request_reply_round_trip_keeps_correlation(harness: Harness) -> None:
    async with running(harness.gateway("a")), harness.mes() as mes:
        request = command(data={"answer": 42}).replace(correlationid="corr-1")
        reply = await mes.request(commands_topic(harness), request)
    assert reply.correlationid == "corr-1"
    assert reply.causationid == request.id
    assert reply.type == ECHO
    assert reply.subject == "s1"
    assert reply.errorcode is None
    assert reply.data["echo"] == {"answer": 42}


async def test_two_instances_on_one_shared_subscription_handle_each_command_once(
    harness: Harness,
) -> None:
    async with running(harness.gateway("a")), running(harness.gateway("b")), harness.mes() as mes:
        replies: list[CloudEvent] = []

        async def ask(number: int) -> None:
            replies.append(await mes.request(commands_topic(harness), command(data={"n": number})))

        async with anyio.create_task_group() as tasks:
            for number in range(40):
                tasks.start_soon(ask, number)
    handled = harness.plugin.handled
    assert len(replies) == 40
    assert len(handled) == 40
    assert len({event_id for _, event_id in handled}) == 40
    assert {instance for instance, _ in handled} == {
        f"{harness.plugin.topic_root}-a",
        f"{harness.plugin.topic_root}-b",
    }


async def test_command_sent_while_the_only_instance_is_stopped_is_handled_after_restart(
    harness: Harness,
) -> None:
    async with running(harness.gateway("a")):
        pass  # the broker now holds a persistent session with the subscription
    async with harness.mes() as mes:
        request = command(data={"while": "down"})
        async with anyio.create_task_group() as tasks:
            replies: list[CloudEvent] = []
            queued = anyio.Event()

            async def ask() -> None:
                topic = commands_topic(harness)
                replies.append(await mes.request(topic, request, timeout=10, published=queued))

            tasks.start_soon(ask)
            await queued.wait()  # the broker holds the command before the restart
            assert harness.plugin.handled == []
            async with running(harness.gateway("a")):
                await wait_until(lambda: replies)
    assert replies[0].data["echo"] == {"while": "down"}
    assert harness.plugin.handled == [(f"{harness.plugin.topic_root}-a", request.id)]


async def test_malformed_payload_gets_error_reply_and_next_command_is_handled(
    harness: Harness,
) -> None:
    malformed = raw_command(
        harness,
        b"{not json",
        specversion="1.0",
        id="m1",
        source="urn:test",
        type=ECHO,
        subject="s1",
    )
    async with running(harness.gateway("a")), harness.mes() as mes:
        raw_reply = await mes.request_raw(
            MqttMessage(**{**malformed.__dict__, "correlation_data": b"\xff\x00bad"})
        )
        good = await mes.request(commands_topic(harness), command(data={"after": 1}))
    error = from_mqtt(raw_reply)
    assert raw_reply.correlation_data == b"\xff\x00bad"
    assert error.errorcode == "invalid-request"
    assert "data" in (error.errormessage or "")
    assert error.type == ECHO
    assert good.errorcode is None
    assert good.data["echo"] == {"after": 1}


async def test_missing_attribute_is_named_in_the_error_reply(harness: Harness) -> None:
    async with running(harness.gateway("a")), harness.mes() as mes:
        raw_reply = await mes.request_raw(
            raw_command(harness, b"{}", specversion="1.0", source="urn:test", type=ECHO)
        )
    error = from_mqtt(raw_reply)
    assert error.errorcode == "invalid-request"
    assert (error.errormessage or "").startswith("id:")


async def test_u_feff_in_an_attribute_gets_error_reply_and_next_command_is_handled(
    harness: Harness,
) -> None:
    """MQTT allows U+FEFF and the broker forwards it; paho alone would drop the connection, and
    the persistent session would bring the command back on every reconnect."""
    async with running(harness.gateway("a")), harness.mes() as mes:
        with_u_feff = raw_command(
            harness, b"{}", specversion="1.0", id="m\ufeff1", source="urn:test", type=ECHO
        )
        raw_reply = await mes.request_raw(with_u_feff)
        after = command(data={"after": 1})
        good = await mes.request(commands_topic(harness), after)
    error = from_mqtt(raw_reply)
    assert error.errorcode == "invalid-request"
    assert (error.errormessage or "").startswith("id: must be UTF-8 text without")
    assert good.data["echo"] == {"after": 1}
    assert harness.plugin.handled == [(f"{harness.plugin.topic_root}-a", after.id)]


async def test_failing_handler_gets_error_reply_and_next_command_is_handled(
    harness: Harness,
) -> None:
    async with running(harness.gateway("a")), harness.mes() as mes:
        failed = await mes.request(commands_topic(harness), command(FAIL))
        invalid = await mes.request(commands_topic(harness), command(INVALID))
        unknown = await mes.request(commands_topic(harness), command("com.example.nope"))
        good = await mes.request(commands_topic(harness), command())
    assert failed.errorcode == "processing-failed"
    assert "the handler broke" in (failed.errormessage or "")
    assert invalid.errorcode == "invalid-request"
    assert invalid.errormessage == "data.Quantity: must be positive"
    assert unknown.errorcode == "unknown-type"
    assert good.errorcode is None


async def test_redelivered_command_replays_the_stored_reply(harness: Harness) -> None:
    async with running(harness.gateway("a")), harness.mes() as mes:
        request = command()
        first = await mes.request(commands_topic(harness), request)
        second = await mes.request(commands_topic(harness), request)
    assert second.id == first.id
    assert len(harness.plugin.handled) == 1


async def test_stop_lets_in_flight_handlers_finish_and_reply(harness: Harness) -> None:
    async with harness.mes() as mes:
        replies: list[CloudEvent] = []
        gateway = harness.gateway("a")
        async with running(gateway):

            async def ask() -> None:
                replies.append(await mes.request(commands_topic(harness), command(SLOW)))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(ask)
                await wait_until(lambda: gateway.dispatcher.in_flight > 0)
                gateway.request_stop("test: stop mid-handler")
    assert len(replies) == 1
    assert replies[0].errorcode is None


async def test_command_whose_handler_was_cut_off_is_redelivered_and_handled(
    harness: Harness,
) -> None:
    """An instance dies mid-handler: the unacknowledged command is handled after it restarts."""
    async with harness.mes() as mes:
        replies: list[CloudEvent] = []
        request = command(SLOW)

        async def ask() -> None:
            replies.append(await mes.request(commands_topic(harness), request, timeout=20))

        async with anyio.create_task_group() as tasks:
            crashing = harness.gateway("a")
            async with anyio.create_task_group() as instance:
                await instance.start(crashing.run)
                tasks.start_soon(ask)
                await wait_until(lambda: crashing.dispatcher.in_flight > 0)
                instance.cancel_scope.cancel()  # no graceful stop: the handler is cut off
            assert replies == []
            async with running(harness.gateway("a")):
                await wait_until(lambda: replies, timeout=15)
    assert replies[0].errorcode is None
    assert harness.plugin.handled == [(f"{harness.plugin.topic_root}-a", request.id)]


async def test_an_instance_stopping_while_another_runs_leaves_the_share_group(
    harness: Harness,
) -> None:
    """Otherwise the broker keeps handing the stopped instance's session its share of commands."""
    async with running(harness.gateway("b")):
        async with running(harness.gateway("a")):
            pass  # a stops cleanly while b runs
        async with harness.mes() as mes:
            for number in range(6):
                reply = await mes.request(commands_topic(harness), command(data={"n": number}))
                assert reply.errorcode is None
    assert {instance for instance, _ in harness.plugin.handled} == {
        f"{harness.plugin.topic_root}-b"
    }


async def test_the_last_instance_stopping_keeps_its_place_in_the_share_group(
    harness: Harness,
) -> None:
    async with running(harness.gateway("a")):
        pass
    assert harness.gateway("a").instances is not None
    async with harness.mes() as mes, anyio.create_task_group() as tasks:
        replies: list[CloudEvent] = []
        queued = anyio.Event()

        async def ask() -> None:
            topic = commands_topic(harness)
            replies.append(await mes.request(topic, command(), timeout=10, published=queued))

        tasks.start_soon(ask)
        await queued.wait()  # the broker holds the command for the stopped instance's session
        async with running(harness.gateway("a")):
            await wait_until(lambda: replies)
    assert replies[0].errorcode is None
