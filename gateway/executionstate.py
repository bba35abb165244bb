"""The execution state's stored form: one compact JSON document per job.

The types are the formats' contract (``gateway.formats``); here is how the runtime writes and
reads them, and how a format's tests check that its state survives that
(``gateway.testing.formats``): an executor keeps only JSON values in ``Execution.memo``.
"""

from __future__ import annotations

import json

import cattrs
import orjson

from gateway.formats import ActionRun, Execution

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
