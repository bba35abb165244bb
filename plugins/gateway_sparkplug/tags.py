"""The tag tree: what the edge node (a scope) and its devices publish, from views of the state.

Node (edge node id = scope)::

    bdSeq, Node Control/Rebirth
    Properties/Gateway Version, Properties/Instance
    Scope/Online, Scope/Offline Reason
    Queue/MaxRunningJobOrders, Queue/RunningCount, Queue/WaitingCount

Device ``Jobs``: ``Running/<n>/...`` for n = 1 .. MaxRunningJobOrders (fixed slots: a job takes
a free slot when it is let start and keeps it until another job needs it after its end, so job
churn never changes the metric set) and the queue figures. One device per equipment.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.jobstates import JobState, TopState
from gateway_sparkplug.payloads import Value
from gateway_sparkplug.schema import DataType

JOBS_DEVICE = "Jobs"


def text(value: str | None) -> Value:
    return Value(DataType.STRING, value if value is not None else "")


def integer(value: int | None) -> Value:
    return Value(DataType.INT32, value)


def boolean(value: bool) -> Value:
    return Value(DataType.BOOLEAN, value)


def datetime_ms(value: float | None) -> Value:
    """A Unix time in seconds as a DateTime (ms); ``None``: null (never)."""
    return Value(DataType.DATETIME, None if value is None else round(value * 1000))


@dataclass(frozen=True)
class QueueView:
    online: bool
    reason: str | None
    capacity: int  # MaxRunningJobOrders; 0: no limit
    running: int
    waiting: int
    next_job: str | None  # the first waiting job


@dataclass(frozen=True)
class SlotJob:
    """The job a Running/<n> slot shows."""

    job_order_id: str
    state: JobState
    priority: int | None = None
    work_master_id: str | None = None
    equipment: Sequence[str] = ()
    active_steps: Sequence[str] = ()
    actions_done: int | None = None


@dataclass(frozen=True)
class EquipmentView:
    equipment_id: str
    online: bool
    last_seen: float | None  # Unix time of the last heartbeat
    current_job: str | None
    current_action: str | None
    last_command_type: str | None
    last_result_status: str | None
    last_event_type: str | None = None
    current_step: str | None = None  # the recipe step of ``current_action``, when known


def node_tags(version: str, instance: str, queue: QueueView) -> dict[str, Value]:
    return {
        "Properties/Gateway Version": text(version),
        "Properties/Instance": text(instance),
        "Scope/Online": boolean(queue.online),
        "Scope/Offline Reason": text(queue.reason),
        "Queue/MaxRunningJobOrders": integer(queue.capacity),
        "Queue/RunningCount": integer(queue.running),
        "Queue/WaitingCount": integer(queue.waiting),
    }


def slot_tags(number: int, job: SlotJob | None) -> dict[str, Value]:
    base = f"Running/{number}/"
    if job is None:
        return {
            base + "JobOrderID": text(None),
            base + "State": text(None),
            base + "StateNumber": integer(None),
            base + "SubstateNumber": integer(None),
            base + "ActiveSteps": text(None),
            base + "ActionsDone": integer(None),
            base + "Priority": integer(None),
            base + "WorkMasterID": text(None),
            base + "Equipment": text(None),
        }
    return {
        base + "JobOrderID": text(job.job_order_id),
        base + "State": text(job.state.value),
        base + "StateNumber": integer(job.state.number),
        base + "SubstateNumber": integer(job.state.substate_number),
        base + "ActiveSteps": text(", ".join(job.active_steps)),
        base + "ActionsDone": integer(job.actions_done),
        base + "Priority": integer(job.priority),
        base + "WorkMasterID": text(job.work_master_id),
        base + "Equipment": text(", ".join(job.equipment)),
    }


def jobs_tags(slots: Sequence[SlotJob | None], queue: QueueView) -> dict[str, Value]:
    tags: dict[str, Value] = {}
    for number, job in enumerate(slots, start=1):
        tags.update(slot_tags(number, job))
    tags["Queue/RunningCount"] = integer(queue.running)
    tags["Queue/WaitingCount"] = integer(queue.waiting)
    tags["Queue/NextJobOrderID"] = text(queue.next_job)
    return tags


def equipment_tags(view: EquipmentView) -> dict[str, Value]:
    return {
        "Online": boolean(view.online),
        "LastSeen": datetime_ms(view.last_seen),
        "CurrentJob": text(view.current_job),
        "CurrentStep": text(view.current_step),
        "CurrentAction": text(view.current_action),
        "LastCommandType": text(view.last_command_type),
        "LastResultStatus": text(view.last_result_status),
        "LastEventType": text(view.last_event_type),
    }


class Slots:
    """Which job each Running/<n> slot shows.

    A job takes the lowest slot that is empty or whose job has ended (Ended, Aborted, left the
    station) when it is let start or seen running; it keeps the slot, with its final state,
    until another job needs it. Jobs beyond the slots are counted in ``Queue/RunningCount``.
    """

    def __init__(self, count: int) -> None:
        self.jobs: list[SlotJob | None] = [None] * count

    def resize(self, count: int) -> None:
        self.jobs = (self.jobs + [None] * count)[:count]

    def index(self, job_order_id: str) -> int | None:
        for number, job in enumerate(self.jobs):
            if job is not None and job.job_order_id == job_order_id:
                return number
        return None

    def place(self, job: SlotJob) -> int | None:
        """Put ``job`` in its slot (or a free one); ``None`` when every slot holds a live job."""
        number = self.index(job.job_order_id)
        if number is None:
            free = [n for n, held in enumerate(self.jobs) if held is None or _over(held.state)]
            if not free:
                return None
            number = free[0]
        self.jobs[number] = job
        return number

    def update(self, job_order_id: str, **changes: Any) -> bool:
        """Change the slot's job, if it has one; ``False`` when the job holds no slot."""
        number = self.index(job_order_id)
        if number is None:
            return False
        held = self.jobs[number]
        assert held is not None
        self.jobs[number] = replace(held, **changes)
        return True

    def follow(
        self,
        job_order_id: str,
        previous: JobState | None,
        state: JobState,
        admitted: bool,
        priority: int | None = None,
        work_master_id: str | None = None,
    ) -> Iterator[None]:
        """Apply a job's state change, yielding after each change of its slot to publish.

        A job takes a slot when it is let start (``admitted``, still AllowedToStart) or is seen
        running (Running, Interrupted). Seen running before being seen let start, while its last
        known state was AllowedToStart, it was let start in that state: the slot shows it first,
        so a host sees the slot go AllowedToStart -> Running whatever the timing of the reads.
        A job in no slot changes none (yields once all the same: the queue figures may move).
        """
        if self.index(job_order_id) is not None:
            self.update(job_order_id, state=state)
            yield
            return
        if not (admitted or state.top in (TopState.RUNNING, TopState.INTERRUPTED)):
            yield
            return
        let_start_earlier = previous is not None and previous.top is TopState.ALLOWED_TO_START
        if let_start_earlier and previous is not None and state is not previous:
            self.place(SlotJob(job_order_id, previous, priority, work_master_id))
            yield
        self.place(SlotJob(job_order_id, state, priority, work_master_id))
        yield

    def live(self) -> list[str]:
        return [job.job_order_id for job in self.jobs if job is not None and not _over(job.state)]


def _over(state: JobState) -> bool:
    return state.final or state is JobState.END
