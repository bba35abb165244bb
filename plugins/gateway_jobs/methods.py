"""``gateway.jobmethods.JobMethods``: the MES's methods, whichever protocol brings them.

The MQTT processor and any other northbound server (OPC UA) call ``JobsMethods.call``, so a job
is handled the same way, and counted in the same metrics, whichever way it came.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from gateway.changes import ReadPace
from gateway.errors import ValidationError
from gateway.jobmethods import JobMethod, MethodResult
from gateway.store import check_scope
from gateway_jobs.events import Cause
from gateway_jobs.feed import StreamFeed, status_feed
from gateway_jobs.jobs import JobManager
from gateway_jobs.model import (
    JobOrderCall,
    JobOrderIDCall,
    JobResponseByIDCall,
    JobResponseByStateCall,
    MethodReply,
    Outcome,
    from_json,
    to_json,
)
from gateway_jobs.states import CREATING, state_filter, state_list

# JobOrderControl's variables of allowed IDs, by the configuration kind that sets them.
RECEIVER_ID_VARIABLES = {
    "equipment": "EquipmentID",
    "materialclass": "MaterialClassID",
    "materialdefinition": "MaterialDefinitionID",
    "personnel": "PersonnelID",
    "physicalasset": "PhysicalAssetID",
}
# ISA95WorkMasterDataType's fields: what a Work Master shows of itself (not its recipe).
WORK_MASTER_FIELDS = ("ID", "Description", "Parameters")


class JobsMethods:
    """The job methods of one job manager."""

    def __init__(
        self,
        manager: JobManager,
        *,
        count: Callable[[str, str], None] = lambda method, status: None,
    ) -> None:
        self.manager = manager
        self.count = count  # (method, ReturnStatus name): for metrics

    async def call(
        self,
        scope: str,
        method: JobMethod,
        arguments: Mapping[str, Any],
        *,
        correlationid: str | None = None,
        causationid: str | None = None,
        requested_by: str = "MES",
    ) -> MethodResult:
        """``requested_by`` names the caller for ``gateway_job_method_called`` observers."""
        check_scope(scope)
        if method is JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID:
            by_id = from_json(arguments, JobResponseByIDCall)
            return MethodResult(to_json(await self.manager.job_response(scope, by_id.job_order_id)))
        if method is JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_STATE:
            by_state = from_json(arguments, JobResponseByStateCall)
            try:
                wanted = state_filter(by_state.job_order_state)
            except ValueError as error:  # names no state of the machine
                raise ValidationError("data.JobOrderState", str(error)) from None
            return MethodResult(to_json(await self.manager.job_responses(scope, wanted)))
        cause = Cause(correlationid, causationid or f"urn:uuid:{uuid.uuid4()}")
        outcome = await self._act(scope, method, arguments, cause)
        self.count(method.value, outcome.status.name)
        self.manager.method_called(
            scope, _job_order_id(arguments), method.value, outcome, requested_by=requested_by
        )
        return MethodResult(to_json(MethodReply(outcome.status)), outcome.message)

    async def _act(
        self, scope: str, method: JobMethod, arguments: Mapping[str, Any], cause: Cause
    ) -> Outcome:
        if method.value in CREATING:
            call = from_json(arguments, JobOrderCall)
            return await self.manager.store(scope, method.value, call, cause)
        if method is JobMethod.UPDATE:
            return await self.manager.update(scope, from_json(arguments, JobOrderCall), cause)
        by_id = from_json(arguments, JobOrderIDCall)
        return await self.manager.act(scope, method.value, by_id, cause)

    async def job_orders(self, scope: str) -> Sequence[Mapping[str, Any]]:
        repository = self.manager.repository
        orders = []
        for job_order_id in await repository.job_order_ids(check_scope(scope)):
            job = await repository.load(scope, job_order_id)
            if job is not None:  # cleared between the two reads
                orders.append(
                    {"JobOrder": to_json(job.job_order), "State": to_json(state_list(job.state))}
                )
        return orders

    async def receiver_configuration(self, scope: str) -> Mapping[str, Any]:
        receiver = await self.manager.config.receiver(check_scope(scope))
        configuration: dict[str, Any] = {
            name: list(receiver.allowed[kind]) for kind, name in RECEIVER_ID_VARIABLES.items()
        }
        configuration["WorkMaster"] = [
            {name: value for name, value in to_json(item).items() if name in WORK_MASTER_FIELDS}
            for item in receiver.work_masters
        ]
        configuration["MaxDownloadableJobOrders"] = self.manager.max_downloadable(
            receiver.acceptance
        )
        return configuration

    def status_feed(
        self, scopes: Sequence[str], *, documents: bool = True, pace_seconds: float = 0.0
    ) -> AbstractAsyncContextManager[StreamFeed]:
        for scope in scopes:
            check_scope(scope)
        repository = self.manager.repository
        pace = ReadPace(pace_seconds)
        return status_feed(repository.store, repository, scopes, documents=documents, pace=pace)


def _job_order_id(arguments: Mapping[str, Any]) -> str | None:
    """The job a call is about (``JobOrder.JobOrderID`` or ``JobOrderID``), when it names one."""
    order = arguments.get("JobOrder") or arguments.get("job_order")
    named = (
        order.get("JobOrderID")
        if isinstance(order, Mapping)
        else arguments.get("JobOrderID", arguments.get("job_order_id"))
    )
    return named if isinstance(named, str) else None
