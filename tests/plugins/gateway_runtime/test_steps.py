"""Which run an MES command work entry acts on (``gateway_runtime.steps``)."""

from __future__ import annotations

import pytest

from gateway.formats import Execution
from gateway_runtime.reconcile import Lingering
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


def test_an_end_is_reported_again_only_once_two_passes_saw_it_unchanged() -> None:
    finishing = Lingering()
    assert finishing.again(("cell1", "J1"), 7) is False  # its report may be under way
    finishing.next_pass()
    assert finishing.again(("cell1", "J1"), 7) is True  # still unreported: it was lost
    assert finishing.again(("cell1", "J2"), 3) is False
    finishing.next_pass()
    assert finishing.again(("cell1", "J2"), 4) is False  # it moved on meanwhile
    finishing.next_pass()
    finishing.next_pass()
    assert finishing.again(("cell1", "J1"), 7) is False  # not seen by the pass before
