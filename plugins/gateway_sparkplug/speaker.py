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
from typing import TYPE_CHECKING, Any

import aiomqtt
import anyio

from gateway.errors import GatewayError
from gateway.jobmethods import JobStatus
from gateway.jobstates import JobState
from gateway.recipes import RecipeViewer, ScopeQueue
from gateway_sparkplug.activity import read_activity
from gateway_sparkplug.connection import BrokerAddress, edge_connection
from gateway_sparkplug.edge import REBIRTH, Device, EdgeNode, Message
from gateway_sparkplug.lease import ScopeLease
from gateway_sparkplug.metrics import SparkplugMetrics
from gateway_sparkplug.payloads import BadPayload, decode_commands
from gateway_sparkplug.settings import SparkplugSettings
from gateway_sparkplug.tags import (
    JOBS_DEVICE,
    EquipmentView,
    QueueView,
    SlotJob,
    Slots,
    equipment_tags,
    jobs_tags,
    node_tags,
)
from gateway_sparkplug.topics import MessageType, state_topic, topic, valid_id

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
        self.bd_seq: int | None = None
        # Per term: the session, the slots, each job's last known state.
        self._edge: EdgeNode | None = None
        self._slots = Slots(0)
        self._states: dict[str, JobState] = {}
        self._queue: ScopeQueue | None = None
        self._equipment: dict[str, Device] = {}
        self._client: aiomqtt.Client | None = None
        self._lock = anyio.Lock()
        self._warned: set[str] = set()

    # -- the lease ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Speak whenever the lease is ours, until the gateway stops."""
        stopping = self.gateway.stopping
        outage = self.gateway.resilience.outage(f"sparkplug.{self.scope}", logger=log)
        try:
            while not stopping.is_set():
                wait = self.lease.renew_interval
                try:
                    if await self.lease.acquire():
                        await self._term()
                        continue  # try again at once: a host offline, a lost lease's end
                    outage.succeeded()
                except Exception as error:
                    wait = min(wait, outage.failed(error))
                with anyio.move_on_after(wait):
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
                await self._load()
                async with self._lock:
                    node, devices = await self._read()
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
            log.warning(
                "sparkplug: NCMD for %s ignored: not a Sparkplug payload (%s)", self.scope, error
            )
            return
        rebirth = any(command.name == REBIRTH and command.value is True for command in commands)
        if not rebirth:
            log.info("sparkplug: NCMD for %s without a rebirth request ignored", self.scope)
            return
        self.metrics.rebirths.inc()
        async with self._lock:
            if self._edge is None:
                return  # not born yet: the birth follows anyway
            node, devices = await self._read()
            await self._publish(edge.birth(node, devices))

    # -- what is published -------------------------------------------------------------------

    async def _on_status(self, edge: EdgeNode, status: JobStatus) -> None:
        async with self._lock:
            job, state = status.job_order_id, status.state
            previous = self._states.get(job)
            order = _order_fields(status.job_order)
            if state is JobState.END:
                self._states.pop(job, None)
            else:
                self._states[job] = state
            self._queue = queue = await self.gateway.job_control.queue(self.scope)
            steps = self._slots.follow(job, previous, state, job in queue.running, *order)
            for _ in steps:  # each step of the slot its own message, in order
                await self._publish(edge.update(*self._tags()))

    async def _poll(self, edge: EdgeNode) -> None:
        while True:
            await anyio.sleep(self.settings.poll_seconds)
            try:
                async with self._lock:
                    node, devices = await self._read()
                    await self._publish(edge.update(node, devices))
            except (aiomqtt.MqttError, TermEnded):
                raise
            except Exception as error:  # the store away: the next poll tries again
                log.warning("sparkplug: %s not refreshed: %s", self.scope, error)

    async def _load(self) -> None:
        """Each job's state now, at the start of a term."""
        control = self.gateway.job_control
        self._states = {job.job_order_id: job.state for job in await control.jobs(self.scope)}
        self._slots = Slots(0)

    async def _read(self) -> tuple[dict[str, Any], dict[str, Device]]:
        """Read the scope through the host's API and build the node's and devices' tags."""
        control = self.gateway.job_control
        self._queue = queue = await control.queue(self.scope)
        self._slots.resize(queue.capacity or self.settings.unlimited_slots)
        for job in sorted(queue.running):
            if self._slots.index(job) is None:
                state = self._states.get(job)
                if state is not None:
                    self._slots.place(SlotJob(job, state))
        for held in list(self._slots.jobs):
            if held is None or held.job_order_id not in self._slots.live():
                continue
            summary = await control.summary(self.scope, held.job_order_id)
            steps, done = await self._progress(held.job_order_id)
            self._slots.update(
                held.job_order_id,
                priority=None if summary is None else summary.priority,
                work_master_id=None if summary is None else summary.work_master_id,
                equipment=tuple(queue.running.get(held.job_order_id, held.equipment)),
                active_steps=steps,
                actions_done=done,
            )
        self._equipment = await self._read_equipment(queue)
        return self._tags()

    def _tags(self) -> tuple[dict[str, Any], dict[str, Device]]:
        queue = self._queue
        assert queue is not None
        view = QueueView(
            online=queue.online,
            reason=queue.reason,
            capacity=queue.capacity,
            running=len(queue.running),
            waiting=len(queue.waiting),
            next_job=queue.waiting[0].job_order_id if queue.waiting else None,
        )
        devices = dict(self._equipment)
        devices[JOBS_DEVICE] = Device(jobs_tags(self._slots.jobs, view))
        return node_tags(self.version, self.gateway.instance_id, view), devices

    async def _progress(self, job: str) -> tuple[tuple[str, ...], int | None]:
        recipe_job = await self.gateway.job_control.job(self.scope, job)
        interpreter: object = (
            None
            if recipe_job is None
            else self.gateway.recipe_interpreters.get(recipe_job.dataschema or "")
        )
        if not isinstance(interpreter, RecipeViewer):
            return (), None
        progress = await interpreter.progress(self.scope, job)
        if progress is None:
            return (), None
        done = sum(action.phase == "done" for action in progress.actions)
        return tuple(step.name for step in progress.active), done

    async def _read_equipment(self, queue: ScopeQueue) -> dict[str, Device]:
        configured = await self.gateway.job_methods.receiver_configuration(self.scope)
        activity = await read_activity(self.store, self.scope)
        holders = {item: job for job, held in queue.running.items() for item in held}
        names = {
            *configured.get("EquipmentID", ()),
            *self.settings.equipment,
            *activity,
            *holders,
            *self._equipment,  # a device stays in the tree once born this term
        }
        devices = {}
        for name in sorted(names):
            if not valid_id(name) or name == JOBS_DEVICE:
                self._warn_once(name, f"equipment id {name!r} is no valid Sparkplug device id")
                continue
            liveness = await self.gateway.equipment.liveness(name)
            record = activity.get(name)
            command = None if record is None else record.command
            busy = command if record is not None and record.waiting else None
            event = None if record is None else record.event
            view = EquipmentView(
                equipment_id=name,
                online=liveness.online,
                last_seen=liveness.last_seen,
                current_job=holders.get(name) or (busy.job_order_id if busy else None),
                current_action=busy.action if busy else None,
                last_command_type=None if command is None else command.type,
                last_result_status=_result(record),
                last_event_type=None if event is None else event.type,
            )
            devices[name] = Device(equipment_tags(view), alive=liveness.online)
        return devices

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned and len(self._warned) < 1000:
            self._warned.add(key)
            log.warning("sparkplug: %s: %s", self.scope, message)

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


def _order_fields(job_order: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """Priority and the first Work Master a status event's JobOrder names (the one chosen is
    read at the next poll)."""
    priority = job_order.get("Priority")
    masters = job_order.get("WorkMasterID") or []
    first = masters[0] if isinstance(masters, list) and masters else None
    master = first.get("ID") if isinstance(first, Mapping) else first
    return (
        priority if isinstance(priority, int) else None,
        master if isinstance(master, str) else None,
    )


def _single(error: Exception) -> Exception:
    """The one error a task group wrapped (nested groups too), else ``error`` itself."""
    while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _result(record: Any) -> str | None:
    if record is None:
        return None
    if record.command is not None and record.command.error is not None:
        return f"NotDelivered: {record.command.error}"[:200]
    return None if record.result is None else str(record.result.status)


def _host_online(payload: bytes) -> bool:
    """A STATE payload (Sparkplug 3.0: JSON ``{"online": true, "timestamp": ...}``)."""
    try:
        document = json.loads(payload)
    except ValueError:
        return False
    return isinstance(document, Mapping) and document.get("online") is True


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
