"""Which run an MES command work entry acts on (``gateway_sfc.steps``)."""

from __future__ import annotations

import pytest

from gateway_sfc.state import Execution
from gateway_sfc.steps import _same_run


@pytest.mark.parametrize(
    ("entry_run", "state_run", "acts"),
    [
        ("2026-11-27T02:00:00.1Z", "2026-11-27T02:00:00.1Z", True),  # its own run
        ("2026-11-27T01:00:00.1Z", "2026-11-27T02:00:00.1Z", False),  # the job id's earlier run
        (None, "2026-11-27T02:00:00.1Z", True),  # an entry an earlier version wrote
        ("", "2026-11-27T02:00:00.1Z", True),  # a job an earlier version stored
        ("2026-11-27T02:00:00.1Z", "", True),  # a chart an earlier version started
    ],
)
def test_a_command_acts_on_its_own_run_and_on_what_knows_no_run(
    entry_run: str | None, state_run: str, acts: bool
) -> None:
    assert _same_run(entry_run, Execution(scope="cell1", job="J1", run=state_run)) is acts
