"""One scope as a Sparkplug edge node: the lease, the connection, and what is published when.

While this instance holds the scope's lease (``lease``) it runs a term: a new ``bdSeq``, a
connection of its own whose Will is the NDEATH, NBIRTH and the DBIRTHs, then

- every status event of the scope (``gateway.job_methods.status_feed``: changes made on any
  instance) moves the slot of its job and the queue figures at once, in the order the events
  happened;
- every ``poll_seconds`` the rest is read through the host's API (the queue, each slot job's
  summary and recipe progress, equipment liveness and last commands) and what changed is
  published: liveness has no event (it is a time to live in the store), nor do steps on
  another instance;
- an NCMD ``Node Control/Rebirth`` is answered with NBIRTH and every DBIRTH;
- with ``primary_host_id`` set, births wait for the host's STATE to say it is online, and a
  host going offline ends the term.

A term ends when the lease cannot be renewed (or stopping): the NDEATH is published before the
clean disconnect (which drops the Will). A killed instance's NDEATH is its Will.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import aiomqtt
import anyio

from gateway.errors import GatewayError
from gateway.jobmethods import JobStatus
from gateway_sparkplug.connection import BrokerAddress, edge_connection
from gateway_sparkplug.edge import REBIRTH, EdgeNode, Message
from gateway_sparkplug.lease import ScopeLease
from gateway_sparkplug.metrics import SparkplugMetrics
from gateway_sparkplug.payloads import BadPayload, decode_commands
from gateway_sparkplug.reader import ScopeReader
from gateway_sparkplug.settings import SparkplugSettings
from gateway_sparkplug.topics import MessageType, state_topic, topic

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)


class TermEnded(GatewayError):
    """The lease is lost, or the primary host went offline: stop speaking."""


class ScopeSpeaker:
    def __init__(
        self,
        gateway: Gateway,
        scope: str,
        settings: SparkplugSettings,
        broker: BrokerAddress,
        version: str,
        metrics: SparkplugMetrics,
    ) -> None:
        self.gateway = gateway
        self.scope = scope
        self.settings = settings
        self.broker = broker
        self.version = version
        self.metrics = metrics
        self.token = f"{gateway.instance_id} {time.time_ns()}"
        store = gateway.store
        assert store is not None  # the plugin registers the service only with a store
        self.store = store
        self.lease = ScopeLease(store, scope, self.token, settings.lease_seconds)
        self.speaking = False
        self.stopped = anyio.Event()  # set once ``run`` returned (the last term ended)
        self.awaiting_host = False  # connected, waiting for the primary host's STATE
        self.ignored_commands = 0
        self.bd_seq: int | None = None
        self.reader = ScopeReader(gateway, store, scope, settings, version)
        # Per term: the session and its connection; the lock keeps reads and publishes of
        # events, polls and rebirths from interleaving (seq and the diff are one sequence).
        self._edge: EdgeNode | None = None
        self._client: aiomqtt.Client | None = None
        self._lock = anyio.Lock()

    # -- the lease ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Speak whenever the lease is ours, until the gateway stops."""
        stopping = self.gateway.stopping
        outage = self.gateway.resilience.outage(f"sparkplug.{self.scope}", logger=log)
        try:
            while not stopping.is_set():
                try:
                    if await self.lease.acquire():
                        await self._term()
                        continue  # try again at once: a host offline, a lost lease's end
                    outage.succeeded()
                except Exception as error:
                    wait = min(self.lease.renew_interval, outage.failed(error))
                    await outage.pause(wait, stopping)
                    continue
                with anyio.move_on_after(self.lease.renew_interval):
                    await stopping.wait()
        finally:
            outage.close()
            self.stopped.set()

    async def _term(self) -> None:
        """One term: connect, be born, speak until the lease or the host is lost.

        A term that ends normally (stopping, lease lost, host offline) returns and the lease
        is tried again at once; a broker that cannot be reached raises, and ``run`` backs off.
        """
        self.bd_seq = await self.lease.next_bd_seq()
        edge = EdgeNode(self.settings.group_id, self.scope, self.bd_seq, _now_ms)
        death = edge.death()
        client_id = f"spb-{self.settings.group_id}-{self.scope}-{self.gateway.instance_id}"[:128]
        try:
            connecting = edge_connection(self.broker, client_id, death.topic, death.payload)
            async with connecting as client:
                self._client = client
                try:
                    await self._speak(client, edge)
                finally:
                    self.speaking = False
                    self._edge = None
                    self._client = None
                    self.metrics.speaking.labels(self.scope).set(0)
                    await self._say_death(client, death)
        except Exception as error:
            error = _single(error)
            if not isinstance(error, TermEnded):
                raise error from None
            log.info("sparkplug: %s: %s", self.scope, error)
        finally:
            await self._release()

    async def _say_death(self, client: aiomqtt.Client, death: Message) -> None:
        """The Will goes only when the connection is lost: a clean end says it itself."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            try:
                await client.publish(death.topic, death.payload, qos=1)
            except aiomqtt.MqttError as error:  # the connection is gone: the broker sends the Will
                log.debug("sparkplug: %s NDEATH not sent: %s", self.scope, error)
                return
            self.metrics.messages.labels(MessageType.NDEATH.value).inc()
            log.info("sparkplug: %s NDEATH (bdSeq %d)", self.scope, self.bd_seq)

    async def _release(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            try:
                await self.lease.release()
            except Exception as error:  # it runs out by itself
                log.debug("sparkplug: lease of %s not released: %s", self.scope, error)

    async def _speak(self, client: aiomqtt.Client, edge: EdgeNode) -> None:
        host_online = anyio.Event()
        await client.subscribe(topic(self.settings.group_id, MessageType.NCMD, self.scope), qos=1)
        if self.settings.primary_host_id:
            await client.subscribe(state_topic(self.settings.primary_host_id), qos=1)
        else:
            host_online.set()
        methods = self.gateway.job_methods
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._until_stopping, tasks.cancel_scope)
            tasks.start_soon(self._commands, client, edge, host_online)
            tasks.start_soon(self._keep_lease)
            self.awaiting_host = not host_online.is_set()
            await host_online.wait()
            self.awaiting_host = False
            async with methods.status_feed([self.scope]) as feed:
                # Read after entering the feed: nothing that changes later is missed.
                await self.reader.load()
                async with self._lock:
                    node, devices = await self.reader.read()
                    self._edge = edge
                    await self._publish(edge.birth(node, devices))
                self.speaking = True
                self.metrics.terms.inc()
                self.metrics.speaking.labels(self.scope).set(1)
                log.info(
                    "sparkplug: speaking for %s as %s/%s (bdSeq %d)",
                    self.scope,
                    self.settings.group_id,
                    self.scope,
                    edge.bd_seq,
                )
                tasks.start_soon(self._poll, edge)
                async for status in feed:
                    await self._on_status(edge, status)

    async def _until_stopping(self, scope: anyio.CancelScope) -> None:
        await self.gateway.stopping.wait()
        scope.cancel()

    async def _keep_lease(self) -> None:
        while True:
            await anyio.sleep(self.lease.renew_interval)
            try:
                held = await self.lease.acquire()
            except Exception as error:
                if not self.lease.valid:
                    raise TermEnded(f"lease not renewed ({error})") from None
                continue
            if not held:
                raise TermEnded("another instance holds the lease")

    async def _commands(self, client: aiomqtt.Client, edge: EdgeNode, online: anyio.Event) -> None:
        async for message in client.messages:
            name = str(message.topic)
            payload = message.payload if isinstance(message.payload, bytes) else b""
            if self.settings.primary_host_id and name == state_topic(self.settings.primary_host_id):
                if _host_online(payload):
                    online.set()
                elif online.is_set():
                    raise TermEnded("the primary host application went offline")
                continue
            await self._ncmd(edge, payload)

    async def _ncmd(self, edge: EdgeNode, payload: bytes) -> None:
        try:
            commands = decode_commands(payload)
        except BadPayload as error:
            self._ignored(f"not a Sparkplug payload ({error})")
            return
        alias = edge.alias(None, REBIRTH)
        rebirth = any(
            (command.name == REBIRTH or (command.name is None and command.alias == alias))
            and command.value is True
            for command in commands
        )
        if not rebirth:
            self._ignored("no rebirth request (the mirror takes no commands)")
            return
        self.metrics.rebirths.inc()
        async with self._lock:
            if self._edge is None:
                return  # not born yet: the birth follows anyway
            node, devices = await self.reader.read()
            await self._publish(edge.birth(node, devices))

    def _ignored(self, why: str) -> None:
        """Log an ignored NCMD: the first, then every 1000th (a peer cannot flood the log)."""
        self.ignored_commands += 1
        if self.ignored_commands % 1000 == 1:
            log.warning(
                "sparkplug: NCMD for %s ignored: %s (%d so far)",
                self.scope,
                why,
                self.ignored_commands,
            )

    # -- what is published -------------------------------------------------------------------

    async def _on_status(self, edge: EdgeNode, status: JobStatus) -> None:
        async with self._lock:
            for node, devices in await self.reader.on_status(status):
                await self._publish(edge.update(node, devices))  # each step, in order

    async def _poll(self, edge: EdgeNode) -> None:
        """Read and publish what changed every ``poll_seconds``; a store away is logged once
        (and its end), and the next poll tries again."""
        outage = self.gateway.resilience.outage(f"sparkplug.{self.scope}.read", logger=log)
        try:
            while True:
                await anyio.sleep(self.settings.poll_seconds)
                try:
                    async with self._lock:
                        node, devices = await self.reader.read()
                        await self._publish(edge.update(node, devices))
                except (aiomqtt.MqttError, TermEnded):
                    raise
                except Exception as error:
                    outage.failed(error)
                else:
                    outage.succeeded()
        finally:
            outage.close()

    async def _publish(self, messages: list[Message]) -> None:
        client = self._client
        if client is None:
            raise TermEnded("not connected")
        if not self.lease.valid:
            # Paused past the lease (a frozen VM): another instance may speak by now.
            raise TermEnded("the lease is no longer certainly held")
        for message in messages:
            # QoS 0, never retained: what Sparkplug 3.0 asks of births and data.
            await client.publish(message.topic, message.payload, qos=0, retain=False)
            self.metrics.messages.labels(message.kind.value).inc()
            self.metrics.payload_bytes.inc(len(message.payload))


def _single(error: Exception) -> Exception:
    """The one error a task group wrapped (nested groups too), else ``error`` itself."""
    while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _host_online(payload: bytes) -> bool:
    """A STATE payload (Sparkplug 3.0: JSON ``{"online": true, "timestamp": ...}``)."""
    try:
        document = json.loads(payload)
    except ValueError:
        return False
    return isinstance(document, Mapping) and document.get("online") is True


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
