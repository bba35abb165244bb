"""TLS on both sides, with certificates made by the openssl CLI for this test session."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from gateway.cloudevents import CloudEvent
from gateway.equipment import EquipmentCommand
from gateway.testing import running, wait_until
from gateway_msgpack_rpc.device import RpcDevice, RpcEquipmentServer
from gateway_msgpack_rpc.protocol import RpcConnectionClosed
from gateway_msgpack_rpc.testing import (
    Certificates,
    RecordingSink,
    rpc_binding,
    rpc_gateway,
)

pytestmark = pytest.mark.anyio


def command(equipment: str) -> EquipmentCommand:
    return EquipmentCommand(
        correlation_id="J1:a:1",
        type="com.example.a.v1",
        equipment=equipment,
        scope="cell1",
        job_order_id="J1",
        action="a",
    )


def tls_settings(certificates: Certificates) -> dict[str, str]:
    return {
        "tls_cert_file": str(certificates.gateway_cert),
        "tls_key_file": str(certificates.gateway_key),
        "tls_ca_file": str(certificates.ca),
    }


async def test_equipment_connects_over_tls_with_a_client_certificate(
    certificates: Certificates,
) -> None:
    gateway = rpc_gateway(settings={**tls_settings(certificates), "tls_client_auth": "true"})
    sink = RecordingSink()
    gateway.equipment.attach(sink)
    port = gateway.settings.section("msgpack_rpc").port
    context = certificates.device_client_context()
    async with (
        running(gateway),
        RpcDevice.connect("127.0.0.1", port, "tool", ssl_context=context) as device,
    ):
        await gateway.equipment.send(command("tool"))
        sent = await device.commands.receive()
        await device.reply(sent, {"done": True})
        await wait_until(lambda: sink.replies)
    assert sink.replies[0].data == {"done": True}


async def test_a_device_without_a_client_certificate_is_refused(
    certificates: Certificates,
) -> None:
    gateway = rpc_gateway(settings={**tls_settings(certificates), "tls_client_auth": "true"})
    port = gateway.settings.section("msgpack_rpc").port
    context = certificates.device_client_context(with_certificate=False)
    async with running(gateway):
        with anyio.fail_after(5), pytest.raises(RpcConnectionClosed, match="before hello"):
            # TLS 1.3 reports the refusal after the handshake: at the first exchange.
            async with RpcDevice.connect("127.0.0.1", port, "tool", ssl_context=context):
                pass
        assert not rpc_binding(gateway).is_connected("tool")


async def test_a_plain_tcp_client_gets_nothing_from_a_tls_server(
    certificates: Certificates,
) -> None:
    settings = {**tls_settings(certificates), "connect_timeout_seconds": "0.3"}
    gateway = rpc_gateway(settings=settings)
    port = gateway.settings.section("msgpack_rpc").port
    async with running(gateway):
        # A msgpack frame looks like the start of an SSLv2 hello: the handshake times out.
        with anyio.fail_after(5), pytest.raises(RpcConnectionClosed):
            async with RpcDevice.connect("127.0.0.1", port, "tool"):
                pass


async def test_the_gateway_connects_to_an_equipment_server_over_mutual_tls(
    certificates: Certificates,
) -> None:
    async def answer(command: CloudEvent) -> Sequence[CloudEvent]:
        return [command.reply(source="urn:press", data={"ok": True})]

    context = certificates.device_server_context()
    async with RpcEquipmentServer.serve(answer, ssl_context=context) as server:
        settings = {
            **tls_settings(certificates),
            "port": "0",
            "equipment": f"press=tls://127.0.0.1:{server.port}",
        }
        gateway = rpc_gateway(settings=settings)
        sink = RecordingSink()
        gateway.equipment.attach(sink)
        async with running(gateway):
            await wait_until(lambda: rpc_binding(gateway).is_connected("press"))
            await gateway.equipment.send(command("press"))
            await wait_until(lambda: sink.replies)
    assert sink.replies[0].data == {"ok": True}
