"""What clients see change: ISA95JobOrderStatusEventType events and the JobOrderList.

Every status event of a served scope (from the store's change streams, so changes made on any
instance through any protocol) becomes an ``ISA95JobOrderStatusEventType`` with ``JobOrder``,
``JobState`` and ``JobResponse`` filled. It is emitted from the scope's JobManagement object and
from the Server object, so a client may subscribe to either (UaExpert's event view watches the
Server); ``SourceNode`` is the JobManagement object, ``SourceName`` the scope. Its ``Severity``
is 100, or 500 when the job aborted.

The scope's ``JobOrderList`` (in JobOrderControl) is kept current from the same events; a
client may subscribe to its value.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from asyncua import Server, ua
from asyncua.server.event_generator import EventGenerator

from gateway.jobmethods import JobStatus
from gateway.jobstates import JobState
from gateway_opcua.addressspace import ScopeNodes
from gateway_opcua.convert import ConversionError, from_json, ua_type
from gateway_opcua.model import InformationModel

log = logging.getLogger(__name__)

# Structure-valued event fields must carry their Variant type, or asyncua sends them empty.
_STRUCTURE_FIELDS = ("JobOrder", "JobState", "JobResponse")


class ScopeEvents:
    """The events and the JobOrderList of one served scope."""

    def __init__(self, nodes: ScopeNodes, generators: Sequence[EventGenerator], names: int) -> None:
        self.nodes = nodes
        self.generators = generators
        self.names = names  # the ISA-95 namespace: substate browse paths name its state machine
        # JobOrderID -> (list order, ISA95JobOrderAndStateDataType): converted once per change.
        self.jobs: dict[str, tuple[tuple[int, str], Any]] = {}

    @classmethod
    async def create(
        cls, server: Server, model: InformationModel, nodes: ScopeNodes
    ) -> ScopeEvents:
        generators = []
        for emitter in (nodes.job_management.nodeid, ua.NodeId(ua.ObjectIds.Server)):
            generator = await server.get_event_generator(model.job_order_status_event_type, emitter)
            for name in _STRUCTURE_FIELDS:
                generator.event.data_types[name] = ua.VariantType.ExtensionObject
            generator.event.SourceNode = nodes.job_management.nodeid
            generator.event.SourceName = nodes.scope
            generators.append(generator)
        return cls(nodes, generators, model.isa95)

    async def load(self, job_orders: Sequence[Mapping[str, Any]]) -> None:
        """Start from the scope's jobs as they are now."""
        self.jobs.clear()
        for entry in job_orders:
            self._keep(entry)
        await self._write_list()

    async def publish(self, status: JobStatus) -> None:
        """One status event, and the JobOrderList it changes."""
        try:
            job_order = self._convert(status.job_order, "ISA95JobOrderDataType", "JobOrder")
            job_state = [
                self._convert(entry, "ISA95StateDataType", "JobState") for entry in status.job_state
            ]
            job_response = self._convert(
                status.job_response, "ISA95JobResponseDataType", "JobResponse"
            )
        except ConversionError as error:  # one odd job must not silence the others
            log.error(
                "OPC UA event of job %s/%s not sent: %s", status.scope, status.job_order_id, error
            )
            return
        for generator in self.generators:
            event = generator.event
            event.JobOrder, event.JobState, event.JobResponse = job_order, job_state, job_response
            event.Severity = 500 if status.state is JobState.ABORTED else 100
            await generator.trigger(
                message=f"{status.job_order_id}: {status.method} -> {status.state}"
            )
        self.jobs.pop(status.job_order_id, None)
        if status.state is not JobState.END:
            self._keep({"JobOrder": status.job_order, "State": status.job_state})
        await self._write_list()

    def _keep(self, entry: Mapping[str, Any]) -> None:
        order = entry["JobOrder"]
        try:
            value = self._convert(entry, "ISA95JobOrderAndStateDataType", "JobOrderList")
        except ConversionError as error:
            log.error("job %s left out of the JobOrderList: %s", order.get("JobOrderID"), error)
            return
        self.jobs[order["JobOrderID"]] = (_list_order(order), value)

    def _convert(self, value: Mapping[str, Any], kind: str, path: str) -> Any:
        return from_json(dict(value), ua_type(kind), path, self.names)

    async def _write_list(self) -> None:
        entries = [value for _, value in sorted(self.jobs.values(), key=lambda job: job[0])]
        variant = ua.Variant(entries, ua.VariantType.ExtensionObject, is_array=True)
        await self.nodes.job_order_list.write_value(variant)


def _list_order(order: Mapping[str, Any]) -> tuple[int, str]:
    """Highest Priority first, then by JobOrderID (as job management lists them)."""
    return -int(order.get("Priority") or 0), str(order["JobOrderID"])
