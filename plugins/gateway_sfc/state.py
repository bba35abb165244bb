"""The execution state of one job's chart, as stored in Redis (one JSON document per job).

Everything the engine knows about a running chart is in this document, so any instance can pick
up any job: which nodes are active, the phase and attempt of each action not done yet, the
results so far. The runs that are done leave it for the job's history (``take_done``), which
only the operator view reads. The ``version`` is the compare-and-swap token: every write must
name the version it read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import cattrs
import orjson


class Status(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"  # MES Pause: nothing new is dispatched, nothing advances
    HELD = "held"  # an action failed and the recipe holds: MES Resume retries it
    FINISHING = "finishing"  # chart complete or failed: reporting to job control
    ENDED = "ended"  # reported; the document stays for inspection until it expires


class Phase(StrEnum):
    PENDING = "pending"  # to be dispatched (at ``not_before`` if set)
    DISPATCHED = "dispatched"  # command sent, waiting for the equipment's reply
    WAITING = "waiting"  # pull_event: waiting for an equipment event
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"  # its step was left, it was reset (R), or the job stopped


ACTIVE_PHASES = frozenset({Phase.PENDING, Phase.DISPATCHED, Phase.WAITING})


@dataclass
class ActionRun:
    """One activation of an action (a loop re-entering its step starts a fresh one)."""

    name: str
    step: str
    phase: Phase = Phase.PENDING
    attempt: int = 0  # correlation attempt number of the last dispatch (unique per job)
    tries: int = 0  # dispatches in this activation, for the retry policy
    blocking: bool = True  # the step waits for it (N, L, D)
    stored: bool = False  # S: outlives its step
    not_before: float | None = None  # D delay or retry backoff
    dispatched_at: float | None = None  # when the current try was sent (reply latency)
    deadline: float | None = None  # timeout of the current try
    limit_at: float | None = None  # L: ends (without error) at this time
    error: str | None = None

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE_PHASES


@dataclass
class NodeRun:
    """An active step or branch."""

    name: str
    entered_at: float
    branch: bool = False
    open_paths: list[int] = field(default_factory=list)  # branch: paths not finished yet
    selected: bool = False  # branch: paths chosen (selection may wait for a guard)


@dataclass
class Execution:
    scope: str
    job: str
    version: int = 0
    # This run of the job: a job id cleared and stored again starts a new run, whose versions
    # count from 0 again. Written right after the version (the commit script compares both).
    run: str = ""
    status: Status = Status.RUNNING
    nodes: dict[str, NodeRun] = field(default_factory=dict)
    actions: dict[str, ActionRun] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)  # action name -> last result
    attempts: dict[str, int] = field(default_factory=dict)  # action name -> last attempt number
    side_effects: bool = False  # a command that may change things has been sent
    outcome: str | None = None  # "completed", "aborted", "stopped"
    error: str | None = None
    failed_action: str | None = None
    recheck_at: float | None = None  # a transition waits on time: look again then


_converter = cattrs.Converter()


def dump_execution(execution: Execution) -> str:
    """The document, compact, its fields in their order here (the commit script reads scope,
    job, version and run off its head). Written on every step: orjson encodes the dataclasses in C.
    """
    try:
        return orjson.dumps(execution).decode()
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits in a result
        return json.dumps(_converter.unstructure(execution), separators=(",", ":"))


def load_execution(text: str | bytes) -> Execution:
    return _converter.structure(json.loads(text), Execution)


def dump_action_run(run: ActionRun) -> str:
    """A finished action's run, as the history keeps it (``keys``: ``sfc:history:<job>``)."""
    return orjson.dumps(run).decode()


def load_action_run(text: str | bytes) -> ActionRun:
    return _converter.structure(json.loads(text), ActionRun)


def take_done(execution: Execution) -> dict[str, ActionRun]:
    """Remove the runs that are done from ``execution`` and return them: nothing the engine
    decides looks at a run that is done (a reply or timer for it changes nothing, as for a run
    that is gone), and the state written on every step stays the size of what goes on."""
    done = {name: run for name, run in execution.actions.items() if run.phase is Phase.DONE}
    for name in done:
        del execution.actions[name]
    return done
