"""Devices prove their equipment id (a token or a client certificate) and answer only their own
commands. Real sockets on 127.0.0.1; the hub has a recording sink instead of a recipe engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.equipment import EquipmentCommand
from gateway.errors import SettingsError
from gateway.testing import running, wait_until
from gateway.transport import NOT_PERMITTED
from gateway_msgpack_rpc.auth import token_digest
from gateway_msgpack_rpc.device import RpcDevice
from gateway_msgpack_rpc.protocol import NOT_AUTHORIZED, RpcError
from gateway_msgpack_rpc.testing import (
    Certificates,
    RecordingSink,
    rpc_binding,
    rpc_gateway,
)

pytestmark = pytest.mark.anyio

TOKENS = {"press": "press-secret-token", "camera": "camera-secret-token"}
PRESS = "com.example.press.v1"


def command(equipment: str = "press", correlation_id: str = "J1:press:1") -> EquipmentCommand:
    return EquipmentCommand(
        correlation_id=correlation_id,
        type=PRESS,
        equipment=equipment,
        scope="cell1",
        job_order_id=correlation_id.split(":")[0],
        action="press",
    )


def tokens_file(directory: Path) -> str:
    path = directory / "device-tokens"
    lines = ["# equipment id, SHA-256 of its token"]
    lines += [f"{name} {token_digest(token)}" for name, token in TOKENS.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@asynccontextmanager
async def token_station(tmp_path: Path) -> AsyncIterator[tuple[Gateway, RecordingSink, int]]:
    gateway = rpc_gateway(
        settings={"device_auth": "token", "device_tokens_file": tokens_file(tmp_path)}
    )
    sink = RecordingSink()
    gateway.equipment.attach(sink)
    async with running(gateway):
        yield gateway, sink, rpc_binding(gateway).settings.port


async def test_a_device_without_a_token_or_with_a_wrong_one_is_refused_and_disconnected(
    tmp_path: Path,
) -> None:
    async with token_station(tmp_path) as (gateway, _, port):
        for token in (None, "guess", TOKENS["camera"]):  # none, wrong, another device's
            with anyio.fail_after(5), pytest.raises(RpcError) as refused:
                async with RpcDevice.connect("127.0.0.1", port, "press", token=token):
                    pass
            assert refused.value.code == NOT_AUTHORIZED
            assert refused.value.message == "not authorized as equipment 'press'"
        async with RpcDevice.connect("127.0.0.1", port, "press", hello=False) as anonymous:
            with pytest.raises(RpcError) as refused:
                await anonymous.heartbeat()  # a heartbeat cannot name it without the token
            assert refused.value.code == NOT_AUTHORIZED
            await anonymous.wait_closed()
        assert not rpc_binding(gateway).is_connected("press")
        assert not (await gateway.equipment.liveness("press")).online
        async with RpcDevice.connect("127.0.0.1", port, "press", token=TOKENS["press"]) as press:
            assert press.welcome["equipment"] == "press"
            assert rpc_binding(gateway).is_connected("press")


async def test_a_device_with_credentials_cannot_answer_for_another_device(
    tmp_path: Path,
) -> None:
    async with (
        token_station(tmp_path) as (gateway, sink, port),
        RpcDevice.connect("127.0.0.1", port, "press", token=TOKENS["press"]) as press,
        RpcDevice.connect("127.0.0.1", port, "camera", token=TOKENS["camera"]) as camera,
    ):
        await gateway.equipment.send(command("press"))
        sent = await press.commands.receive()
        # The camera knows (or guesses) the correlation id and answers the press's command.
        (refusal,) = await camera.reply(sent, {"pressed": "forged"})
        assert refusal.errorcode == NOT_PERMITTED
        assert refusal.errormessage == (
            "equipment camera may not answer command J1:press:1: it went to press"
        )
        # Claiming to be the press in the event changes nothing: the connection says who.
        spoofed = sent.reply(source="urn:press", data={"pressed": "forged"})
        spoofed = spoofed.replace(extensions={**spoofed.extensions, "equipment": "press"})
        (again,) = await camera.publish(spoofed)
        assert again.errorcode == NOT_PERMITTED
        assert sink.replies == []
        assert await press.reply(sent, {"pressed": True}) == []
        await wait_until(lambda: sink.replies)
    (reply,) = sink.replies
    assert (reply.correlation_id, reply.data, reply.equipment) == (
        "J1:press:1",
        {"pressed": True},
        "press",
    )


async def test_a_request_is_answered_only_by_the_equipment_asked(tmp_path: Path) -> None:
    async with (
        token_station(tmp_path) as (gateway, _, port),
        RpcDevice.connect("127.0.0.1", port, "press", token=TOKENS["press"]) as press,
        RpcDevice.connect("127.0.0.1", port, "camera", token=TOKENS["camera"]) as camera,
    ):
        asked = CloudEvent(type=PRESS, source=gateway.source, correlationid="R1")

        async def answer_both() -> None:
            sent = await press.commands.receive()
            await camera.reply(sent, {"from": "camera"})  # not the request's answer
            await press.reply(sent, {"from": "press"})

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(answer_both)
            reply = await rpc_binding(gateway).request("press", asked, timeout=5)
    assert reply.data == {"from": "press"}


async def test_a_client_certificate_proves_the_equipment_id_it_names(
    certificates: Certificates,
) -> None:
    """The test device certificate's common name is "device"."""
    gateway = rpc_gateway(
        settings={
            "tls_cert_file": str(certificates.gateway_cert),
            "tls_key_file": str(certificates.gateway_key),
            "tls_ca_file": str(certificates.ca),
            "tls_client_auth": "true",
            "device_auth": "certificate",
        }
    )
    port = rpc_binding(gateway).settings.port
    context = certificates.device_client_context()
    async with running(gateway):
        with anyio.fail_after(5), pytest.raises(RpcError) as refused:
            async with RpcDevice.connect("127.0.0.1", port, "press", ssl_context=context):
                pass
        assert refused.value.code == NOT_AUTHORIZED
        async with RpcDevice.connect("127.0.0.1", port, "device", ssl_context=context) as device:
            assert device.welcome["equipment"] == "device"
            assert rpc_binding(gateway).is_connected("device")


def test_token_and_certificate_modes_need_their_settings(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="device_tokens_file: device_auth 'token' needs"):
        rpc_gateway(settings={"device_auth": "token"})
    bad = tmp_path / "tokens"
    bad.write_text("press not-a-digest\n")
    with pytest.raises(SettingsError, match=r"line 1: expected '<equipment id> sha256:"):
        rpc_gateway(settings={"device_auth": "token", "device_tokens_file": str(bad)})
    with pytest.raises(SettingsError, match="'certificate' needs TLS with client certificates"):
        rpc_gateway(settings={"device_auth": "certificate"})


async def test_a_server_beyond_loopback_will_not_believe_any_device_unless_told_to() -> None:
    """device_auth = none on 0.0.0.0 stops start-up, saying how to fix it; the explicit
    allow_unauthenticated_devices lets it start (a network the operator trusts)."""
    with pytest.raises(SettingsError) as error:
        rpc_gateway(settings={"host": "0.0.0.0"})
    assert "[msgpack_rpc]: device_auth" in str(error.value)
    assert "device_tokens_file" in str(error.value)
    assert "allow_unauthenticated_devices" in str(error.value)
    allowed = rpc_gateway(settings={"host": "0.0.0.0", "allow_unauthenticated_devices": "true"})
    async with running(allowed):
        assert rpc_binding(allowed).ready
