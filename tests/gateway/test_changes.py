"""The change record: what its one writer appends is what every reader parses back."""

from __future__ import annotations

import pytest

from gateway.changes import ChangeRecord, ChangeRecordError, Trigger
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
