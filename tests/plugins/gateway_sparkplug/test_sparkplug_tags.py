"""Which job each Running/<n> slot shows, whatever the order in which the speaker learns things."""

from __future__ import annotations

from gateway.jobstates import JobState
from gateway_sparkplug.tags import SlotJob, Slots


def shown(slots: Slots) -> list[tuple[str, str] | None]:
    return [None if job is None else (job.job_order_id, job.state.value) for job in slots.jobs]


def states_while(slots: Slots, *change: object) -> list[list[tuple[str, str] | None]]:
    """What the slots showed at each step of one change."""
    return [shown(slots) for _ in slots.follow(*change)]  # type: ignore[arg-type]


def test_a_job_let_start_takes_the_lowest_free_slot_and_keeps_it_after_its_end() -> None:
    slots = Slots(2)
    ready = JobState.ALLOWED_TO_START_READY
    assert states_while(slots, "J1", None, ready, True) == [[("J1", ready.value), None]]
    assert states_while(slots, "J1", ready, JobState.RUNNING, True) == [[("J1", "Running"), None]]
    states_while(slots, "J1", JobState.RUNNING, JobState.COMPLETED, False)
    states_while(slots, "J2", None, JobState.RUNNING, True)
    assert shown(slots) == [("J2", "Running"), None]  # J1 had ended: its slot is free again
    states_while(slots, "J3", None, JobState.RUNNING, True)
    assert shown(slots) == [("J2", "Running"), ("J3", "Running")]
    # A third running job finds no slot: it is only counted.
    assert states_while(slots, "J4", None, JobState.RUNNING, True) == [shown(slots)]
    assert slots.index("J4") is None


def test_a_job_seen_running_before_seen_let_start_shows_allowed_to_start_first() -> None:
    slots = Slots(1)
    ready = JobState.ALLOWED_TO_START_READY
    # The AllowedToStart event came before the dispatcher let it start: no slot yet.
    assert states_while(slots, "J1", None, ready, False) == [[None]]
    # Running next: it was let start in AllowedToStart, which the slot shows first.
    assert states_while(slots, "J1", ready, JobState.RUNNING, True) == [
        [("J1", ready.value)],
        [("J1", "Running")],
    ]


def test_a_queued_job_takes_no_slot_and_a_resize_keeps_the_first_slots() -> None:
    slots = Slots(2)
    states_while(slots, "J1", None, JobState.ALLOWED_TO_START_READY, False)
    assert shown(slots) == [None, None]
    slots.place(SlotJob("J2", JobState.RUNNING))
    slots.resize(1)
    assert shown(slots) == [("J2", "Running")]
    slots.resize(3)
    assert shown(slots) == [("J2", "Running"), None, None]
