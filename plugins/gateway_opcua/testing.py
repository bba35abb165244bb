"""Test support for the OPC UA server: a client that logs in the way an MES would, and a station.

``connect`` opens an asyncua client session with Basic256Sha256 (SignAndEncrypt by default),
its own self-signed application certificate and a user name and password; ``JobsClient`` calls
the job methods of one scope by name and collects its status events.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream
from anyio.streams.memory import MemoryObjectSendStream
from asyncua import Client, Node, ua
from asyncua.crypto.cert_gen import setup_self_signed_certificate
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256
from cryptography.x509.oid import ExtendedKeyUsageOID

from gateway.app import Gateway
from gateway.jobmethods import JobMethod
from gateway.testing.mqtt import connect_test_client
from gateway_jobs.testing import JobsMes
from gateway_opcua.convert import from_json, to_json, ua_type
from gateway_opcua.model import GATEWAY_URI, ISA95_URI, JOBS_URI

CLIENT_URI = "urn:station-gateway:test-mes"
MODES = {
    "Sign": ua.MessageSecurityMode.Sign,
    "SignAndEncrypt": ua.MessageSecurityMode.SignAndEncrypt,
}


async def client_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed client application certificate (made once per directory)."""
    certificate, key = directory / "mes-cert.der", directory / "mes-key.pem"
    await setup_self_signed_certificate(
        key,
        certificate,
        CLIENT_URI,
        socket.gethostname(),
        [ExtendedKeyUsageOID.CLIENT_AUTH],
        {"commonName": "test MES"},
    )
    return certificate, key


@asynccontextmanager
async def connect(
    endpoint: str,
    certificates: tuple[Path, Path] | None,
    *,
    username: str | None,
    password: str | None,
    mode: str = "SignAndEncrypt",
    load_types: bool = False,
) -> AsyncIterator[Client]:
    """A logged-in session; ``certificates`` ``None``: no message security.

    ``load_types`` reads the ISA-95 structure definitions from the server, as a client in
    another process must (in the server's own process asyncua shares them already).
    """
    client = Client(endpoint, timeout=30)
    client.application_uri = CLIENT_URI
    if username is not None:
        client.set_user(username)
    if password is not None:
        client.set_password(password)
    if certificates is not None:
        certificate, key = certificates
        await client.set_security(
            SecurityPolicyBasic256Sha256, str(certificate), str(key), mode=MODES[mode]
        )
    async with client:
        if load_types:
            await client.load_data_type_definitions()
        yield client


@dataclass
class _Events:
    send: MemoryObjectSendStream[Any]

    def event_notification(self, event: Any) -> None:
        self.send.send_nowait(event)


@dataclass
class JobsClient:
    """The JobManagement of one scope, through an open session."""

    client: Client
    scope: str
    namespaces: dict[str, int] = field(default_factory=dict)

    async def _ns(self, uri: str) -> int:
        if uri not in self.namespaces:
            self.namespaces[uri] = await self.client.get_namespace_index(uri)
        return self.namespaces[uri]

    async def job_management(self) -> Node:
        return self.client.get_node(
            ua.NodeId(f"{self.scope}.JobManagement", await self._ns(GATEWAY_URI))
        )

    async def node(self, *path: str) -> Node:
        """A node below JobManagement by browse names (``JobOrderControl``, ``Store``)."""
        node = await self.job_management()
        for name in path:
            uri = JOBS_URI if name in ("JobOrderControl", "JobOrderResults") else ISA95_URI
            node = await node.get_child(ua.QualifiedName(name, await self._ns(uri)))
        return node

    async def raw_call(self, method: JobMethod, *arguments: ua.Variant) -> ua.CallMethodResult:
        """The CallMethodResult itself: status code and InputArgumentResults."""
        parent = "JobOrderResults" if method.is_query else "JobOrderControl"
        request = ua.CallMethodRequest(
            ObjectId=(await self.node(parent)).nodeid,
            MethodId=(await self.node(parent, method.value)).nodeid,
            InputArguments=list(arguments),
        )
        [result] = await self.client.uaclient.call([request])
        return result

    async def call(self, method: JobMethod, *arguments: ua.Variant) -> list[Any]:
        """The output arguments of a Good call (``UaStatusCodeError`` otherwise)."""
        result = await self.raw_call(method, *arguments)
        result.StatusCode.check()
        return [variant.Value for variant in result.OutputArguments]

    async def store(self, order: Mapping[str, Any], method: JobMethod = JobMethod.STORE) -> int:
        names = await self._ns(ISA95_URI)
        job_order = from_json(dict(order), ua_type("ISA95JobOrderDataType"), "JobOrder", names)
        [status] = await self.call(
            method, ua.Variant(job_order), ua.Variant([], ua.VariantType.LocalizedText)
        )
        return int(status)

    async def act(self, method: JobMethod, job_order_id: str) -> int:
        [status] = await self.call(
            method, ua.Variant(job_order_id), ua.Variant([], ua.VariantType.LocalizedText)
        )
        return int(status)

    async def raw_job_response(self, job_order_id: str) -> tuple[int, Any]:
        """RequestJobResponseByJobOrderID: ReturnStatus and the ISA95JobResponseDataType."""
        response, status = await self.call(
            JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID, ua.Variant(job_order_id)
        )
        return int(status), response

    async def job_response(self, job_order_id: str) -> tuple[int, dict[str, Any] | None]:
        """RequestJobResponseByJobOrderID: ReturnStatus and the response as JSON."""
        status, response = await self.raw_job_response(job_order_id)
        names = await self._ns(ISA95_URI)
        return status, None if response is None else to_json(response, names)

    async def job_order_list(self) -> list[dict[str, Any]]:
        value = await (await self.node("JobOrderControl", "JobOrderList")).read_value()
        names = await self._ns(ISA95_URI)
        return [to_json(entry, names) for entry in value or []]

    async def receiver_variable(self, name: str) -> Any:
        """A JobOrderControl variable (``WorkMaster``, ``PersonnelID``...) as JSON."""
        value = await (await self.node("JobOrderControl", name)).read_value()
        if isinstance(value, list):
            return [entry if isinstance(entry, str) else to_json(entry) for entry in value]
        return value

    @asynccontextmanager
    async def events(self) -> AsyncIterator[ObjectReceiveStream[Any]]:
        """The scope's ISA95JobOrderStatusEventType events, as they arrive."""
        send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=1000)
        subscription = await self.client.create_subscription(20, _Events(send))
        event_type = self.client.get_node(ua.NodeId(1006, await self._ns(ISA95_URI)))
        await subscription.subscribe_events(await self.job_management(), event_type)
        try:
            yield receive
        finally:
            await subscription.delete()
            send.close()


# -- a station served over OPC UA ------------------------------------------------------------

USER, PASSWORD = "mes", "s3cret-for-tests"
SCOPE = "cell1"


@dataclass
class OpcStation:
    name: str
    mqtt_url: str
    endpoints: list[str]  # instance a, instance b
    certificates: tuple[Path, Path]
    gateways: list[Gateway]

    @asynccontextmanager
    async def client(
        self, instance: int = 0, scope: str = SCOPE, **options: object
    ) -> AsyncIterator[JobsClient]:
        async with connect(
            self.endpoints[instance],
            self.certificates,
            username=USER,
            password=PASSWORD,
            **options,  # type: ignore[arg-type]
        ) as session:
            yield JobsClient(session, scope)

    @asynccontextmanager
    async def mes(self, scope: str = SCOPE) -> AsyncIterator[JobsMes]:
        async with connect_test_client(self.mqtt_url) as client:
            yield JobsMes(client, self.name, scope)

    def service(self, instance: int = 0) -> Any:
        """The instance's ``OpcUaService``."""
        [service] = [s for s in self.gateways[instance].services if s.name == "opcua"]
        return service


def station_environment(
    name: str, mqtt_url: str, redis_url: str, data_dir: Path, instance: str, port: int, role: str
) -> dict[str, str]:
    simulator = {
        "enabled": "true",
        "topic_prefix": f"{name}-sim",
        "position_seconds": "0.05",
        "tighten_seconds": "0.05",
        "inspect_seconds": "0.1",
        "heartbeat_seconds": "0.2",
        "seed": "1",
    }
    return {
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": name,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": name,
        "GATEWAY_GATEWAY_INSTANCE_ID": f"{name}-{instance}",
        "GATEWAY_GATEWAY_ROLE": role,
        "GATEWAY_GATEWAY_DATA_DIR": str(data_dir),
        "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
        "GATEWAY_JOBS_TOPIC_PREFIX": name,
        "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
        "GATEWAY_MSGPACK_RPC_PORT": "0",
        "GATEWAY_OPCUA_ENABLED": "true",
        "GATEWAY_OPCUA_ENDPOINT": f"opc.tcp://127.0.0.1:{port}",
        "GATEWAY_OPCUA_USERNAME": USER,
        "GATEWAY_OPCUA_PASSWORD": PASSWORD,
        "GATEWAY_OPCUA_SCOPES": f"{SCOPE},cell2",
        "GATEWAY_OPCUA_CONFIGURATION_POLL_SECONDS": "0.1",
        **{f"GATEWAY_SIMULATOR_{key.upper()}": value for key, value in simulator.items()},
    }
