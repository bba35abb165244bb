"""The job order states of OPC 40001-3 and their numbers (tables 39, 42, 45, 48).

Facts of the standard that more than one plugin needs (job management names states by them,
the MES publisher numbers the states it lists), so they live in the host once.
"""

from __future__ import annotations

from collections.abc import Mapping

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
