"""JobOrderControl's variables of what a job order may name, kept current.

``EquipmentID``, ``MaterialClassID``, ``MaterialDefinitionID``, ``PersonnelID`` and
``PhysicalAssetID`` list the IDs the MES configured for the scope, ``WorkMaster`` its Work
Masters (``ISA95WorkMasterDataType``: ID, Description, Parameters; not the recipe) and
``MaxDownloadableJobOrders`` the jobs it may hold (65535: no limit). They are read through
``gateway.job_methods`` every ``opcua.configuration_poll_seconds``, so a change made on any
instance shows, and a variable is written only when its value changed: a client subscribed to
it hears of each change once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from asyncua import ua

from gateway.jobmethods import JobMethods
from gateway_opcua.addressspace import RECEIVER_VARIABLES, ScopeNodes
from gateway_opcua.convert import ConversionError, from_json, ua_type

log = logging.getLogger(__name__)

_UINT16_MAX = 0xFFFF


class ReceiverVariables:
    """The receiver variables of one served scope, and what they show."""

    def __init__(self, nodes: ScopeNodes) -> None:
        self.nodes = nodes
        self.shown: dict[str, Any] = {}

    async def refresh(self, methods: JobMethods) -> None:
        await self.show(await methods.receiver_configuration(self.nodes.scope))

    async def show(self, configuration: Mapping[str, Any]) -> None:
        for name, variant_type in RECEIVER_VARIABLES.items():
            value = configuration.get(name)
            if name in self.shown and self.shown[name] == value:
                continue
            await self.nodes.receiver[name].write_value(self._variant(name, value, variant_type))
            self.shown[name] = value

    def _variant(self, name: str, value: Any, variant_type: ua.VariantType) -> ua.Variant:
        if variant_type is ua.VariantType.UInt16:
            return ua.Variant(min(int(value or 0), _UINT16_MAX), variant_type)
        if variant_type is ua.VariantType.ExtensionObject:
            return ua.Variant(self._work_masters(value or []), variant_type, is_array=True)
        return ua.Variant([str(entry) for entry in value or []], variant_type, is_array=True)

    def _work_masters(self, entries: list[Mapping[str, Any]]) -> list[Any]:
        """Each Work Master as ``ISA95WorkMasterDataType``; one that does not convert is left
        out, and says why, rather than hiding the others."""
        converted = []
        for entry in entries:
            try:
                converted.append(
                    from_json(dict(entry), ua_type("ISA95WorkMasterDataType"), "WorkMaster")
                )
            except ConversionError as error:
                log.error(
                    "OPC UA WorkMaster %s of scope %s not shown: %s",
                    entry.get("ID"),
                    self.nodes.scope,
                    error,
                )
        return converted
