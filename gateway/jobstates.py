"""The job order states of OPC 40001-3 and their numbers (tables 39, 42, 45, 48).

Facts of the standard that more than one plugin needs (job management names states by them,
the MES publisher numbers the states it lists), so they live in the host once.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class TopState(StrEnum):
    """The top-level job order states; a state path starts with one (``Interrupted.Held``)."""

    INITIAL = "InitialState"
    NOT_ALLOWED_TO_START = "NotAllowedToStart"
    ALLOWED_TO_START = "AllowedToStart"
    RUNNING = "Running"
    INTERRUPTED = "Interrupted"
    ENDED = "Ended"
    ABORTED = "Aborted"
    END = "EndState"  # Clear or Cancel: the job left the station

    @classmethod
    def of(cls, path: str) -> TopState:
        """The top-level state of a state path (``Ended.Completed`` -> ``ENDED``);
        ``ValueError`` for a path that starts with no known state."""
        return cls(path.partition(".")[0])

    @property
    def final(self) -> bool:
        """Ended or Aborted: the Job Response is final and the MES may Clear the job."""
        return self in (TopState.ENDED, TopState.ABORTED)


TOP_STATES: Mapping[str, int] = {
    "InitialState": 0,
    "NotAllowedToStart": 1,
    "AllowedToStart": 2,
    "Running": 3,
    "Interrupted": 4,
    "Ended": 5,
    "Aborted": 6,
    "EndState": 7,
}
_PREPARED = {"Waiting": 1, "Ready": 2, "Loaded": 3}
SUBSTATES: Mapping[str, Mapping[str, int]] = {
    "NotAllowedToStart": _PREPARED,
    "AllowedToStart": _PREPARED,
    "Interrupted": {"Held": 1, "Suspended": 2},
    "Ended": {"Completed": 1, "Closed": 2},
}

assert set(TOP_STATES) == set(TopState), "TopState and TOP_STATES name the same states"


class JobState(StrEnum):
    """Every state a job can be in, as its state path: the top level, then the substate.

    The value is the text the store, the change records and the wire carry
    (``Interrupted.Held``); ``JobState(text)`` reads it back (``ValueError`` for anything else).
    A job is always in a leaf: a top-level state with substates is never a job's state alone.
    """

    INITIAL = "InitialState"  # not in the station (never stored, or cleared)
    NOT_ALLOWED_TO_START_WAITING = "NotAllowedToStart.Waiting"
    NOT_ALLOWED_TO_START_READY = "NotAllowedToStart.Ready"
    NOT_ALLOWED_TO_START_LOADED = "NotAllowedToStart.Loaded"
    ALLOWED_TO_START_WAITING = "AllowedToStart.Waiting"
    ALLOWED_TO_START_READY = "AllowedToStart.Ready"
    ALLOWED_TO_START_LOADED = "AllowedToStart.Loaded"
    RUNNING = "Running"
    HELD = "Interrupted.Held"  # internally held: the recipe wants an operator
    SUSPENDED = "Interrupted.Suspended"  # externally suspended: the MES paused it
    COMPLETED = "Ended.Completed"
    CLOSED = "Ended.Closed"  # stopped early by the MES
    ABORTED = "Aborted"
    END = "EndState"  # Clear or Cancel: the job left the station

    @property
    def top(self) -> TopState:
        return TopState.of(self.value)

    @property
    def substate(self) -> str | None:
        return self.value.partition(".")[2] or None

    @property
    def final(self) -> bool:
        """Ended or Aborted: the Job Response is final and the MES may Clear the job."""
        return self.top.final

    @property
    def number(self) -> int:
        """The top-level state's number (table 39)."""
        return TOP_STATES[self.top]

    @property
    def substate_number(self) -> int | None:
        """The substate's number within its top-level state (tables 42, 45, 48)."""
        sub = self.substate
        return None if sub is None else SUBSTATES[self.top][sub]


StateFilter = TopState | JobState
"""What a query by state asks for: a top-level state matches all its substates."""


def matches(state: JobState, wanted: StateFilter) -> bool:
    """Whether a job in ``state`` is one a query for ``wanted`` asks for."""
    if isinstance(wanted, JobState):
        return state is wanted
    return state.top is wanted


assert {state.top for state in JobState} == set(TopState), "every top-level state has a path"
assert all(
    state.substate is None or state.substate in SUBSTATES[state.top] for state in JobState
), "JobState's substates are those of SUBSTATES"
