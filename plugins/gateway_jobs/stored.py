"""A job as stored: its order, state, the Work Master it runs and the Job Response it fills.

``StoredJob`` is the document ``JobRepository`` reads and compare-and-swaps
(``{p}:{scope}:job:{id}`` and ``{p}:{scope}:jobresponse:{id}``); ``new_job`` makes one for a job
entering the station.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from gateway.cloudevents import format_time, utc_now
from gateway.jobstates import JobState
from gateway.recipes import RECIPE_VERSION_ID, RecipeJob, recipe_version
from gateway_jobs.model import (
    JobOrder,
    JobResponse,
    Parameter,
    State,
    WorkMaster,
    from_json,
    to_json,
)
from gateway_jobs.states import job_state, state_list


@dataclass(frozen=True)
class StoredJob:
    """A job as stored: its order, state path, the Work Master it runs, and its response.

    The Work Master is kept in its JSON form, as stored: it was checked when the job entered
    the station and no state change alters it. A recipe of 200 steps takes about 1.5 ms to
    check again and 1 ms to convert back, and a job's life has about ten loads and writes;
    ``work_master`` converts it only when asked.
    """

    job_order: JobOrder
    state: JobState
    work_master_document: dict[str, Any]  # ``to_json`` of the WorkMaster
    response: JobResponse
    stored_at: str  # when the job entered the station (RFC 3339)
    # The MES stopped or aborted the job while its recipe ran: the results the recipe collected
    # are due by this Unix time; until they are recorded (or the time passes) the Job Response
    # is not final yet (``has_result``).
    results_due: float | None = None

    @property
    def job_order_id(self) -> str:
        return self.job_order.job_order_id

    @property
    def has_result(self) -> bool:
        """The Job Response is final: Ended or Aborted, and no recipe results are awaited."""
        return self.state.final and self.results_due is None

    @property
    def priority(self) -> int:
        return self.job_order.priority or 0  # unspecified: the middle of the range

    @functools.cached_property
    def work_master(self) -> WorkMaster:
        return from_json(self.work_master_document, WorkMaster, element="WorkMaster")

    @property
    def work_master_id(self) -> str:
        return str(self.work_master_document["ID"])

    @property
    def recipe_schema(self) -> str | None:
        """The Work Master's DataSchema: which recipe interpreter runs it."""
        schema = self.work_master_document.get("DataSchema")
        return schema if isinstance(schema, str) else None

    @property
    def recipe(self) -> Any:
        """The Work Master's Data: the recipe."""
        return self.work_master_document.get("Data")

    def document(self) -> dict[str, Any]:
        document = {
            "JobOrder": to_json(self.job_order),
            "State": to_json(state_list(self.state)),
            "WorkMaster": self.work_master_document,
            "StoredAt": self.stored_at,
        }
        if self.results_due is not None:
            document["ResultsDue"] = self.results_due
        return document

    @classmethod
    def from_documents(cls, job: Any, response: Any) -> StoredJob:
        order = from_json(job["JobOrder"], JobOrder, element="JobOrder")
        state = job_state(from_json(job["State"], list[State], element="State"))
        work_master = job["WorkMaster"]
        if not isinstance(work_master, dict) or not isinstance(work_master.get("ID"), str):
            # Written by this class, so never seen; checked in full if it is.
            work_master = to_json(from_json(work_master, WorkMaster, element="WorkMaster"))
        stored_at = str(job["StoredAt"])
        due = job.get("ResultsDue")
        results_due = float(due) if isinstance(due, int | float) else None
        if response is None:  # both are always written together; if one was lost, start anew
            return new_job(order, state, from_json(work_master, WorkMaster))
        response_document = from_json(response, JobResponse)
        return cls(order, state, work_master, response_document, stored_at, results_due)

    def moved_to(self, state: JobState) -> StoredJob:
        """This job in ``state``; its Job Response follows: JobState, and the actual start
        (first time Running) and end (reaching Ended or Aborted) times."""
        response = dataclasses.replace(self.response, job_state=state_list(state))
        now = format_time(utc_now())
        if state is JobState.RUNNING and response.start_time is None:
            response.start_time = now
        if state.final and response.end_time is None:
            response.end_time = now
        return dataclasses.replace(self, state=state, response=response)

    def with_work_master(self, order: JobOrder, work_master: WorkMaster) -> StoredJob:
        """The job with a new order (Update) and the Work Master chosen for it, its Job
        Response naming that Work Master and recipe version."""
        kept = [
            entry
            for entry in self.response.job_response_data or []
            if entry.id not in (RECIPE_VERSION_ID, WORK_MASTER_ID)
        ]
        response = dataclasses.replace(
            self.response, job_response_data=[*work_master_entries(work_master), *kept]
        )
        return dataclasses.replace(
            self,
            job_order=order,
            work_master_document=to_json(work_master),
            response=response,
        )

    def recipe_job(self, scope: str) -> RecipeJob:
        return RecipeJob(
            scope=scope,
            job_order_id=self.job_order_id,
            job_order=to_json(self.job_order),
            work_master=self.work_master_document,
            stored_at=self.stored_at,
        )


WORK_MASTER_ID = "WorkMasterID"
"""``ID`` of the Job Response entry naming the Work Master the job runs (the station chooses it
when the job order names none or several)."""


def work_master_entries(work_master: WorkMaster) -> list[Parameter]:
    """``RecipeVersion`` (the content hash of the recipe as it is now: the job runs this
    snapshot, whatever changes later; none without a recipe) and ``WorkMasterID``."""
    entries = [Parameter(id=WORK_MASTER_ID, value=work_master.id)]
    if work_master.data is not None:
        entries.insert(0, Parameter(id=RECIPE_VERSION_ID, value=recipe_version(work_master.data)))
    return entries


def new_job(order: JobOrder, state: JobState, work_master: WorkMaster) -> StoredJob:
    """A job entering the station, with the Job Response it will fill.

    The response starts with ``work_master_entries``: which recipe, of which Work Master.
    """
    # One response per job, named like it.
    response = JobResponse(job_response_id=order.job_order_id, job_order_id=order.job_order_id)
    response.job_response_data = work_master_entries(work_master)
    stored = StoredJob(
        order, JobState.INITIAL, to_json(work_master), response, format_time(utc_now())
    )
    return stored.moved_to(state)


def required_equipment(job: StoredJob) -> list[str]:
    return [item.id for item in job.job_order.equipment_requirements or [] if item.id]
