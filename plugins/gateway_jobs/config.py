"""Station configuration the MES pushes: allowed resources, Work Masters, job acceptance.

One CloudEvent type per kind, ``com.github.aschamberger.ISA95-JOBCONTROL_V2.config.<kind>.v1``,
scoped by ``subject``; the ``method`` attribute says PUT (the default: add / store / set) or
DELETE (remove). The payload is one resource or a list of them:

    kind                payload                      identifies by          stored as
    equipment           ISA95EquipmentDataType       ID                     set of allowed IDs
                                                                            + declared types
    materialclass       ISA95MaterialDataType        MaterialClassID        set of allowed IDs
    materialdefinition  ISA95MaterialDataType        MaterialDefinitionID   set of allowed IDs
    personnel           ISA95PersonnelDataType       ID                     set of allowed IDs
    physicalasset       ISA95PhysicalAssetDataType   ID                     set of allowed IDs
    workmaster          Work Master with Data        ID                     document + ID set
    jobacceptance       {MaxDownloadableJobOrders,   (the scope)            document
                         DefaultWorkMasterID,
                         MaxRunningJobOrders}
    online              {Online, Reason}             (the scope)            document
    acknowledgement     {EquipmentIDs,               (the scope)            releases blocked
                         AcknowledgedBy}                                    equipment (``queue``)

Keys: ``{p}:{scope}:config:<kind>`` (sets and the two documents) and
``{p}:{scope}:workmaster:<id>``. A Work Master whose ``DataSchema`` no recipe interpreter here
reads, whose recipe its interpreter finds invalid, or with an action no equipment or driver
serves (``gateway.routing``), is refused with the reasons; a list is stored all or nothing.
Equipment may declare the command and event types it serves (``TypeIds``, see ``routing``):
actions naming no equipment are routed by them.
``jobacceptance`` takes its keys in PascalCase or snake_case. ``online`` with ``Online: false``
takes the scope offline (no queued job starts, see ``queue``); DELETE or ``Online: true`` brings
it back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.equipment import EquipmentHub
from gateway.errors import ValidationError
from gateway.recipes import RecipeInterpreter, equipment_uses
from gateway.routing import routes
from gateway.routing import routing_problems as route_problems
from gateway.store import ScopeTransaction, Store
from gateway_jobs.model import (
    Equipment,
    JobAcceptance,
    Material,
    Online,
    Outcome,
    Personnel,
    PhysicalAsset,
    ReturnStatus,
    WorkMaster,
    from_json,
    to_json,
)
from gateway_jobs.routing import StationTypes, property_types

CONFIG_TYPE_PREFIX = "com.github.aschamberger.ISA95-JOBCONTROL_V2.config."
PUT = "PUT"
DELETE = "DELETE"


@dataclass(frozen=True)
class ResourceKind:
    """A kind of resource whose allowed IDs the MES configures and jobs are checked against."""

    name: str
    model: type[Any]
    id_field: str  # JSON name of the identifying field
    identify: Callable[[Any], str | None]
    job_field: str  # where job orders name it, for messages


RESOURCE_KINDS: Mapping[str, ResourceKind] = {
    kind.name: kind
    for kind in (
        ResourceKind("equipment", Equipment, "ID", lambda r: r.id, "EquipmentRequirements"),
        ResourceKind(
            "materialclass",
            Material,
            "MaterialClassID",
            lambda r: r.material_class_id,
            "MaterialRequirements",
        ),
        ResourceKind(
            "materialdefinition",
            Material,
            "MaterialDefinitionID",
            lambda r: r.material_definition_id,
            "MaterialRequirements",
        ),
        ResourceKind("personnel", Personnel, "ID", lambda r: r.id, "PersonnelRequirements"),
        ResourceKind(
            "physicalasset", PhysicalAsset, "ID", lambda r: r.id, "PhysicalAssetRequirements"
        ),
    )
}
WORK_MASTER = "workmaster"
JOB_ACCEPTANCE = "jobacceptance"
ONLINE = "online"
# Not configuration kept, an operator's word: equipment an unsafe failure blocked (``queue``) may
# take jobs again. Handled by the processor (job control releases it and traces who did).
ACKNOWLEDGEMENT = "acknowledgement"
CONFIG_KINDS = (*RESOURCE_KINDS, WORK_MASTER, JOB_ACCEPTANCE, ONLINE, ACKNOWLEDGEMENT)
_ACCEPTANCE_NAMES = {
    "max_downloadable_job_orders": "MaxDownloadableJobOrders",
    "max_running_job_orders": "MaxRunningJobOrders",
    "default_work_master_id": "DefaultWorkMasterID",
}


@dataclass(frozen=True)
class ConfigSnapshot:
    """The configuration a Store or Update checks, as read at once (``StationConfig.snapshot``)."""

    acceptance: JobAcceptance
    work_masters: Mapping[str, WorkMaster | None]  # the ones asked for; None: not configured


@dataclass(frozen=True)
class Receiver:
    """What a scope accepts in a job order (``StationConfig.receiver``)."""

    allowed: Mapping[str, Sequence[str]]  # by resource kind (``RESOURCE_KINDS``): the IDs
    work_masters: Sequence[WorkMaster]
    acceptance: JobAcceptance


def config_type(kind: str) -> str:
    return f"{CONFIG_TYPE_PREFIX}{kind}.v1"


def recipe_problems(
    work_master: WorkMaster, interpreters: Mapping[str, RecipeInterpreter]
) -> list[str]:
    """Why ``work_master``'s recipe cannot run here; empty when an interpreter accepts it."""
    if work_master.data_schema is None:
        return [f"Work Master {work_master.id!r} carries no recipe (DataSchema is not set)"]
    interpreter = interpreters.get(work_master.data_schema)
    if interpreter is None:
        known = ", ".join(sorted(interpreters)) or "none"
        return [
            f"Work Master {work_master.id!r}: no recipe interpreter for DataSchema "
            f"{work_master.data_schema!r} (known: {known})"
        ]
    return [
        f"Work Master {work_master.id!r}: recipe: {problem}"
        for problem in interpreter.validate(work_master.data)
    ]


class StationConfig:
    """The configuration of each scope, as the MES pushed it.

    ``equipment``: the hub whose drivers recipes are routed to (``None``: routing unchecked).
    """

    def __init__(
        self,
        store: Store,
        interpreters: Mapping[str, RecipeInterpreter],
        equipment: EquipmentHub | None = None,
    ) -> None:
        self.store = store
        self.interpreters = interpreters
        self.equipment = equipment
        self.types = StationTypes(store)

    # -- keys -------------------------------------------------------------------------------

    def allowed_key(self, scope: str, kind: str) -> str:
        return self.store.keys.scoped(scope, "config", kind)

    def work_master_key(self, scope: str, work_master_id: str) -> str:
        return self.store.keys.scoped(scope, "workmaster", work_master_id)

    # -- reads (job acceptance) -------------------------------------------------------------

    async def not_allowed(self, scope: str, kind: str, ids: Sequence[str]) -> list[str]:
        """The ``ids`` that are not in the scope's allowed set of ``kind``."""
        if not ids:
            return []
        flags = await self.store.client.smismember(self.allowed_key(scope, kind), list(ids))
        return [value for value, allowed in zip(ids, flags, strict=True) if not allowed]

    async def work_master(self, scope: str, work_master_id: str) -> WorkMaster | None:
        document = await self.store.get_json(self.work_master_key(scope, work_master_id))
        return None if document is None else from_json(document, WorkMaster, element="WorkMaster")

    async def job_acceptance(self, scope: str) -> JobAcceptance:
        """The scope's overrides of the ``[jobs]`` settings (each ``None``: not set)."""
        document = await self.store.get_json(self.allowed_key(scope, JOB_ACCEPTANCE))
        return JobAcceptance() if document is None else from_json(document, JobAcceptance)

    async def receiver(self, scope: str) -> Receiver:
        """What the scope accepts in a job order: its allowed IDs of each kind, then its Work
        Masters and its job acceptance (``snapshot``): two round trips."""
        kinds = [*RESOURCE_KINDS, WORK_MASTER]
        pipeline = self.store.client.pipeline(transaction=True)  # one scope: one slot
        for kind in kinds:
            pipeline.smembers(self.allowed_key(scope, kind))
        sets = await pipeline.execute()
        allowed = {
            kind: sorted(str(id_) for id_ in ids) for kind, ids in zip(kinds, sets, strict=True)
        }
        known = await self.snapshot(scope, allowed[WORK_MASTER])
        return Receiver(
            allowed={kind: allowed[kind] for kind in RESOURCE_KINDS},
            # None: deleted between the two reads
            work_masters=[item for item in known.work_masters.values() if item is not None],
            acceptance=known.acceptance,
        )

    async def snapshot(self, scope: str, work_master_ids: Sequence[str]) -> ConfigSnapshot:
        """The scope's job acceptance and the Work Masters ``work_master_ids``, read in one
        round trip: what an Update checks (a Store reads them in its transaction)."""
        pipeline = self.store.client.pipeline(transaction=True)  # one scope: one slot
        for key in self.snapshot_keys(scope, work_master_ids):
            pipeline.get(key)  # GETs, not MGET: a Cluster pipeline refuses it
        replies = await pipeline.execute()
        documents = [None if text is None else json.loads(text) for text in replies]
        return self.snapshot_of(work_master_ids, documents)

    def snapshot_keys(self, scope: str, work_master_ids: Sequence[str]) -> list[str]:
        """The keys a snapshot reads: the job acceptance, then each Work Master."""
        work_masters = [self.work_master_key(scope, id_) for id_ in work_master_ids]
        return [self.allowed_key(scope, JOB_ACCEPTANCE), *work_masters]

    @staticmethod
    def snapshot_of(work_master_ids: Sequence[str], documents: Sequence[Any]) -> ConfigSnapshot:
        """The snapshot of the documents read from ``snapshot_keys`` (JSON, ``None``: absent)."""
        acceptance, *work_masters = documents
        return ConfigSnapshot(
            JobAcceptance() if acceptance is None else from_json(acceptance, JobAcceptance),
            {
                work_master_id: None
                if document is None
                else from_json(document, WorkMaster, element="WorkMaster")
                for work_master_id, document in zip(work_master_ids, work_masters, strict=True)
            },
        )

    async def routing_problems(self, scope: str, work_master: WorkMaster) -> list[str]:
        """The actions of ``work_master``'s recipe that no equipment or driver serves."""
        interpreter = self.interpreters.get(work_master.data_schema or "")
        if self.equipment is None or interpreter is None:
            return []
        uses = equipment_uses(interpreter, work_master.data)
        return [
            f"Work Master {work_master.id!r}: {problem}"
            for problem in route_problems(await routes(self.equipment, scope, uses))
        ]

    # -- configuration events ---------------------------------------------------------------

    async def apply(self, scope: str, kind: str, method: str, data: Any) -> Outcome:
        """Apply one configuration event; payload errors raise ``ValidationError``."""
        if method not in (PUT, DELETE):
            raise ValidationError("method", f"must be {PUT} or {DELETE}, got {method!r}")
        if kind == JOB_ACCEPTANCE:
            return await self._job_acceptance(scope, method, data)
        if kind == ONLINE:
            return await self._online(scope, method, data)
        if kind == WORK_MASTER:
            return await self._work_masters(scope, method, _items(data, WorkMaster))
        if kind == "equipment":
            return await self._equipment(scope, method, _items(data, Equipment))
        resource = RESOURCE_KINDS[kind]
        return await self._resources(scope, resource, method, _items(data, resource.model))

    async def _resources(
        self, scope: str, kind: ResourceKind, method: str, items: list[Any]
    ) -> Outcome:
        ids = []
        for index, item in enumerate(items):
            identity = kind.identify(item)
            if identity is None:
                raise ValidationError(
                    f"data[{index}].{kind.id_field}", f"is required by config.{kind.name}"
                )
            ids.append(identity)
        if ids:
            key = self.allowed_key(scope, kind.name)
            if method == PUT:
                await self.store.client.sadd(key, *ids)
            else:
                await self.store.client.srem(key, *ids)
        return Outcome(ReturnStatus.NO_ERROR)

    async def _work_masters(self, scope: str, method: str, items: list[WorkMaster]) -> Outcome:
        if method == PUT:
            # A Work Master without a recipe is a plain OPC UA Work Master and may be kept;
            # jobs that would run it are refused at Store.
            problems = [
                problem
                for item in items
                if item.data_schema is not None
                for problem in recipe_problems(item, self.interpreters)
                or await self.routing_problems(scope, item)
            ]
            if problems:
                return Outcome(ReturnStatus.INVALID_REQUEST, "workmaster: " + "; ".join(problems))
        allowed = self.allowed_key(scope, WORK_MASTER)
        async with self.store.transaction(scope) as transaction:
            for item in items:
                if method == PUT:
                    transaction.set_json(self.work_master_key(scope, item.id), to_json(item))
                    transaction.pipeline.sadd(allowed, item.id)
                else:
                    transaction.pipeline.delete(self.work_master_key(scope, item.id))
                    transaction.pipeline.srem(allowed, item.id)
        return Outcome(ReturnStatus.NO_ERROR)

    async def _equipment(self, scope: str, method: str, items: list[Equipment]) -> Outcome:
        """Allowed equipment, and the types each declares (refused when two would share one)."""
        put = property_types(items) if method == PUT else {}
        deleted = [item.id for item in items] if method == DELETE else []
        ids = [item.id for item in items]
        key = self.allowed_key(scope, "equipment")

        def allow(transaction: ScopeTransaction) -> None:
            if ids:
                command = transaction.pipeline.sadd if method == PUT else transaction.pipeline.srem
                command(key, *ids)

        problems = await self.types.change(scope, put, deleted, allow)
        if problems:
            return Outcome(ReturnStatus.INVALID_REQUEST, "equipment: " + "; ".join(problems))
        return Outcome(ReturnStatus.NO_ERROR)

    async def _job_acceptance(self, scope: str, method: str, data: Any) -> Outcome:
        key = self.allowed_key(scope, JOB_ACCEPTANCE)
        if method == DELETE:  # back to the [jobs] max_job_orders setting
            await self.store.client.delete(key)
        else:
            if isinstance(data, dict):
                data = {_ACCEPTANCE_NAMES.get(name, name): value for name, value in data.items()}
            await self.store.set_json(key, to_json(from_json(data, JobAcceptance)))
        return Outcome(ReturnStatus.NO_ERROR)

    async def _online(self, scope: str, method: str, data: Any) -> Outcome:
        key = self.allowed_key(scope, ONLINE)
        if method == DELETE:
            await self.store.client.delete(key)
        else:
            await self.store.set_json(key, to_json(from_json(data, Online)))
        return Outcome(ReturnStatus.NO_ERROR)


@dataclass(frozen=True)
class AcknowledgementRequest:
    equipment: list[str] | None  # None: everything blocked in the scope
    acknowledged_by: str | None


def acknowledgement_request(data: Any) -> AcknowledgementRequest:
    """``{"EquipmentIDs": [...], "AcknowledgedBy": "..."}``, both optional; ``ValidationError``
    names a bad field."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ValidationError("data", "must be a JSON object {EquipmentIDs, AcknowledgedBy}")
    unknown = set(data) - {"EquipmentIDs", "AcknowledgedBy"}
    if unknown:
        raise ValidationError("data", f"unknown field {sorted(unknown)[0]!r}")
    equipment = data.get("EquipmentIDs")
    if equipment is not None and (
        not isinstance(equipment, list)
        or not all(isinstance(item, str) and item for item in equipment)
    ):
        raise ValidationError("data.EquipmentIDs", "must be a list of equipment IDs")
    by = data.get("AcknowledgedBy")
    if by is not None and (not isinstance(by, str) or not by):
        raise ValidationError("data.AcknowledgedBy", "must be a non-empty string")
    return AcknowledgementRequest(equipment, by)


def _items(data: Any, model: type[Any]) -> list[Any]:
    """One resource or a list of them."""
    if isinstance(data, list):
        return from_json(data, list[model])  # type: ignore[valid-type]
    return [from_json(data, model)]
