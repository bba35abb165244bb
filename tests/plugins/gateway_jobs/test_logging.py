"""Log lines about an MES command carry the job it is about (for JSON logs and searching)."""

from __future__ import annotations

import logging

import pytest

from gateway.cloudevents import CloudEvent
from gateway.logs import ContextFilter
from gateway_jobs.events import method_type
from gateway_jobs.methods import JobsMethods
from gateway_jobs.processor import JobsProcessor
from gateway_jobs.testing import LocalJobs, job_order, work_master

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_lines_about_a_command_name_its_job(
    jobs: LocalJobs, caplog: pytest.LogCaptureFixture
) -> None:
    await jobs.manager.config.apply("cell1", "workmaster", "PUT", work_master())
    caplog.handler.addFilter(ContextFilter())
    processor = JobsProcessor(jobs.manager, JobsMethods(jobs.manager), source="urn:test")
    store = CloudEvent(
        type=method_type("Store"),
        source="urn:mes",
        subject="cell1",
        data={"JobOrder": job_order("J9")},
    )
    with caplog.at_level(logging.INFO, logger="gateway_jobs"):
        await processor.handle(store)
    about_j9 = [record for record in caplog.records if "J9" in record.getMessage()]
    assert about_j9
    assert all(getattr(record, "job", None) == "J9" for record in about_j9)
