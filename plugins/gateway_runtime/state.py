"""The execution state as stored in Redis: one compact JSON document per job.

The types are the formats' contract (``gateway.formats``); here is how they are written and
read. The runs that are done leave the document for the job's history (``take_done``), which
only the operator view reads: the state written on every step stays the size of what goes on.
"""

from __future__ import annotations

import json

import cattrs
import orjson

from gateway.formats import ActionRun, Execution, Phase

_converter = cattrs.Converter()


def dump_execution(execution: Execution) -> str:
    """The document, compact, its fields in their order (the commit script reads scope, job,
    version and run off its head). Written on every step: orjson encodes the dataclasses in C."""
    try:
        return orjson.dumps(execution).decode()
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits in a result
        return json.dumps(_converter.unstructure(execution), separators=(",", ":"))


def load_execution(text: str | bytes) -> Execution:
    return _converter.structure(json.loads(text), Execution)


def dump_action_run(run: ActionRun) -> str:
    """A finished action's run, as the history keeps it."""
    return orjson.dumps(run).decode()


def load_action_run(text: str | bytes) -> ActionRun:
    return _converter.structure(json.loads(text), ActionRun)


def take_done(execution: Execution) -> dict[str, ActionRun]:
    """Remove the runs that are done from ``execution`` and return them: nothing an executor
    decides looks at a run that is done (a reply or timer for it changes nothing, as for a run
    that is gone)."""
    done = {name: run for name, run in execution.actions.items() if run.phase is Phase.DONE}
    for name in done:
        del execution.actions[name]
    return done
