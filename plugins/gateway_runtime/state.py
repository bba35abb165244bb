"""The execution state as stored in Redis: one compact JSON document per job.

The stored form is the host's (``gateway.executionstate``). The runs that are done leave the
document for the job's history (``take_done``), which only the operator view reads: the state
written on every step stays the size of what goes on.
"""

from __future__ import annotations

from gateway.executionstate import dump_action_run, dump_execution, load_action_run, load_execution
from gateway.formats import ActionRun, Execution, Phase

__all__ = [
    "dump_action_run",
    "dump_execution",
    "load_action_run",
    "load_execution",
    "take_done",
]


def take_done(execution: Execution) -> dict[str, ActionRun]:
    """Remove the runs that are done from ``execution`` and return them: nothing an executor
    decides looks at a run that is done (a reply or timer for it changes nothing, as for a run
    that is gone)."""
    done = {name: run for name, run in execution.actions.items() if run.phase is Phase.DONE}
    for name in done:
        del execution.actions[name]
    return done
