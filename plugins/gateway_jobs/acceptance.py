"""Job acceptance (``is_job_acceptable``): may this scope take this job order?

Checked at Store, StoreAndStart and Update, each against the scope's configuration:

    check               the job order's ...                            must be in
    workmaster          WorkMasterID[*].ID (none: the scope's default) config.workmaster
                        one whose recipe runs here, every action       (interpreter + validate,
                        served by equipment or a driver                 gateway.routing)
    equipment           EquipmentRequirements[*].ID                    config.equipment
    materialclass       MaterialRequirements[*].MaterialClassID        config.materialclass
    materialdefinition  MaterialRequirements[*].MaterialDefinitionID   config.materialdefinition
    personnel           PersonnelRequirements[*].ID                    config.personnel
    physicalasset       PhysicalAssetRequirements[*].ID                config.physicalasset

An empty allowed set allows nothing: a scope takes jobs only once the MES configured what they
need. Every failing check is reported, each as ``<check>: <what>``.

Work Master selection (OPC 40001-3: with none defined "the server may use internal logic ... to
select the appropriate WorkMaster"; with several it may choose "based on the availability of
resources"): a job order naming no Work Master runs the scope's default (``config.jobacceptance``
``DefaultWorkMasterID``, else the ``[jobs] default_work_master`` setting; neither: refused). Of
several, the job runs the first listed that is configured, whose recipe runs here and routes, and
whose equipment is online where its liveness is known. When every usable one has equipment
offline, the first usable one is taken all the same: a heartbeat missed at Store must not refuse
a job that runs later (the engine waits for, and reports, offline equipment). None usable: refused,
each listed Work Master with what it lacks.

The limit on job orders (``max_job_orders``) and duplicate ids are checked when the job is
written, atomically with the write (see ``repository``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.recipes import equipment_uses
from gateway.routing import availability_problems, routes, routing_problems
from gateway_jobs.config import (
    RESOURCE_KINDS,
    WORK_MASTER,
    ConfigSnapshot,
    StationConfig,
    recipe_problems,
)
from gateway_jobs.model import JobOrder, WorkMaster

log = logging.getLogger(__name__)


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


def named_work_masters(order: JobOrder) -> list[str]:
    """The Work Masters a job order names, each once, in its order."""
    return list(dict.fromkeys(reference.id for reference in order.work_master_id or []))


async def check_job_order(
    config: StationConfig,
    scope: str,
    order: JobOrder,
    *,
    default_work_master: str = "",
    known: ConfigSnapshot | None = None,
) -> Verdict:
    """``default_work_master``: the ``[jobs]`` setting (the scope's configuration wins);
    ``known``: the configuration as already read (``StationConfig.snapshot``)."""
    problems: list[str] = []
    work_master, work_master_problems = await select_work_master(
        config, scope, order, default_work_master, known
    )
    problems += [f"{WORK_MASTER}: {problem}" for problem in work_master_problems]
    for kind, ids in requirement_ids(order).items():
        missing = await config.not_allowed(scope, kind, list(dict.fromkeys(ids)))
        if missing:
            problems.append(
                f"{kind}: {RESOURCE_KINDS[kind].job_field} names "
                f"{', '.join(map(repr, missing))}, not allowed in scope {scope!r}"
            )
    return Verdict(None if problems else work_master, problems)


async def select_work_master(
    config: StationConfig,
    scope: str,
    order: JobOrder,
    default: str = "",
    known: ConfigSnapshot | None = None,
) -> tuple[WorkMaster | None, list[str]]:
    """The Work Master the job runs, or what each candidate lacks (see the module docstring)."""
    ids = named_work_masters(order)
    if not ids:
        acceptance = await config.job_acceptance(scope) if known is None else known.acceptance
        default = acceptance.default_work_master_id or default
        if not default:
            return None, [
                "the job order names no Work Master (WorkMasterID is empty) and scope "
                f"{scope!r} has no default (config.jobacceptance DefaultWorkMasterID or "
                "[jobs] default_work_master)"
            ]
        ids = [default]
    problems: list[str] = []
    fallback: WorkMaster | None = None
    for work_master_id in ids:
        if known is not None and work_master_id in known.work_masters:
            work_master = known.work_masters[work_master_id]
        else:
            work_master = await config.work_master(scope, work_master_id)
        if work_master is None:
            problems.append(f"Work Master {work_master_id!r} is not configured")
            continue
        unusable = recipe_problems(work_master, config.interpreters)
        offline: list[str] = []
        if not unusable and config.equipment is not None:
            interpreter = config.interpreters[work_master.data_schema or ""]
            uses = equipment_uses(interpreter, work_master.data)
            if len(ids) == 1:  # nothing to choose between: whether it is online changes nothing
                found = await routes(config.equipment, scope, uses)
                unroutable = routing_problems(found)
            else:
                unroutable, offline = await availability_problems(config.equipment, scope, uses)
            unusable = [f"Work Master {work_master_id!r}: {problem}" for problem in unroutable]
        if unusable:
            problems += unusable
        elif not offline:
            return work_master, []
        elif fallback is None:
            fallback = work_master
            log.info("Work Master %s skipped for now: %s", work_master_id, "; ".join(offline))
    if fallback is not None:
        return fallback, []
    return None, problems
