"""What travels between the line and a station: job order ids, job orders, Job Responses.

Pure functions, no I/O. The downstream job order id is derived from the upstream command alone
(``{job}:{action}:{attempt}@{scope}``: the command's correlation id and the upstream scope), so a
command sent again after a crash or a redelivery names the same downstream job, which the
station refuses to store twice; and a station's retained topics say, by the id alone, which
upstream job and action each of its jobs belongs to (no table to keep).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.equipment import CorrelationId, EquipmentCommand

MAX_JOB_ORDER_ID = 256  # what a station accepts (OPC 40001-3 leaves it to the server)
WORK_MASTER_PARAMETER = "WorkMasterID"  # action parameter: the station's Work Master(s)
PRIORITY_PARAMETER = "Priority"  # action parameter: the station job's priority
RESERVED_PARAMETERS = frozenset({WORK_MASTER_PARAMETER, PRIORITY_PARAMETER})
_DOWNSTREAM_ID = re.compile(r"^(?P<correlation>.+:\d+)@(?P<scope>[^@]+)$")
FINAL_TOP_STATES = frozenset({"Ended", "Aborted", "EndState"})


@dataclass(frozen=True)
class Upstream:
    """The upstream try a downstream job carries out."""

    scope: str
    correlation: CorrelationId

    @property
    def job(self) -> str:
        return self.correlation.job


def downstream_job_id(command: EquipmentCommand) -> str:
    """The station's job order id for ``command``: the same for every re-send of one try."""
    text = f"{command.correlation_id}@{command.scope}"
    if len(text) > MAX_JOB_ORDER_ID:
        raise ValueError(f"job order id {text[:40]}... is longer than {MAX_JOB_ORDER_ID}")
    return text


def upstream_of(job_order_id: str) -> Upstream | None:
    """The upstream try behind a station's job order id; ``None``: not one of the line's."""
    found = _DOWNSTREAM_ID.match(job_order_id)
    if found is None:
        return None
    try:
        correlation = CorrelationId.parse(found["correlation"])
    except ValueError:
        return None
    return Upstream(found["scope"], correlation)


def job_order(command: EquipmentCommand) -> dict[str, Any]:
    """The job order a station runs for ``command`` (OPC UA JSON, PascalCase).

    Its parameters are the upstream job's, overridden by the action's; the action's
    ``WorkMasterID`` (one id or a list) names the station's Work Masters (none: the station's
    default) and its ``Priority`` the job's priority.
    """
    parameters = {**command.job_parameters, **command.parameters}
    order: dict[str, Any] = {"JobOrderID": downstream_job_id(command)}
    work_masters = parameters.get(WORK_MASTER_PARAMETER)
    if work_masters:
        names = [work_masters] if isinstance(work_masters, str) else list(work_masters)
        order["WorkMasterID"] = [{"ID": str(name)} for name in names]
    if isinstance(parameters.get(PRIORITY_PARAMETER), int):
        order["Priority"] = parameters[PRIORITY_PARAMETER]
    values = [
        {"ID": key, "Value": value}
        for key, value in parameters.items()
        if key not in RESERVED_PARAMETERS
    ]
    if values:
        order["JobOrderParameters"] = values
    return order


@dataclass(frozen=True)
class StationOutcome:
    """How a station's job ended, as the upstream action's reply: ``error`` unless completed."""

    data: dict[str, Any]
    error: str | None


def state_texts(states: Any) -> list[str]:
    """``[{"StateText": {"Text": "Ended"}}, ...]`` (or the index's snake_case) -> texts."""
    texts: list[str] = []
    for state in states if isinstance(states, Sequence) else ():
        if isinstance(state, Mapping):
            text = state.get("StateText") or state.get("state_text") or {}
            texts.append(str(text.get("Text") or text.get("text") or ""))
    return texts


def is_final(texts: Sequence[str]) -> bool:
    return bool(texts) and texts[0] in FINAL_TOP_STATES


def outcome(station: str, response: Mapping[str, Any]) -> StationOutcome | None:
    """The action's reply for a station's final Job Response; ``None`` while it has not ended.

    Completed: the Job Response's data (``JobResponseData`` by ``ID``) and ``JobOrderID``, the
    station's job. Anything else (Aborted, Ended.Closed by a Stop): an error naming the
    station, its job and the station's reason (its ``Error`` entry), the data beside it.
    """
    texts = state_texts(response.get("JobState"))
    if not is_final(texts):
        return None
    job_order_id = str(response.get("JobOrderID", ""))
    data: dict[str, Any] = {
        str(entry["ID"]): entry.get("Value")
        for entry in response.get("JobResponseData") or ()
        if isinstance(entry, Mapping) and "ID" in entry
    }
    data["JobOrderID"] = job_order_id
    state = ".".join(texts[:2])
    if state == "Ended.Completed":
        return StationOutcome(data, None)
    reason = data.get("Error") or "no reason given"
    return StationOutcome(data, f"station {station} job {job_order_id} {state}: {reason}")
