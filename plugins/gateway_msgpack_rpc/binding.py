"""The MessagePack-RPC binding: a server for equipment, and connections to equipment servers.

Both kinds of connection are *sessions* of one equipment and offer the same methods (``hello``,
``heartbeat``, ``publish``), so equipment that is itself an RPC server may also publish over the
connection the gateway opened (``sessions``). The listener is in ``server``, the connections to
equipment servers and their ``command`` calls in ``client``. What arrives is handled here, in
``receive``: a reply that a ``request`` on this instance waits for goes to it, everything else to
the dispatcher on ``<topic_prefix>/<equipment id>/publish`` (where the equipment processor, or any
other processor registered for this binding, takes it). The gateway's way to the equipment is
``publish``: a ``command`` notification to connected equipment, a ``command`` call to equipment
servers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import Listener, TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from gateway.cloudevents import CloudEvent
from gateway.equipment import EQUIPMENT_ATTRIBUTE, EquipmentCommand, EquipmentDriver
from gateway.errors import GatewayError, SettingsError
from gateway.transport import Dispatcher
from gateway_msgpack_rpc.auth import DeviceAuthenticator
from gateway_msgpack_rpc.client import RpcClient
from gateway_msgpack_rpc.codec import to_map
from gateway_msgpack_rpc.forwarding import Forwarding
from gateway_msgpack_rpc.liveness import Liveness
from gateway_msgpack_rpc.server import RpcServer
from gateway_msgpack_rpc.sessions import EquipmentOffline, Sessions
from gateway_msgpack_rpc.settings import (
    SECTION,
    MsgpackRpcSettings,
    RemoteEquipment,
    equipment_id_problem,
)

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

BINDING = "msgpack-rpc"

__all__ = ["BINDING", "EquipmentOffline", "MsgpackRpcBinding"]


class MsgpackRpcBinding:
    """The ``msgpack-rpc`` binding: server and client sessions, events in and commands out."""

    name = BINDING

    def __init__(self, settings: MsgpackRpcSettings, *, source: str) -> None:
        self.settings = settings
        self.source = source
        self.liveness = Liveness(ttl_seconds=settings.heartbeat_timeout_seconds)
        self.known = _known_equipment(settings)
        self.sessions = Sessions(
            settings,
            self.liveness,
            source=source,
            receive=self.receive,
            report=self.report,
            authenticator=DeviceAuthenticator.from_settings(settings),
        )
        self.server = RpcServer(self.sessions)
        self.client = RpcClient(self.sessions)
        # correlation id -> (the equipment asked, where its answer goes)
        self._pending: dict[str, tuple[str, MemoryObjectSendStream[CloudEvent]]] = {}
        self._gateway: Gateway | None = None
        self._serving = False

    @property
    def remote(self) -> dict[str, RemoteEquipment]:
        """The equipment servers the gateway connects to, by equipment id."""
        return self.client.remote

    @property
    def address(self) -> tuple[str, int] | None:
        """Where the server listens, while it does."""
        return self.server.address

    # -- what equipment there is -------------------------------------------------------------

    def knows(self, equipment_id: str) -> bool:
        """Configured, listed as known, or seen since start: commands for it are ours."""
        return (
            equipment_id in self.remote
            or equipment_id in self.known
            or self.liveness.status(equipment_id) is not None
        )

    def is_connected(self, equipment_id: str) -> bool:
        return self.sessions.is_connected(equipment_id)

    # -- running -----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Serving: the server listens (when configured). Equipment being offline does not make
        the gateway unready; liveness reports it."""
        return self._serving

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        self._gateway = gateway
        self.liveness.attach(gateway.equipment, owners=gateway.state.find(Forwarding))
        self.sessions.served_elsewhere = lambda equipment_id: served_elsewhere(
            gateway.equipment.drivers, equipment_id
        )
        listener = await self.server.listen()
        async with anyio.create_task_group() as tasks:
            accepting = anyio.CancelScope()
            if listener is not None:
                tasks.start_soon(self._accept, listener, tasks, accepting)
            self.client.start(tasks, gateway.closing)
            task_status.started()
            self._serving = True
            await gateway.closing.wait()
            self._serving = False
            accepting.cancel()
            self.sessions.close_all("gateway stopping")
        self.client.stop()
        log.info("MessagePack-RPC binding stopped")

    async def _accept(
        self, listener: Listener[Any], tasks: TaskGroup, accepting: anyio.CancelScope
    ) -> None:
        with accepting:
            await self.server.serve(listener, tasks)

    # -- events in ---------------------------------------------------------------------------

    async def receive(self, equipment_id: str, event: CloudEvent) -> list[CloudEvent]:
        """An event from equipment (published, or in a command's result); returns the replies.

        A reply a ``request`` of this instance waits for goes to it, if it comes from the
        equipment asked; anything else is dispatched, marked with the sender's id in the
        ``equipment`` extension (the connection says who sent it, whatever the event claims).
        A dispatch that fails transiently is retried until it succeeds or the gateway stops.
        """
        asked, waiting = self._pending.get(event.correlationid or "", (None, None))
        if waiting is not None and asked == equipment_id:
            try:
                waiting.send_nowait(event)
            except anyio.WouldBlock:
                log.info("second reply for correlation %s ignored", event.correlationid)
            return []
        extensions = {**event.extensions, EQUIPMENT_ATTRIBUTE: equipment_id}
        topic = f"{self.settings.topic_prefix}/{equipment_id}/publish"
        dispatcher = self._dispatcher()
        marked = event.replace(extensions=extensions)
        assert self._gateway is not None
        # A failure that may pass (the store away) is tried again before the equipment gets
        # its answer: what it published is recorded before it hears "accepted". If the
        # gateway stops first, the equipment gets an error and may publish it again.
        return await self._gateway.resilience.retry(
            "msgpack-rpc.handlers",
            lambda: dispatcher.dispatch(marked, binding=self.name, topic=topic),
            stop=self._gateway.closing,
            logger=log,
        )

    def report(self, where: str, code: str, message: str) -> None:
        """Log and count a malformed frame or failed request (the host's failure observers)."""
        topic = f"{self.settings.topic_prefix}/{where}"
        if self._gateway is None:
            log.warning("rejected message on %s %s: %s: %s", self.name, topic, code, message)
            return
        self._gateway.dispatcher.reject(binding=self.name, topic=topic, code=code, error=message)

    def _dispatcher(self) -> Dispatcher:
        if self._gateway is None:
            raise GatewayError("the MessagePack-RPC binding is not running")
        return self._gateway.dispatcher

    # -- events out --------------------------------------------------------------------------

    async def publish(
        self,
        topic: str,
        event: CloudEvent,
        *,
        retain: bool = False,
        qos: int = 1,
        response_topic: str | None = None,  # replies come back on the same connection
    ) -> None:
        """Send ``event`` as a ``command`` to the equipment whose id is ``topic``.

        Returns once the frame is written (``retain`` and ``qos`` do not apply). To equipment
        that is an RPC server it is a call, whose result is received in the background
        (``receive``); to connected equipment a notification, answered by a ``publish``.
        Raises ``EquipmentOffline`` when the equipment is not connected and
        ``RpcConnectionClosed`` when the frame could not be written: the caller's retry
        decides, nothing is re-sent here.
        """
        connection = self.sessions.connection_for(topic)
        if topic in self.remote:
            await self.client.command(topic, event, connection)
        else:
            await connection.notify("command", to_map(event))

    async def request(self, topic: str, event: CloudEvent, *, timeout: float) -> CloudEvent:
        """Send ``event`` to equipment ``topic`` and wait for the event answering it."""
        correlation = event.correlationid or event.id
        if correlation in self._pending:
            raise GatewayError(f"a request with correlation {correlation!r} is already waiting")
        event = event.replace(correlationid=correlation)
        send, replies = anyio.create_memory_object_stream[CloudEvent](1)
        self._pending[correlation] = (topic, send)
        try:
            await self.publish(topic, event)
            with anyio.fail_after(timeout):
                return await replies.receive()
        except TimeoutError:
            raise GatewayError(
                f"no reply to {event.type} from {topic} within {timeout} s"
            ) from None
        finally:
            del self._pending[correlation]
            send.close()
            replies.close()


def _known_equipment(settings: MsgpackRpcSettings) -> frozenset[str]:
    for equipment_id in settings.known_equipment:
        problem = equipment_id_problem(equipment_id)
        if problem is not None:
            raise SettingsError(f"{SECTION}.known_equipment", problem)
    return frozenset(settings.known_equipment)


def served_elsewhere(drivers: Iterable[EquipmentDriver], equipment_id: str) -> str | None:
    """The name of a driver other than this one that serves ``equipment_id`` by name (a
    catch-all driver claims no name): one equipment id, one driver."""
    probe = EquipmentCommand("", "", equipment_id, "", "", "")
    for driver in drivers:
        if driver.name == BINDING or getattr(driver, "catch_all", False):
            continue
        if driver.serves(probe):
            return str(driver.name)
    return None
