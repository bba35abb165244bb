"""The aiomqtt client on a real mosquitto: packets leave when they are published.

aiomqtt alone hands each packet to the event loop, which writes it once it next finds the
socket writable; the gateway's client writes it at once, and leaves only what the socket
cannot take to the loop.
"""

from __future__ import annotations

import socket

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from gateway.testing.services import mosquitto, running
from gateway_mqtt.client import AiomqttClient, AiomqttConnector, ConnectionLost
from gateway_mqtt.settings import MqttSettings

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_a_packet_is_written_when_it_is_queued_not_a_loop_turn_later(
    mqtt_url: str, unique: str
) -> None:
    connector = AiomqttConnector(MqttSettings(url=mqtt_url), f"{unique}-writer")
    async with connector.connect() as client:
        assert isinstance(client, AiomqttClient)
        paho = client._client._client
        # paho's own publish queues the packet; no await in between lets the loop write it.
        paho.publish(f"{unique}/now", b"x", qos=0)
        assert not paho.want_write()


async def test_what_the_socket_cannot_take_at_once_is_written_when_it_drains(
    mqtt_url: str, unique: str
) -> None:
    topic = f"{unique}/large"
    payload = bytes(range(256)) * 4096  # 1 MiB, through a send buffer made small
    received = anyio.Event()
    got: list[bytes] = []
    async with (
        AiomqttConnector(MqttSettings(url=mqtt_url), f"{unique}-reader").connect() as reader,
        AiomqttConnector(MqttSettings(url=mqtt_url), f"{unique}-writer").connect() as writer,
    ):
        await reader.subscribe({topic: 1})

        async def read() -> None:
            async for incoming in reader.messages():
                incoming.ack()
                got.append(bytes(incoming.message.payload))
                received.set()
                return

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            paho = writer._client._client  # type: ignore[attr-defined]
            paho.socket().setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            paho.publish(topic, payload, qos=1)
            assert paho.want_write()  # the rest waits for the socket to drain
            with anyio.fail_after(30):
                await received.wait()
    assert got == [payload]


async def test_a_write_that_fails_at_once_ends_the_connection_as_aiomqtt_would(
    mqtt_url: str, unique: str
) -> None:
    broken = BrokenPipeError("the broker went away mid-write")
    connector = AiomqttConnector(MqttSettings(url=mqtt_url), f"{unique}-broken")

    async def publish_on_a_broken_socket() -> None:
        async with connector.connect() as client:
            aiomqtt_client = client._client  # type: ignore[attr-defined]

            def fail() -> None:
                raise broken

            aiomqtt_client._client.loop_write = fail
            aiomqtt_client._client.publish(f"{unique}/lost", b"x", qos=0)
            assert aiomqtt_client._disconnected.exception() is broken
            async for _ in client.messages():  # the connection reports itself lost
                pass

    with pytest.raises(ConnectionLost):
        await publish_on_a_broken_socket()


async def test_a_writer_asked_for_off_the_loop_is_not_registered_once_the_socket_closed(
    mqtt_url: str, unique: str
) -> None:
    """paho asks for a writer from its connecting thread; when the broker refuses the TLS
    handshake, the socket is closed before the loop registers it. aiomqtt registered the
    stale number, and the loop failed on it (seen in CI as an error after the test)."""
    connector = AiomqttConnector(MqttSettings(url=mqtt_url), f"{unique}-stale")
    async with connector.connect() as client:
        aiomqtt_client = client._client  # type: ignore[attr-defined]
        paho = aiomqtt_client._client
        stale = socket.socket()

        def connect_and_fail() -> None:  # paho's connecting thread, as the broker refuses
            aiomqtt_client._on_socket_register_write(paho, None, stale)
            stale.close()

        await anyio.to_thread.run_sync(connect_and_fail)
        await anyio.lowlevel.checkpoint()  # the loop has run what the thread scheduled
        paho.publish(f"{unique}/after", b"x", qos=0)  # the real socket still writes
        assert not paho.want_write()


# -- the windows of unacknowledged messages ------------------------------------------------------


async def test_the_broker_hands_over_as_many_unacknowledged_messages_as_the_handler_budget(
    mqtt_url: str, unique: str
) -> None:
    budget = 30  # mosquitto's own window (max_inflight_messages) is 20
    topic = f"{unique}/work"
    settings = MqttSettings(url=mqtt_url, max_concurrent_handlers=budget)
    async with (
        AiomqttConnector(settings, f"{unique}-reader").connect() as reader,
        AiomqttConnector(MqttSettings(url=mqtt_url), f"{unique}-writer").connect() as writer,
    ):
        await reader.subscribe({topic: 1})
        paho = writer._client._client  # type: ignore[attr-defined]
        for number in range(budget + 5):
            paho.publish(topic, str(number).encode(), qos=1)
        held = []
        with anyio.fail_after(10):
            async for incoming in reader.messages():  # none acknowledged until the budget's in
                held.append(incoming)
                if len(held) == budget:
                    break
            for incoming in held:
                incoming.ack()
            rest = []
            async for incoming in reader.messages():
                incoming.ack()
                rest.append(incoming)
                if len(rest) == 5:
                    break
    numbers = [int(incoming.message.payload) for incoming in [*held, *rest]]
    assert numbers == list(range(budget + 5))


async def test_the_client_sends_as_many_unacknowledged_messages_as_the_broker_takes(
    unique: str,
) -> None:
    with running(mosquitto(extra_config="max_inflight_messages 50")) as broker:
        url = f"mqtt://127.0.0.1:{broker.port}"
        async with AiomqttConnector(MqttSettings(url=url), f"{unique}-sender").connect() as client:
            paho = client._client._client  # type: ignore[attr-defined]
            assert paho.max_inflight_messages == 50  # the broker's Receive Maximum, not 20
