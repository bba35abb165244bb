"""Which run an MES command work entry acts on (``gateway_runtime.steps``)."""

from __future__ import annotations

import pytest

from gateway.formats import Execution
from gateway_runtime.steps import _same_run


@pytest.mark.parametrize(
    ("entry_run", "state_run", "acts"),
    [
        ("2026-11-27T02:00:00.1Z", "2026-11-27T02:00:00.1Z", True),  # its own run
        ("2026-11-27T01:00:00.1Z", "2026-11-27T02:00:00.1Z", False),  # the job id's earlier run
    ],
)
def test_a_command_acts_on_its_own_run_only(entry_run: str, state_run: str, acts: bool) -> None:
    assert _same_run(entry_run, Execution(scope="cell1", job="J1", run=state_run)) is acts
