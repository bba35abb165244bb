"""The information models the server loads: DI, Machinery, ISA95-JOBCONTROL_V2, Machinery Jobs.

The NodeSets ship with this package (``nodesets/``, OPC Foundation MIT License, stated in each
file). asyncua 2.1 needs a workaround to load them: a plain ``import_xml`` of Machinery Jobs
fails on the structure ``OutputInformationDataType``, so every file is imported without
loading its data type definitions, and the definitions are loaded once at the end.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from importlib.resources import as_file, files

from asyncua import Server, ua

log = logging.getLogger(__name__)

NODESETS = (
    "Opc.Ua.Di.NodeSet2.xml",
    "Opc.Ua.Machinery.NodeSet2.xml",
    "opc.ua.isa95-jobcontrol.nodeset2.xml",
    "Opc.Ua.Machinery.Jobs.Nodeset2.xml",
)
DI_URI = "http://opcfoundation.org/UA/DI/"
MACHINERY_URI = "http://opcfoundation.org/UA/Machinery/"
ISA95_URI = "http://opcfoundation.org/UA/ISA95-JOBCONTROL_V2/"
JOBS_URI = "http://opcfoundation.org/UA/Machinery/Jobs/"
GATEWAY_URI = "urn:station-gateway:opcua:machines"  # the served MachineryItems


@dataclass(frozen=True)
class InformationModel:
    """Namespace indexes of the loaded models, and the nodes the server builds on."""

    di: int
    machinery: int
    isa95: int
    jobs: int
    gateway: int
    seconds: float  # how long loading took

    @property
    def machines(self) -> ua.NodeId:
        """Machinery's ``Machines`` folder: every machine is found under it."""
        return ua.NodeId(1001, self.machinery)

    @property
    def machine_identification_type(self) -> ua.NodeId:
        return ua.NodeId(1012, self.machinery)

    @property
    def job_management_type(self) -> ua.NodeId:
        return ua.NodeId(1003, self.jobs)

    @property
    def job_order_receiver_type(self) -> ua.NodeId:
        """ISA95JobOrderReceiverObjectType: declares Store, Start, ... (all optional)."""
        return ua.NodeId(1002, self.isa95)

    @property
    def job_order_status_event_type(self) -> ua.NodeId:
        return ua.NodeId(1006, self.isa95)


async def load_information_model(server: Server) -> InformationModel:
    """Import the four NodeSets into ``server`` (initialised, not started)."""
    started = time.perf_counter()
    package = files("gateway_opcua") / "nodesets"
    importer_log = logging.getLogger("asyncua.common.xmlimporter")
    level = importer_log.level
    # asyncua warns that it cannot tell whether two enumerations-with-definitions (Machinery
    # Jobs' OutputInfoType, one of ISA95's) are structures; they are not, and load fine.
    importer_log.setLevel(logging.ERROR)
    try:
        for name in NODESETS:
            with as_file(package / name) as path:
                await server.import_xml(path, auto_load_definitions=False)
    finally:
        importer_log.setLevel(level)
    await server.load_data_type_definitions()
    namespaces = await server.get_namespace_array()
    gateway = await server.register_namespace(GATEWAY_URI)
    model = InformationModel(
        di=namespaces.index(DI_URI),
        machinery=namespaces.index(MACHINERY_URI),
        isa95=namespaces.index(ISA95_URI),
        jobs=namespaces.index(JOBS_URI),
        gateway=gateway,
        seconds=time.perf_counter() - started,
    )
    log.info("OPC UA information models loaded in %.2f s", model.seconds)
    return model
