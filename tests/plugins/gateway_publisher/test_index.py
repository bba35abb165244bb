"""The state index, change records and batches, without servers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.changes import ChangeRecord, ChangeRecordError
from gateway_publisher.batch import plan
from gateway_publisher.documents import Payloads
from gateway_publisher.index import IndexEntry, JobIndex, state_entries


def fields(job: str, change: str, state: str, **extra: str) -> dict[str, str]:
    has_result = "true" if state.split(".")[0] in ("Ended", "Aborted") else "false"
    return {
        "change_type": change,
        "job_order_id": job,
        "scope": "cell1",
        "state": state,
        "state_number": "0",
        "previous": "InitialState",
        "priority": extra.pop("priority", "0"),
        "has_result": has_result,
        **extra,
    }


def test_state_entries_follow_opc_40001_3_numbering() -> None:
    assert state_entries("Ended.Closed") == [
        {"state_text": {"text": "Ended", "locale": "en"}, "state_number": 5},
        {"state_text": {"text": "Closed", "locale": "en"}, "state_number": 2},
    ]
    assert state_entries("Running") == [
        {"state_text": {"text": "Running", "locale": "en"}, "state_number": 3}
    ]
    # A name the table does not know keeps its text rather than vanishing.
    assert state_entries("Running.Warming") == [
        {"state_text": {"text": "Running", "locale": "en"}, "state_number": 3},
        {"state_text": {"text": "Warming", "locale": "en"}},
    ]


def test_index_orders_by_priority_then_id_and_renders_valid_json() -> None:
    index = JobIndex()
    index.put(IndexEntry("b", "Running", priority=1))
    index.put(IndexEntry("a", "Running", priority=1))
    index.put(IndexEntry("z", "NotAllowedToStart.Ready", priority=9))
    index.put(IndexEntry("a", "Ended.Completed", priority=1, has_result=True))  # replaced
    index.remove("missing")
    payload = json.loads(index.render(seq=7, epoch="e1", scope="cell1", published_at="t"))
    assert payload["seq"] == 7
    assert payload["epoch"] == "e1"
    assert payload["jobs_total"] == 3
    assert [job["job_order_id"] for job in payload["jobs"]] == ["z", "a", "b"]
    assert payload["jobs"][1]["has_result"] is True
    paged = json.loads(index.render_paged(seq=7, epoch="e1", scope="cell1", published_at="t"))
    assert paged["pages"] == [{"page": 0, "jobs": 3, "seq": 7}]
    assert "jobs" not in paged
    page = json.loads(index.render_page(0, seq=7, scope="cell1") or b"")
    assert [job["job_order_id"] for job in page["jobs"]] == ["z", "a", "b"]
    assert page["jobs"][1]["has_result"] is True
    index.remove("z")
    assert [entry.job_order_id for entry in index] == ["a", "b"]
    empty = json.loads(JobIndex().render(seq=1, epoch="e", scope="s", published_at="t"))
    assert empty["jobs"] == []
    assert empty["jobs_total"] == 0
    empty = json.loads(JobIndex().render_paged(seq=1, epoch="e", scope="s", published_at="t"))
    assert empty["pages"] == []


def test_jobs_keep_their_page_and_new_ones_fill_the_lowest_page_with_room() -> None:
    index = JobIndex(page_size=2)
    for job in ("a", "b", "c", "d", "e"):
        index.put(IndexEntry(job, "NotAllowedToStart.Ready"))
    assert index.pages == [0, 1, 2]
    assert index.take_dirty() == {0, 1, 2}
    index.put(IndexEntry("c", "Running", priority=5))  # a change stays on its page
    assert index.get("c") is not None
    assert index.get("c").page == 1  # type: ignore[union-attr]
    assert index.take_dirty() == {1}
    index.remove("a")
    index.put(IndexEntry("f", "NotAllowedToStart.Ready"))  # the room a left on page 0
    assert index.get("f").page == 0  # type: ignore[union-attr]
    index.remove("e")  # page 2 is empty: it goes (its topic is deleted)
    assert index.pages == [0, 1]
    assert index.take_dirty() == {0, 2}
    assert index.render_page(2, seq=9, scope="s") is None


def test_a_paged_update_publishes_a_bounded_number_of_bytes_whatever_the_number_of_jobs() -> None:
    index = JobIndex()
    for number in range(1000):
        index.put(IndexEntry(f"JO-{number:04d}", "NotAllowedToStart.Ready"))
    index.take_dirty()
    index.put(IndexEntry("JO-0500", "AllowedToStart.Ready"))
    (page,) = index.take_dirty()
    update = len(index.render_paged(seq=2, epoch="e", scope="cell1", published_at="t")) + len(
        index.render_page(page, seq=2, scope="cell1") or b""
    )
    assert update < 8_000  # one page of 25 jobs and 40 page summaries
    inline = len(index.render(seq=2, epoch="e", scope="cell1", published_at="t"))
    assert inline > 20 * update  # what the opt-in saves: every job is in the inline index


def test_stored_entries_round_trip() -> None:
    entry = IndexEntry("j/ä", "Aborted", priority=-3, has_result=True)
    assert IndexEntry.from_stored("j/ä", entry.stored()) == entry


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"job_order_id": ""}, "job_order_id"),
        ({"job_order_id": "a/b"}, "topic level"),
        ({"job_order_id": "a+"}, "topic level"),
        ({"state": ""}, "state"),
        ({"priority": "high"}, "priority"),
    ],
)
def test_unusable_records_are_refused_by_name(broken: dict[str, str], message: str) -> None:
    with pytest.raises(ChangeRecordError, match=message):
        ChangeRecord.parse("1-0", {**fields("j", "Store", "NotAllowedToStart.Ready"), **broken})


class Documents:
    """A document source that knows one order and one response, and counts the reads."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, str]] = []

    async def job_order(self, scope: str, job_order_id: str) -> Any:
        self.reads.append(("order", job_order_id))
        return {"JobOrderID": job_order_id}

    async def job_response(self, scope: str, job_order_id: str) -> Any:
        self.reads.append(("result", job_order_id))
        return None if job_order_id == "gone" else {"JobOrderID": job_order_id}


async def run_plan(*entries: dict[str, str], base: JobIndex | None = None) -> Any:
    numbered = [(f"{n}-0", entry) for n, entry in enumerate(entries, start=1)]
    return await plan("cell1", base or JobIndex(), numbered, Payloads(Documents()))


@pytest.mark.anyio
async def test_a_batch_keeps_the_last_content_of_each_topic() -> None:
    batch = await run_plan(
        fields("j1", "Store", "NotAllowedToStart.Ready", job_order='{"v":1}'),
        fields("j1", "Update", "NotAllowedToStart.Ready", job_order='{"v":2}'),
        fields("j2", "StoreAndStart", "AllowedToStart.Ready"),
        fields("j2", "Run", "Running"),
        fields("j2", "Complete", "Ended.Completed", job_response='{"r":1}'),
        fields("j2", "ResultUpdate", "Ended.Completed", job_response='{"r":2}'),
    )
    assert batch.topics == {
        ("order", "j1"): b'{"v":2}',
        ("order", "j2"): b'{"JobOrderID":"j2"}',  # the record had none: from the source
        ("result", "j2"): b'{"r":2}',
    }
    assert batch.changes == {
        "j1": IndexEntry("j1", "NotAllowedToStart.Ready"),
        "j2": IndexEntry("j2", "Ended.Completed", has_result=True),
    }
    assert batch.last_id == "6-0"
    assert batch.index_changed


@pytest.mark.anyio
async def test_clear_deletes_both_topics_and_drops_the_job() -> None:
    base = JobIndex({"j1": IndexEntry("j1", "Aborted", has_result=True)})
    batch = await run_plan(fields("j1", "Clear", "EndState"), base=base)
    assert batch.topics == {("order", "j1"): None, ("result", "j1"): None}
    batch.apply()
    assert len(base) == 0
    batch.revert()
    assert base.get("j1") == IndexEntry("j1", "Aborted", has_result=True)


@pytest.mark.anyio
async def test_result_updates_while_running_change_nothing() -> None:
    base = JobIndex({"j1": IndexEntry("j1", "Running")})
    batch = await run_plan(fields("j1", "ResultUpdate", "Running"), base=base)
    assert batch.topics == {}
    assert not batch.index_changed
    assert batch.last_id == "1-0"


@pytest.mark.anyio
async def test_a_result_that_cannot_be_read_keeps_what_was_published() -> None:
    base = JobIndex({"gone": IndexEntry("gone", "Ended.Completed", has_result=True)})
    batch = await run_plan(fields("gone", "ResultUpdate", "Ended.Completed"), base=base)
    assert batch.topics == {}
    assert batch.changes["gone"] == IndexEntry("gone", "Ended.Completed", has_result=True)


@pytest.mark.anyio
async def test_malformed_records_are_skipped_and_passed() -> None:
    batch = await run_plan(
        {"change_type": "Store"}, fields("j1", "Store", "NotAllowedToStart.Ready")
    )
    assert batch.skipped == 1
    assert list(batch.changes) == ["j1"]
    assert batch.last_id == "2-0"
