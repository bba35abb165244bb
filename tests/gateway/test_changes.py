"""The change record: what its one writer appends is what every reader parses back."""

from __future__ import annotations

import pytest

from gateway.changes import ChangeRecord, ChangeRecordError, ReadPace, Trigger
from gateway.jobstates import JobState


def a_record(trigger: Trigger, **changes: object) -> ChangeRecord:
    fields: dict[str, object] = {
        "trigger": trigger,
        "scope": "line-1/cell-2",
        "job_order_id": "J:1",
        "state": JobState.COMPLETED,
        "previous": JobState.RUNNING,
        "priority": -3,
        "has_result": True,
        "job_response": '{"JobOrderID":"J:1"}',
        **changes,
    }
    return ChangeRecord(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("trigger", list(Trigger))
def test_every_trigger_round_trips_through_the_stream_fields(trigger: Trigger) -> None:
    record = a_record(trigger)
    fields = record.fields()
    assert all(isinstance(value, str) for value in fields.values())  # what a stream holds
    assert ChangeRecord.parse("7-1", fields) == a_record(trigger, entry_id="7-1")


def test_the_fields_say_what_readers_need_without_the_job() -> None:
    fields = a_record(Trigger.COMPLETE, job_response=None).fields()
    assert fields == {
        "change_type": "Complete",
        "job_order_id": "J:1",
        "scope": "line-1/cell-2",
        "state": "Ended.Completed",
        "state_number": "5",
        "previous": "Running",
        "priority": "-3",
        "has_result": "true",
    }
    parsed = ChangeRecord.parse("1-0", {**fields, "ts": "2026-11-28T22:00:00Z"})
    assert parsed.written_at == "2026-11-28T22:00:00Z"
    assert parsed.job_order is None
    assert parsed.job_response is None


def test_what_a_trigger_means_for_readers() -> None:
    assert {t for t in Trigger if t.sets_order} == {
        Trigger.STORE,
        Trigger.STORE_AND_START,
        Trigger.UPDATE,
    }
    assert [t for t in Trigger if not t.changes_state] == [Trigger.RESULT_UPDATE]
    assert a_record(Trigger.CLEAR, state=JobState.END).removes_job
    assert not a_record(Trigger.COMPLETE).removes_job


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"change_type": "Explode"}, "change_type 'Explode' is no Trigger"),
        ({"state": "Sleeping"}, "state 'Sleeping' is no JobState"),
        ({"previous": ""}, "field 'previous' is missing"),
        ({"scope": ""}, "field 'scope' is missing"),
        ({"job_order_id": "a/b"}, "topic level"),
        ({"priority": "high"}, "priority"),
    ],
)
def test_an_entry_that_is_no_change_record_is_refused_by_name(
    broken: dict[str, str], message: str
) -> None:
    fields = {**a_record(Trigger.STORE).fields(), **broken}
    with pytest.raises(ChangeRecordError, match=message):
        ChangeRecord.parse("1-0", fields)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.anyio
async def test_a_paced_reader_reads_at_once_at_rest_and_at_most_every_pace_while_busy() -> None:
    clock = Clock()
    pace = ReadPace(0.01, clock=clock, sleep=clock.sleep)
    await pace.wait()  # never read: at once
    pace.read(0, 200)  # the blocking read timed out empty: still at rest
    await pace.wait()
    assert clock.slept == []
    pace.read(1, 200)  # woke for a record: the next read waits for the ones that follow
    clock.now += 0.004  # the batch took 4 ms to publish
    await pace.wait()
    assert clock.slept == [pytest.approx(0.006)]
    pace.read(200, 200)  # a full read: a backlog, read on at once
    await pace.wait()
    assert clock.slept == [pytest.approx(0.006)]
    pace.read(3, 200)
    clock.now += 0.5  # long past the pace: no wait
    await pace.wait()
    assert len(clock.slept) == 1


@pytest.mark.anyio
async def test_a_pace_of_zero_never_waits() -> None:
    clock = Clock()
    pace = ReadPace(0.0, clock=clock, sleep=clock.sleep)
    for records in (1, 5, 0):
        pace.read(records, 200)
        await pace.wait()
    assert clock.slept == []
