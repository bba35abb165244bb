"""What a misbehaving peer gets: malformed frames, oversize requests, floods, a peer that stops
reading. Each malformed frame is answered with an error naming the problem, reported to the
failure observers, and the next good request on the same connection works."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgpack
import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.equipment import EquipmentCommand
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.testing import running, wait_until
from gateway.transport import Processor, Subscription
from gateway_msgpack_rpc.codec import to_map
from gateway_msgpack_rpc.device import RpcDevice
from gateway_msgpack_rpc.protocol import RpcConnectionClosed
from gateway_msgpack_rpc.testing import RawRpcClient, RecordingSink, rpc_driver, rpc_gateway

pytestmark = pytest.mark.anyio


@dataclass
class FailureLog:
    """Records what the ``gateway_message_failed`` observers are told."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)

    @hookimpl
    def gateway_message_failed(self, binding: str, topic: str, code: str, reason: str) -> None:
        self.seen.append((binding, topic, code))


@asynccontextmanager
async def gateway_with(
    settings: dict[str, str] | None = None, **plugins: object
) -> AsyncIterator[tuple[Gateway, FailureLog]]:
    failures = FailureLog()
    gateway = rpc_gateway(settings=settings, plugins={"failures": failures, **plugins})
    gateway.equipment.attach(RecordingSink())
    async with running(gateway):
        yield gateway, failures


@asynccontextmanager
async def raw(gateway: Gateway) -> AsyncIterator[RawRpcClient]:
    port = gateway.settings.section("msgpack_rpc").port
    async with RawRpcClient.connect("127.0.0.1", port) as client:
        assert await client.request(1, "hello", "probe") == [1, 1, None, _welcome(gateway)]
        yield client


def _welcome(gateway: Gateway) -> dict[str, Any]:
    return {
        "equipment": "probe",
        "gateway": gateway.source,
        "heartbeat_timeout_seconds": 30.0,
        "max_request_bytes": gateway.settings.section("msgpack_rpc").max_request_bytes,
    }


def pack(value: Any) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


GOOD_EVENT = to_map(CloudEvent(type="com.example.qa.v1", source="urn:probe", id="e1"))

# (bytes sent, expected msgid of the error response, expected code, words of the message)
MALFORMED = {
    "garbage bytes": (b"\xc1\xc1 not msgpack", None, "parse-error", "not MessagePack"),
    "not an array": (pack("hello"), None, "invalid-message", "an array starting with 0, 1 or 2"),
    "unknown type": (pack([7, 1, "hello", []]), None, "invalid-message", "starting with 0, 1 or 2"),
    "short request": (pack([0, 5, "hello"]), 5, "invalid-message", "request has 4 elements, got 3"),
    "bad msgid": (pack([0, "x", "hello", []]), None, "invalid-message", "msgid must be an integer"),
    "method not text": (pack([0, 6, 42, []]), 6, "invalid-message", "method must be a string"),
    "params not array": (pack([0, 7, "hello", "probe"]), 7, "invalid-message", "params must be"),
    "unknown method": (pack([0, 8, "reboot", []]), 8, "method-not-found", "no method 'reboot'"),
    "params count": (pack([0, 9, "hello", []]), 9, "invalid-params", "hello takes 1 or 2 params"),
    "bad equipment id": (pack([0, 10, "heartbeat", ["a/b"]]), 10, "invalid-params", "'/'"),
    "other equipment": (pack([0, 11, "heartbeat", ["x"]]), 11, "invalid-params", "not 'x'"),
    "event not a map": (pack([0, 12, "publish", [[1]]]), 12, "invalid-request", "map of attrib"),
    "event without id": (
        pack([0, 13, "publish", [{k: v for k, v in GOOD_EVENT.items() if k != "id"}]]),
        13,
        "invalid-request",
        "id: is required",
    ),
    "event bad time": (
        pack([0, 14, "publish", [{**GOOD_EVENT, "time": "yesterday"}]]),
        14,
        "invalid-request",
        "time: is not an RFC 3339 timestamp",
    ),
    "event bad attribute type": (
        pack([0, 15, "publish", [{**GOOD_EVENT, "subject": 3}]]),
        15,
        "invalid-request",
        "subject: must be a string",
    ),
    "invalid utf-8": (
        pack([0, 16, "publish", ["xxxx"]]).replace(b"xxxx", b"\xff\xfe\xfd\xfc"),
        16,
        "parse-error",
        "not UTF-8",
    ),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
async def test_a_malformed_frame_gets_an_error_and_the_connection_stays_usable(case: str) -> None:
    data, msgid, code, words = MALFORMED[case]
    async with gateway_with() as (gateway, failures), raw(gateway) as client:
        await client.send(data)
        answer = await client.receive()
        assert answer[:2] == [1, msgid]
        assert answer[2]["code"] == code
        assert words in answer[2]["message"]
        assert answer[3] is None
        assert await client.request(100, "heartbeat", "probe") == [1, 100, None, True]
        assert await client.request(101, "publish", GOOD_EVENT) == [1, 101, None, []]
        await wait_until(lambda: failures.seen)
    assert failures.seen == [("msgpack-rpc", "rpc/probe", code)]


async def test_a_malformed_notification_is_only_logged() -> None:
    async with gateway_with() as (gateway, failures), raw(gateway) as client:
        await client.send(pack([2, "reboot", []]))
        await client.send(pack([2, "publish", ["not an event"]]))
        assert await client.request(100, "heartbeat", "probe") == [1, 100, None, True]
        await wait_until(lambda: len(failures.seen) == 2)
    assert [code for _, _, code in failures.seen] == ["method-not-found", "invalid-request"]


async def test_an_oversize_request_is_refused_and_skipped() -> None:
    settings = {"max_request_bytes": "2048"}
    async with gateway_with(settings) as (gateway, failures), raw(gateway) as client:
        big = to_map(CloudEvent(type="com.example.blob.v1", source="urn:p", data=b"x" * 100_000))
        await client.send_message([0, 7, "publish", [big]])
        answer = await client.receive()
        assert answer[:2] == [1, 7]
        assert answer[2]["code"] == "request-too-large"
        assert "2048" in answer[2]["message"]
        assert await client.request(8, "heartbeat", "probe") == [1, 8, None, True]
        assert failures.seen == [("msgpack-rpc", "rpc/probe", "request-too-large")]


async def test_an_oversize_request_past_the_skip_budget_closes_the_connection() -> None:
    settings = {"max_request_bytes": "2048", "max_skip_bytes": "8192"}
    async with gateway_with(settings) as (gateway, _), raw(gateway) as client:
        await client.send_message([0, 7, "publish", ["x" * 100_000]])
        answer = await client.receive()
        assert answer[2]["code"] == "request-too-large"
        with pytest.raises(EOFError):
            await client.receive()


async def test_a_frame_split_across_many_writes_is_decoded() -> None:
    async with gateway_with() as (gateway, _), raw(gateway) as client:
        frame = pack([0, 9, "publish", [GOOD_EVENT]]) + pack([0, 10, "heartbeat", ["probe"]])
        for byte in frame:
            await client.send(bytes([byte]))
        assert await client.receive() == [1, 9, None, []]
        assert await client.receive() == [1, 10, None, True]


@dataclass
class SlowProcessor:
    """Serves one event type slowly over RPC and records the highest concurrency."""

    running: int = 0
    most: int = 0

    @hookimpl
    def gateway_register_processors(
        self, register: Callable[[Processor], None], settings: Settings
    ) -> None:
        async def handle(event: CloudEvent) -> Sequence[CloudEvent]:
            self.running += 1
            self.most = max(self.most, self.running)
            await anyio.sleep(0.1)
            self.running -= 1
            return []

        subscriptions = [Subscription("rpc/+/publish")]
        types = frozenset({"com.example.slow.v1"})
        register(Processor("slow", subscriptions, handle, types, binding="msgpack-rpc"))


async def test_requests_beyond_the_concurrency_limit_wait_their_turn() -> None:
    slow = SlowProcessor()
    settings = {"max_concurrent_requests": "2"}
    async with gateway_with(settings, slow=slow) as (gateway, _):
        port = gateway.settings.section("msgpack_rpc").port
        async with RpcDevice.connect("127.0.0.1", port, "flooder") as device:
            results: list[list[CloudEvent]] = []

            async def publish() -> None:
                event = CloudEvent(type="com.example.slow.v1", source="urn:flooder")
                results.append(await device.publish(event))

            with anyio.fail_after(5):
                async with anyio.create_task_group() as tasks:
                    for _ in range(6):
                        tasks.start_soon(publish)
    assert results == [[]] * 6
    assert slow.most == 2


async def test_sending_to_a_peer_that_stopped_reading_gives_up_instead_of_hanging() -> None:
    settings = {"send_timeout_seconds": "0.3"}
    async with gateway_with(settings) as (gateway, _), raw(gateway):  # says hello, never reads
        driver = rpc_driver(gateway)

        async def send_until_the_buffers_are_full() -> None:
            for attempt in range(1, 1000):
                await driver.send(big_command(f"J1:a:{attempt}"))

        with anyio.fail_after(30), pytest.raises(RpcConnectionClosed, match="took no data"):
            await send_until_the_buffers_are_full()
        await wait_until(lambda: not driver.liveness.is_online("probe"))


def big_command(correlation_id: str) -> EquipmentCommand:
    return EquipmentCommand(
        correlation_id=correlation_id,
        type="com.example.big.v1",
        equipment="probe",
        scope="cell1",
        job_order_id="J1",
        action="a",
        parameters={"blob": "x" * 1_000_000},
    )
