"""One scope's state as tags, read through the host's API (``gateway.job_control``,
``gateway.job_methods``, ``gateway.equipment``, the recipe interpreters' progress) and the
equipment records every instance writes (``activity``).

``on_status`` applies a job's status event in the order events happened (its slot and the queue
figures); ``read`` reads everything else (each ``poll_seconds`` and for births). Both return
the tags to publish; the session (``edge``) sends what changed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.jobmethods import JobStatus
from gateway.jobstates import JobState
from gateway.recipes import RecipeViewer, ScopeQueue
from gateway.store import Store
from gateway_sparkplug.activity import Activity, read_activity
from gateway_sparkplug.edge import Device
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
from gateway_sparkplug.topics import valid_id

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

MAX_DEVICES = 500  # equipment devices per edge node: more are left out, with a warning
Tags = tuple[dict[str, Any], dict[str, Device]]


class ScopeReader:
    """What one scope shows, kept per term: each job's state, the slots, the equipment."""

    def __init__(
        self, gateway: Gateway, store: Store, scope: str, settings: SparkplugSettings, version: str
    ) -> None:
        self.gateway = gateway
        self.store = store
        self.scope = scope
        self.settings = settings
        self.version = version
        self._slots = Slots(0)
        self._states: dict[str, JobState] = {}
        self._queue: ScopeQueue | None = None
        self._equipment: dict[str, Device] = {}
        # Each slot job's actions -> the recipe step they belong to (from its progress).
        self._action_steps: dict[str, dict[str, str]] = {}
        self._warned: set[str] = set()

    async def on_status(self, status: JobStatus) -> list[Tags]:
        """Apply one status event: the tags after each step of its slot, in order."""
        job, state = status.job_order_id, status.state
        previous = self._states.get(job)
        if state is JobState.END:
            self._states.pop(job, None)
        else:
            self._states[job] = state
        self._queue = queue = await self.gateway.job_control.queue(self.scope)
        order = _order_fields(status.job_order)
        steps = self._slots.follow(job, previous, state, job in queue.running, *order)
        return [self.tags() for _ in steps]

    async def load(self) -> None:
        """Each job's state now, at the start of a term."""
        control = self.gateway.job_control
        self._states = {job.job_order_id: job.state for job in await control.jobs(self.scope)}
        self._slots = Slots(0)

    async def read(self) -> Tags:
        """Read the scope through the host's API and build the node's and devices' tags."""
        control = self.gateway.job_control
        self._queue = queue = await control.queue(self.scope)
        self._slots.resize(queue.capacity or self.settings.unlimited_slots)
        for job in sorted(queue.running):
            if self._slots.index(job) is None:
                state = self._states.get(job)
                if state is not None:
                    self._slots.place(SlotJob(job, state))
        live = self._slots.live()
        self._action_steps = {job: self._action_steps.get(job, {}) for job in live}
        for held in list(self._slots.jobs):
            if held is None or held.job_order_id not in live:
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
        return self.tags()

    def tags(self) -> Tags:
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
        self._action_steps[job] = {action.name: action.step for action in progress.actions}
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
        devices: dict[str, Device] = {}
        for name in sorted(names):
            if len(devices) >= MAX_DEVICES:
                self._warn_once("", f"more than {MAX_DEVICES} equipment: the rest left out")
                break
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
                current_step=self._action_steps.get(busy.job_order_id, {}).get(busy.action)
                if busy
                else None,
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


def _result(record: Activity | None) -> str | None:
    if record is None:
        return None
    if record.command is not None and record.command.error is not None:
        return f"NotDelivered: {record.command.error}"[:200]
    return None if record.result is None else str(record.result.status)
