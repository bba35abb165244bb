"""What each piece of equipment was last told, last answered and last reported (all instances).

The equipment observer hooks fire on the instance that sent a command or received a reply or
event, but one instance speaks for a scope: so every instance records the latest command,
reply and event of each equipment in the scope's hash ``{prefix}:{<scope>}:sparkplug:equipment``
(fields ``command:<equipment>``, ``result:<equipment>``, ``event:<equipment>``; JSON), and the
speaking instance reads it.
Only the latest of each is kept, so the hash stays as small as the station; the hooks only
note the record in memory (bounded: ``MAX_PENDING`` equipment between two writes) and a service
writes them out.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio
from anyio.abc import TaskStatus

from gateway.equipment import EquipmentCommand, EquipmentEvent, EquipmentReply
from gateway.errors import ValidationError
from gateway.hookspecs import hookimpl
from gateway.store import Store, check_scope

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

MAX_PENDING = 1000
GOOD = "Good"


@dataclass(frozen=True)
class CommandRecord:
    correlation_id: str
    type: str
    job_order_id: str
    action: str
    at: float
    error: str | None = None  # not delivered


@dataclass(frozen=True)
class ResultRecord:
    correlation_id: str
    status: str  # ``Good``, or ``Bad: <error>``
    at: float


@dataclass(frozen=True)
class EventRecord:
    type: str
    job_order_id: str | None
    at: float


@dataclass(frozen=True)
class Activity:
    command: CommandRecord | None
    result: ResultRecord | None
    event: EventRecord | None = None

    @property
    def waiting(self) -> bool:
        """A command was sent and its reply has not come (nor did delivery fail)."""
        return (
            self.command is not None
            and self.command.error is None
            and (self.result is None or self.result.correlation_id != self.command.correlation_id)
        )


def activity_key(store: Store, scope: str) -> str:
    return store.keys.scoped(scope, "sparkplug", "equipment")


async def read_activity(store: Store, scope: str) -> dict[str, Activity]:
    """Every equipment of ``scope`` with a recorded command or reply."""
    raw = cast(dict[str, str], await store.client.hgetall(activity_key(store, scope)))
    commands: dict[str, CommandRecord] = {}
    results: dict[str, ResultRecord] = {}
    events: dict[str, EventRecord] = {}
    for field, value in raw.items():
        kind, _, equipment = field.partition(":")
        try:
            document = json.loads(value)
            if kind == "command":
                commands[equipment] = CommandRecord(**document)
            elif kind == "result":
                results[equipment] = ResultRecord(**document)
            elif kind == "event":
                events[equipment] = EventRecord(**document)
        except (ValueError, TypeError) as error:  # another version's record: not ours to read
            log.debug("sparkplug: equipment record %s of %s skipped: %s", field, scope, error)
    return {
        equipment: Activity(commands.get(equipment), results.get(equipment), events.get(equipment))
        for equipment in commands.keys() | results.keys() | events.keys()
    }


class ActivityRecorder:
    """The hooks' records, written to the store by a service (every role)."""

    name = "sparkplug-activity"
    roles = frozenset({"*"})

    def __init__(self) -> None:
        # (scope, field) -> JSON; only the latest per field is kept.
        self.pending: dict[tuple[str, str], str] = {}
        self.dropped = 0
        self._wake = anyio.Event()

    def note(self, scope: str | None, equipment: str | None, kind: str, record: object) -> None:
        if scope is None or equipment is None:
            return  # a reply that names neither cannot be attributed
        try:
            check_scope(scope)
        except ValidationError:
            return
        key = (scope, f"{kind}:{equipment}")
        if key not in self.pending and len(self.pending) >= MAX_PENDING:
            self.dropped += 1
            return
        self.pending[key] = json.dumps(asdict(record))  # type: ignore[call-overload]
        self._wake.set()

    async def flush(self, store: Store) -> None:
        batch, self.pending = self.pending, {}
        by_scope: dict[str, dict[Any, Any]] = {}
        for (scope, field), value in batch.items():
            by_scope.setdefault(scope, {})[field] = value
        try:
            for scope, fields in by_scope.items():
                await store.client.hset(activity_key(store, scope), mapping=fields)
        except Exception:
            for key, value in batch.items():  # newer records noted meanwhile win
                self.pending.setdefault(key, value)
            raise

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        store = gateway.store
        assert store is not None  # the plugin registers the recorder only with a store
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._write_loop, gateway, store)
            await gateway.stopping.wait()
            tasks.cancel_scope.cancel()

    async def _write_loop(self, gateway: Gateway, store: Store) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await gateway.resilience.retry(
                "sparkplug.activity", lambda: self.flush(store), stop=gateway.stopping, logger=log
            )


class ActivityObserver:
    """The observer hooks of one gateway, feeding its recorder."""

    def __init__(self, recorder: ActivityRecorder, clock: Any = time.time) -> None:
        self.recorder = recorder
        self.clock = clock

    @hookimpl
    def gateway_equipment_command_sent(self, command: EquipmentCommand, error: str | None) -> None:
        record = CommandRecord(
            command.correlation_id,
            command.type,
            command.job_order_id,
            command.action,
            self.clock(),
            error,
        )
        self.recorder.note(command.scope, command.equipment, "command", record)

    @hookimpl
    def gateway_equipment_replied(self, reply: EquipmentReply) -> None:
        status = GOOD if reply.error is None else f"Bad: {reply.error}"[:200]
        record = ResultRecord(reply.correlation_id, status, self.clock())
        self.recorder.note(reply.scope, reply.equipment, "result", record)

    @hookimpl
    def gateway_equipment_event_received(self, event: EquipmentEvent) -> None:
        record = EventRecord(event.type, event.job_order_id, self.clock())
        self.recorder.note(event.scope, event.equipment, "event", record)
