"""Test support for the MessagePack-RPC plugin, for its tests and for integration tests.

- ``rpc_gateway`` builds a gateway with this plugin (and given extra plugins) on a free port;
- ``RecordingSink`` is an equipment sink that keeps what the driver handed to the hub, for
  tests without a recipe engine;
- ``RawRpcClient`` writes bytes and reads decoded messages over a real socket, to send what a
  well-behaved peer never would (malformed and oversize frames);
- ``make_certificates`` makes a test CA and certificates with the ``openssl`` command.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgpack
from anyio.abc import ByteStream

from gateway.app import Gateway
from gateway.equipment import EquipmentEvent, EquipmentReply
from gateway.testing.services import free_port
from gateway_msgpack_rpc.binding import BINDING, MsgpackRpcBinding
from gateway_msgpack_rpc.driver import MsgpackRpcDriver


def rpc_gateway(
    *,
    settings: Mapping[str, str] | None = None,
    plugins: Mapping[str, object] | None = None,
    instance_id: str = "rpc-test",
    allow: str = "msgpack-rpc",
) -> Gateway:
    """A gateway loading ``allow`` plugins (and ``plugins``), its RPC server on a free port.

    ``settings`` are ``[msgpack_rpc]`` keys (``{"port": "0"}`` turns the server off).
    """
    environ = {
        "GATEWAY_PLUGINS_ALLOW": allow,
        "GATEWAY_GATEWAY_INSTANCE_ID": instance_id,
        "GATEWAY_MSGPACK_RPC_PORT": str(free_port()),
    }
    for key, value in (settings or {}).items():
        environ[f"GATEWAY_MSGPACK_RPC_{key.upper()}"] = value
    return Gateway.from_environment(None, environ, extra_plugins=dict(plugins or {}))


def rpc_binding(gateway: Gateway) -> MsgpackRpcBinding:
    binding = gateway.binding(BINDING)
    assert isinstance(binding, MsgpackRpcBinding)
    return binding


def rpc_driver(gateway: Gateway) -> MsgpackRpcDriver:
    driver = next(d for d in gateway.equipment.drivers if d.name == BINDING)
    assert isinstance(driver, MsgpackRpcDriver)
    return driver


@dataclass
class RecordingSink:
    """An equipment sink that records replies and events (attach it before the gateway runs)."""

    replies: list[EquipmentReply] = field(default_factory=list)
    events: list[EquipmentEvent] = field(default_factory=list)

    async def reply(self, reply: EquipmentReply) -> None:
        self.replies.append(reply)

    async def event(self, event: EquipmentEvent) -> None:
        self.events.append(event)


class RawRpcClient:
    """A bare MessagePack-RPC peer: any bytes out, decoded messages in."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)

    @classmethod
    @asynccontextmanager
    async def connect(cls, host: str, port: int) -> AsyncIterator[RawRpcClient]:
        async with await anyio.connect_tcp(host, port) as stream:
            yield cls(stream)

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def send_message(self, message: Any) -> None:
        await self.send(msgpack.packb(message, use_bin_type=True))

    async def receive(self, timeout: float = 5.0) -> Any:
        """The next message from the peer; ``EOFError`` if it closed the connection."""
        with anyio.fail_after(timeout):
            while True:
                for message in self._unpacker:
                    return message
                try:
                    self._unpacker.feed(await self.stream.receive())
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    raise EOFError("the peer closed the connection") from None

    async def request(self, msgid: int, method: str, *params: Any) -> list[Any]:
        """Send a well-formed request and return the response ``[1, msgid, error, result]``."""
        await self.send_message([0, msgid, method, list(params)])
        response: list[Any] = await self.receive()
        return response


@dataclass(frozen=True)
class Certificates:
    """A test CA and the certificates it signed for 127.0.0.1 / localhost: one for the
    gateway, one for the equipment (each good for both TLS server and client)."""

    ca: Path
    gateway_cert: Path
    gateway_key: Path
    device_cert: Path
    device_key: Path

    def device_client_context(self, *, with_certificate: bool = True) -> ssl.SSLContext:
        """What a device connecting to the gateway uses: trusts the test CA."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_certificate:
            context.load_cert_chain(self.device_cert, self.device_key)
        return context

    def device_server_context(self) -> ssl.SSLContext:
        """What an equipment server uses: requires a client certificate from the test CA."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.ca))
        context.load_cert_chain(self.device_cert, self.device_key)
        context.verify_mode = ssl.CERT_REQUIRED
        return context


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _leaf(directory: Path, name: str) -> None:
    (directory / f"{name}.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=directory,
    )  # fmt: skip


def make_certificates(directory: Path) -> Certificates:
    """Make a CA and two certificates it signs in ``directory``, with the openssl command."""
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=gateway test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    _leaf(directory, "gateway")
    _leaf(directory, "device")
    return Certificates(
        ca=directory / "ca.pem",
        gateway_cert=directory / "gateway.pem",
        gateway_key=directory / "gateway.key",
        device_cert=directory / "device.pem",
        device_key=directory / "device.key",
    )
