"""The nodes of one served scope: a MachineryItem with its JobManagement add-in.

::

    Objects/Machines/<scope>                         (MachineryItem, BrowseName = scope id)
        Identification                               MachineIdentificationType add-in
        JobManagement                                JobManagementType add-in
            JobOrderControl                          Store ... Clear, JobOrderList, ...
            JobOrderResults                          RequestJobResponseByJobOrderID/-State

NodeIds are strings in the gateway's namespace that spell the path (``<scope>.JobManagement.
JobOrderControl.Store``), so they can be typed into any client. JobOrderControl's methods are
optional in ISA95JobOrderReceiverObjectType and asyncua does not instantiate them with the
JobManagement object: each is added from the type's method declaration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncua import Node, Server, ua
from asyncua.common.instantiate_util import instantiate

from gateway.jobmethods import JobMethod
from gateway_opcua.model import InformationModel

CONTROL_METHODS = (
    JobMethod.STORE,
    JobMethod.STORE_AND_START,
    JobMethod.START,
    JobMethod.REVOKE_START,
    JobMethod.UPDATE,
    JobMethod.STOP,
    JobMethod.PAUSE,
    JobMethod.RESUME,
    JobMethod.ABORT,
    JobMethod.CANCEL,
    JobMethod.CLEAR,
)
RESULTS_METHODS = (
    JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID,
    JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_STATE,
)
MANUFACTURER = "station-gateway"
# JobOrderControl's variables of what a job order may name, and their Variant types.
RECEIVER_VARIABLES = {
    "EquipmentID": ua.VariantType.String,
    "MaterialClassID": ua.VariantType.String,
    "MaterialDefinitionID": ua.VariantType.String,
    "PersonnelID": ua.VariantType.String,
    "PhysicalAssetID": ua.VariantType.String,
    "WorkMaster": ua.VariantType.ExtensionObject,
    "MaxDownloadableJobOrders": ua.VariantType.UInt16,
}


@dataclass
class ScopeNodes:
    """The nodes of one scope the server acts on."""

    scope: str
    item: Node
    job_management: Node
    job_order_control: Node
    job_order_results: Node
    job_order_list: Node
    # JobOrderControl's variables of what a job order may name (``RECEIVER_VARIABLES``)
    receiver: dict[str, Node] = field(default_factory=dict)
    methods: dict[ua.NodeId, JobMethod] = field(default_factory=dict)  # method node -> method
    parents: dict[ua.NodeId, ua.NodeId] = field(default_factory=dict)  # method node -> object


async def add_scope(
    server: Server, model: InformationModel, scope: str, application_uri: str
) -> ScopeNodes:
    """Build the scope's MachineryItem under Machines (the server is not started yet)."""
    machines = server.get_node(model.machines)
    item = await machines.add_object(
        ua.NodeId(scope, model.gateway), ua.QualifiedName(scope, model.gateway)
    )
    identification = await _add_in(
        item,
        server.get_node(model.machine_identification_type),
        ua.QualifiedName("Identification", model.di),
    )
    await _set_property(identification, model.di, "Manufacturer", ua.LocalizedText(MANUFACTURER))
    await _set_property(identification, model.di, "SerialNumber", scope)
    await _set_property(
        identification, model.di, "ProductInstanceUri", f"{application_uri}/{scope}"
    )

    job_management = await _add_in(
        item,
        server.get_node(model.job_management_type),
        ua.QualifiedName("JobManagement", model.jobs),
    )
    control = await job_management.get_child(ua.QualifiedName("JobOrderControl", model.jobs))
    results = await job_management.get_child(ua.QualifiedName("JobOrderResults", model.jobs))
    nodes = ScopeNodes(
        scope=scope,
        item=item,
        job_management=job_management,
        job_order_control=control,
        job_order_results=results,
        job_order_list=await control.get_child(ua.QualifiedName("JobOrderList", model.isa95)),
    )
    for name in RECEIVER_VARIABLES:
        nodes.receiver[name] = await control.get_child(ua.QualifiedName(name, model.isa95))
    receiver = server.get_node(model.job_order_receiver_type)
    for method in CONTROL_METHODS:
        declaration = await receiver.get_child(ua.QualifiedName(method.value, model.isa95))
        [node, *_] = await instantiate(
            control,
            declaration,
            nodeid=ua.NodeId(f"{control.nodeid.Identifier}.{method.value}", model.gateway),
            bname=ua.QualifiedName(method.value, model.isa95),
        )
        nodes.methods[node.nodeid] = method
        nodes.parents[node.nodeid] = control.nodeid
    for method in RESULTS_METHODS:
        node = await results.get_child(ua.QualifiedName(method.value, model.isa95))
        nodes.methods[node.nodeid] = method
        nodes.parents[node.nodeid] = results.nodeid
    return nodes


async def _add_in(parent: Node, object_type: Node, name: ua.QualifiedName) -> Node:
    """Instantiate ``object_type`` under ``parent`` as an add-in (HasAddIn, not HasComponent)."""
    nodeid = ua.NodeId(f"{parent.nodeid.Identifier}.{name.Name}", parent.nodeid.NamespaceIndex)
    [node, *_] = await instantiate(
        parent,
        object_type,
        nodeid=nodeid,
        bname=name,
        dname=ua.LocalizedText(name.Name),
        instantiate_optional=False,
    )
    await parent.add_reference(node, ua.ObjectIds.HasAddIn, forward=True, bidirectional=True)
    await parent.delete_reference(node, ua.ObjectIds.HasComponent, forward=True, bidirectional=True)
    return node


async def _set_property(node: Node, namespace: int, name: str, value: object) -> None:
    child = await node.get_child(ua.QualifiedName(name, namespace))
    data_type = await child.read_data_type_as_variant_type()
    await child.write_value(ua.Variant(value, data_type))
