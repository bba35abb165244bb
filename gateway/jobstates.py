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
