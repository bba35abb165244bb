"""Log lines about a message or a job carry its context, in text and in JSON."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

from gateway.logs import ContextFilter, JsonFormatter, TextFormatter, log_context


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("test.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream, handler
    logger.removeHandler(handler)


def test_json_lines_carry_scope_job_and_correlation(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(JsonFormatter())
    with log_context(scope="cell1", job="J1"), log_context(correlationid="J1:tighten:1"):
        logger.info("tightening")
    logger.info("outside")
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["message"] == "tightening"
    assert (inside["scope"], inside["job"], inside["correlationid"]) == (
        "cell1",
        "J1",
        "J1:tighten:1",
    )
    assert "scope" not in outside


def test_text_lines_show_the_context_after_the_message(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(TextFormatter())
    with log_context(scope="cell1", job=None):
        logger.info("hello")
    assert stream.getvalue().rstrip().endswith("hello [scope=cell1]")


@pytest.mark.anyio
async def test_tasks_started_inside_the_context_keep_it(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    logger, stream, handler = captured
    handler.setFormatter(JsonFormatter())
    with log_context(job="J7"):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: _log_later(logger))
    assert json.loads(stream.getvalue())["job"] == "J7"


async def _log_later(logger: logging.Logger) -> None:
    await anyio.lowlevel.checkpoint()
    logger.info("from a task")
