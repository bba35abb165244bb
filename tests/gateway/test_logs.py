"""Log lines about a message or a job carry its context, in text and in JSON."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

from gateway.core import CoreSettings
from gateway.logs import (
    CauseFilter,
    ContextFilter,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    log_context,
)
from gateway.settings import SettingsRegistry, load_settings


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


def test_a_logged_exception_group_names_what_is_inside_it(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    """A retry of a loop whose task group failed says why, not "unhandled errors in a
    TaskGroup (1 sub-exception)"."""
    logger, stream, handler = captured
    handler.addFilter(CauseFilter())
    handler.setFormatter(TextFormatter())
    group = ExceptionGroup("unhandled errors in a TaskGroup", [ConnectionError("refused")])
    logger.warning("reading failed: %s; retrying", group)
    logger.warning("plain: %s, %d", ValueError("bad"), 3)
    first, second = stream.getvalue().splitlines()
    assert first.endswith("reading failed: ConnectionError: refused; retrying")
    assert second.endswith("plain: bad, 3")


def test_the_gateways_log_handler_names_the_causes_of_exception_groups() -> None:
    registry = SettingsRegistry()
    registry.register("gateway", CoreSettings)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(load_settings(registry, environ={}))
        [handler] = root.handlers
        assert any(isinstance(item, CauseFilter) for item in handler.filters)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
