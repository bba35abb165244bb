"""A sequence job's execution state: what is kept in Redis between two stimuli.

Everything an instance needs to continue a job another instance started is here (the recipe
and parameters it started with, where it is, each step's latest try), so any instance can apply
the next reply, timeout or MES command to it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    STARTING = "starting"  # stored by ``start``; its job is not Running yet
    RUNNING = "running"
    PAUSED = "paused"  # the MES paused the job: steps out finish, no new block begins
    HELD = "held"  # a step failed with ``on_error: hold``; the MES's Resume retries it
    FINISHING = "finishing"  # done; its report to job control is due
    ENDED = "ended"  # reported; kept a while for inspection


class Outcome(StrEnum):
    COMPLETED = "completed"  # every step succeeded
    FAILED = "failed"  # a step failed (``on_error: abort``): the job is aborted
    STOPPED = "stopped"  # the MES stopped the job
    ABORTED = "aborted"  # the MES aborted the job


class Phase(StrEnum):
    SENT = "sent"  # the command is out; its reply or timeout is awaited
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"  # the sequence ended while it was out


@dataclass
class StepRun:
    """The latest try of one command step."""

    name: str
    attempt: int  # the attempt of its correlation id ``{job}:{step}:{attempt}``
    tries: int  # tries since the step was (re)entered; ``max_attempts`` bounds them
    phase: Phase
    sent_at: float
    deadline: float
    error: str | None = None


@dataclass
class Run:
    scope: str
    job: str
    recipe: Any  # the recipe JSON the job started with (a Work Master changed later is not it)
    parameters: dict[str, Any]
    status: Status
    started_at: float
    position: int = 0  # the block that runs, or runs next when ``entered`` is false
    entered: bool = False
    steps: dict[str, StepRun] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    outcome: Outcome | None = None
    side_effects: bool = False  # a command that may change product or equipment went out
    failed_command: str | None = None  # the correlation id whose failure held or ended it
    hold_reported: bool = False
    version: int = 0
    # The last attempt of each step in the earlier runs of the job id (cleared and stored
    # again): tries are numbered on from them, so a late reply to those runs matches no try.
    earlier_attempts: dict[str, int] = field(default_factory=dict)
    # The job order's StoredAt (``RecipeJob.stored_at``): which job order of the id this run
    # is for, when the MES clears a job and stores the id again ("": written before it was kept).
    stored_at: str = ""

    def correlation_id(self, step: str) -> str:
        return f"{self.job}:{step}:{self.steps[step].attempt}"

    def outstanding(self) -> set[tuple[str, int]]:
        """The tries sent and not answered yet."""
        return {(s.name, s.attempt) for s in self.steps.values() if s.phase is Phase.SENT}


def dump_run(run: Run) -> dict[str, Any]:
    return asdict(run)


def load_run(data: Any) -> Run:
    """A ``Run`` from its stored JSON; ``ValueError`` when it is not one."""
    if not isinstance(data, dict):
        raise ValueError(f"a sequence run must be a JSON object, got {type(data).__name__}")
    fields = dict(data)
    fields["status"] = Status(fields["status"])
    fields["outcome"] = None if fields.get("outcome") is None else Outcome(fields["outcome"])
    fields["steps"] = {
        name: StepRun(**{**step, "phase": Phase(step["phase"])})
        for name, step in fields.get("steps", {}).items()
    }
    return Run(**fields)
