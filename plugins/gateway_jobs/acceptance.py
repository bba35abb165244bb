"""Job acceptance (``is_job_acceptable``): may this scope take this job order?

Checked at Store, StoreAndStart and Update, each against the scope's configuration:

    check               the job order's ...                            must be in
    workmaster          WorkMasterID[*].ID (at least one)              config.workmaster
                        and the first one's recipe must run here       (interpreter + validate)
    equipment           EquipmentRequirements[*].ID                    config.equipment
    materialclass       MaterialRequirements[*].MaterialClassID        config.materialclass
    materialdefinition  MaterialRequirements[*].MaterialDefinitionID   config.materialdefinition
    personnel           PersonnelRequirements[*].ID                    config.personnel
    physicalasset       PhysicalAssetRequirements[*].ID                config.physicalasset

An empty allowed set allows nothing: a scope takes jobs only once the MES configured what they
need. Every failing check is reported, each as ``<check>: <what>``. The job runs its first Work
Master (OPC lets the station choose among several; this one takes the first listed). The limit on
job orders (``max_job_orders``) and duplicate ids are checked when the job is written, atomically
with the write (see ``repository``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway_jobs.config import RESOURCE_KINDS, WORK_MASTER, StationConfig, recipe_problems
from gateway_jobs.model import JobOrder, WorkMaster


@dataclass(frozen=True)
class Verdict:
    """The Work Master the job runs when it is acceptable, else the reasons it is not."""

    work_master: WorkMaster | None
    problems: list[str]

    @property
    def message(self) -> str:
        return "; ".join(self.problems)


def requirement_ids(order: JobOrder) -> dict[str, list[str]]:
    """The IDs a job order names, per configuration kind."""
    materials = order.material_requirements or []
    named: dict[str, list[str | None]] = {
        "equipment": [item.id for item in order.equipment_requirements or []],
        "materialclass": [item.material_class_id for item in materials],
        "materialdefinition": [item.material_definition_id for item in materials],
        "personnel": [item.id for item in order.personnel_requirements or []],
        "physicalasset": [item.id for item in order.physical_asset_requirements or []],
    }
    return {kind: [value for value in ids if value is not None] for kind, ids in named.items()}


async def check_job_order(config: StationConfig, scope: str, order: JobOrder) -> Verdict:
    problems: list[str] = []
    work_master, work_master_problems = await _work_master(config, scope, order)
    problems += [f"{WORK_MASTER}: {problem}" for problem in work_master_problems]
    for kind, ids in requirement_ids(order).items():
        missing = await config.not_allowed(scope, kind, list(dict.fromkeys(ids)))
        if missing:
            problems.append(
                f"{kind}: {RESOURCE_KINDS[kind].job_field} names "
                f"{', '.join(map(repr, missing))}, not allowed in scope {scope!r}"
            )
    return Verdict(None if problems else work_master, problems)


async def _work_master(
    config: StationConfig, scope: str, order: JobOrder
) -> tuple[WorkMaster | None, list[str]]:
    ids = [reference.id for reference in order.work_master_id or []]
    if not ids:
        return None, ["the job order names no Work Master (WorkMasterID is empty)"]
    missing = await config.not_allowed(scope, WORK_MASTER, ids)
    if missing:
        return None, [f"WorkMasterID names {', '.join(map(repr, missing))}, not configured"]
    work_master = await config.work_master(scope, ids[0])
    if work_master is None:  # deleted between the two reads
        return None, [f"Work Master {ids[0]!r} is not configured"]
    return work_master, recipe_problems(work_master, config.interpreters)
