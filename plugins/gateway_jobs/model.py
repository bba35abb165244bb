"""The ISA-95 job control data types (OPC 40001-3, ISA95-JOBCONTROL v2) and their JSON form.

JSON field names are OPC UA's PascalCase (``JobOrderID``, ``WorkMasterID``, ``StateText``), and
that is what the gateway writes. On input a key is matched to its field ignoring case and
underscores, per type, so ``JobOrderID``, ``jobOrderId`` and ``job_order_id`` all name the same
field (OPC's ``ID`` suffix is just ``id`` to that rule). Types are checked strictly: no ``"5"``
for an integer, no string where a list belongs, no key the type does not have. ``from_json``
raises ``ValidationError`` naming the offending field by its JSON path.

The Work Master carries the recipe: ``Data`` (any JSON) and ``DataSchema`` (the URI that picks
the recipe interpreter), the extension MicroDCS made to ``ISA95WorkMasterDataType``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from typing import Any, TypeVar, get_origin

import cattrs
import cattrs.v
from cattrs.cols import is_sequence, list_structure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from gateway.errors import ValidationError

T = TypeVar("T")


class ReturnStatus(IntEnum):
    """The ``ReturnStatus`` (UInt64) of every method, as ISA95-JOBCONTROL v2 Annex B.2 defines it.

    A bit mask: bit 0 set means success. MicroDCS and MES clients written for it use exactly
    these values, so they are kept (OPC UA ``StatusCode`` values would read as failures there).
    """

    NO_ERROR = 1 << 0
    UNKNOWN_JOB_ORDER_ID = 1 << 1
    INVALID_JOB_ORDER_STATUS = 1 << 3  # the method is not allowed in the job's current state
    UNABLE_TO_ACCEPT_JOB_ORDER = 1 << 4  # acceptance check failed, duplicate id, station full
    INVALID_REQUEST = 1 << 32  # a configuration the station cannot take (e.g. a bad recipe)


@dataclass(frozen=True)
class Outcome:
    """What a job method or configuration event answers: its status and, on failure, why.

    ``message`` starts with the name of the check that failed (``equipment: ...``,
    ``duplicate: ...``, ``invalid-state: ...``); it travels in the reply's ``errormessage``.
    """

    status: ReturnStatus
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is ReturnStatus.NO_ERROR


def json_name(name: str) -> str:
    """``job_order_id`` -> ``JobOrderID`` (OPC UA spells the ``ID`` suffix in capitals)."""
    return "".join("ID" if part == "id" else part.capitalize() for part in name.split("_"))


def _renamed(json: str) -> dict[str, str]:
    """Field metadata for the few OPC names that do not follow ``json_name`` (``UnitId``)."""
    return {"json": json}


# -- the ISA-95 types --------------------------------------------------------------------------


@dataclass
class LocalizedText:
    locale: str | None = None
    text: str | None = None


@dataclass
class EUInformation:
    """An engineering unit (OPC UA ``EUInformation``)."""

    namespace_uri: str | None = field(default=None, metadata=_renamed("NamespaceUri"))
    unit_id: int | None = field(default=None, metadata=_renamed("UnitId"))
    display_name: LocalizedText | None = None
    description: LocalizedText | None = None


@dataclass
class Property:
    """``ISA95PropertyDataType``: a property of a resource."""

    id: str
    value: Any = None
    description: list[LocalizedText] | None = None
    engineering_units: EUInformation | None = None
    subproperties: list[Property] | None = None


@dataclass
class Parameter:
    """``ISA95ParameterDataType``: a named value (job order parameters, job response data)."""

    id: str
    value: Any = None
    description: list[LocalizedText] | None = None
    engineering_units: EUInformation | None = None
    subparameters: list[Parameter] | None = None


@dataclass
class Equipment:
    """``ISA95EquipmentDataType``: an equipment (class) requirement or actual."""

    id: str
    description: list[LocalizedText] | None = None
    equipment_use: str | None = None
    quantity: str | None = None
    engineering_units: EUInformation | None = None
    properties: list[Property] | None = None


@dataclass
class Material:
    """``ISA95MaterialDataType``: a material requirement or actual."""

    material_class_id: str | None = None
    material_definition_id: str | None = None
    material_lot_id: str | None = None
    material_sublot_id: str | None = None
    description: list[LocalizedText] | None = None
    material_use: str | None = None
    quantity: str | None = None
    engineering_units: EUInformation | None = None
    properties: list[Property] | None = None


@dataclass
class Personnel:
    """``ISA95PersonnelDataType``: a personnel (class) or person requirement or actual."""

    id: str
    description: list[LocalizedText] | None = None
    personnel_use: str | None = None
    quantity: str | None = None
    engineering_units: EUInformation | None = None
    properties: list[Property] | None = None


@dataclass
class PhysicalAsset:
    """``ISA95PhysicalAssetDataType``: a physical asset (class) requirement or actual."""

    id: str
    description: list[LocalizedText] | None = None
    physical_asset_use: str | None = None
    quantity: str | None = None
    engineering_units: EUInformation | None = None
    properties: list[Property] | None = None


@dataclass
class WorkMaster:
    """``ISA95WorkMasterDataType`` plus the recipe: ``Data`` in the format ``DataSchema`` names.

    A job order's ``WorkMasterID`` entries only reference Work Masters by ``ID``; the recipe that
    runs is the one the MES configured for the scope (``config.workmaster``).
    """

    id: str
    description: LocalizedText | None = None
    parameters: list[Parameter] | None = None
    data: Any = None
    data_schema: str | None = None


@dataclass
class JobOrder:
    """``ISA95JobOrderDataType``: what to make, with which Work Master and resources."""

    job_order_id: str
    description: list[LocalizedText] | None = None
    work_master_id: list[WorkMaster] | None = None
    start_time: str | None = None
    end_time: str | None = None
    priority: int | None = None  # higher numbers first
    job_order_parameters: list[Parameter] | None = None
    personnel_requirements: list[Personnel] | None = None
    equipment_requirements: list[Equipment] | None = None
    physical_asset_requirements: list[PhysicalAsset] | None = None
    material_requirements: list[Material] | None = None

    def __post_init__(self) -> None:
        _check_job_order_id(self.job_order_id)
        _check_timestamp(self.start_time)
        _check_timestamp(self.end_time)
        if self.priority is not None and not -(2**31) <= self.priority < 2**31:
            raise ValueError("Priority must fit a signed 32-bit integer")


@dataclass
class RelativePathElement:
    reference_type_id: str | None = field(default=None, metadata=_renamed("ReferenceTypeId"))
    is_inverse: bool | None = None
    include_subtypes: bool | None = None
    target_name: str | None = None


@dataclass
class RelativePath:
    elements: list[RelativePathElement] | None = None


@dataclass
class State:
    """``ISA95StateDataType``: one level of a job's state (the top level has no browse path)."""

    browse_path: RelativePath | None = None
    state_text: LocalizedText | None = None
    state_number: int | None = None


@dataclass
class JobOrderAndState:
    """``ISA95JobOrderAndStateDataType``."""

    job_order: JobOrder
    state: list[State]


@dataclass
class JobResponse:
    """``ISA95JobResponseDataType``: the report on a job's execution (results are data)."""

    job_response_id: str
    job_order_id: str
    description: LocalizedText | None = None
    start_time: str | None = None
    end_time: str | None = None
    job_state: list[State] | None = None
    job_response_data: list[Parameter] | None = None
    personnel_actuals: list[Personnel] | None = None
    equipment_actuals: list[Equipment] | None = None
    physical_asset_actuals: list[PhysicalAsset] | None = None
    material_actuals: list[Material] | None = None


@dataclass
class JobOrderStatusEvent:
    """``ISA95JobOrderStatusEventType``: sent on every transition."""

    job_order: JobOrder
    job_state: list[State]
    job_response: JobResponse | None = None


# -- method calls and replies (OPC UA input / output arguments) ---------------------------------


@dataclass
class JobOrderCall:
    """Input of Store, StoreAndStart and Update."""

    job_order: JobOrder
    comment: list[LocalizedText] | None = None


@dataclass
class JobOrderIDCall:
    """Input of Start, RevokeStart, Pause, Resume, Stop, Abort, Cancel and Clear."""

    job_order_id: str
    comment: list[LocalizedText] | None = None

    def __post_init__(self) -> None:
        _check_job_order_id(self.job_order_id)


@dataclass
class JobResponseByIDCall:
    """Input of RequestJobResponseByJobOrderID."""

    job_order_id: str


@dataclass
class JobResponseByStateCall:
    """Input of RequestJobResponseByJobOrderState: the top-level state, then any substates."""

    job_order_state: list[State]


@dataclass
class MethodReply:
    """Output of every job method and configuration event."""

    return_status: int


@dataclass
class JobResponseReply:
    """Output of RequestJobResponseByJobOrderID."""

    return_status: int
    job_response: JobResponse | None = None


@dataclass
class JobResponsesReply:
    """Output of RequestJobResponseByJobOrderState."""

    return_status: int
    job_responses: list[JobResponse]  # always written, empty or not


@dataclass
class JobAcceptance:
    """Payload of ``config.jobacceptance``: the scope's limits and the Work Master a job order
    naming none runs (each left out: the ``[jobs]`` setting). MaxDownloadableJobOrders: jobs it
    may hold (65535: no limit); MaxRunningJobOrders: jobs it runs at once (0: no limit)."""

    max_downloadable_job_orders: int | None = None
    default_work_master_id: str | None = None
    max_running_job_orders: int | None = None

    def __post_init__(self) -> None:
        if self.default_work_master_id == "":
            raise ValueError("DefaultWorkMasterID must not be empty (leave it out instead)")
        for name, value in (
            ("MaxDownloadableJobOrders", self.max_downloadable_job_orders),
            ("MaxRunningJobOrders", self.max_running_job_orders),
        ):
            if value is not None and not 0 <= value <= 0xFFFF:
                raise ValueError(f"{name} must be 0..65535 (a UInt16)")


@dataclass
class Online:
    """Payload of ``config.online``: whether queued jobs of the scope may start, and why not."""

    online: bool
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.reason is not None and len(self.reason) > 1000:
            raise ValueError("Reason must be at most 1000 characters")


# -- checks used by the types above ------------------------------------------------------------

_TOPIC_CHARACTERS = frozenset("/+#\x00")


def _check_job_order_id(value: str) -> None:
    """Job order ids name MQTT topics (``order/{id}``), so they must be one topic level."""
    if not value or len(value) > 256:
        raise ValueError("JobOrderID must be 1-256 characters")
    if _TOPIC_CHARACTERS & set(value):
        raise ValueError("JobOrderID must not contain '/', '+', '#' or NUL (it names topics)")


def _check_timestamp(value: str | None) -> None:
    if value is None:
        return
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not an ISO 8601 / RFC 3339 date-time") from None


# -- the JSON converter ------------------------------------------------------------------------

_MODEL_TYPES = frozenset(
    value
    for value in list(globals().values())
    if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == __name__
)


def _field_json_name(spec: dataclasses.Field[Any]) -> str:
    name = spec.metadata.get("json")
    return name if isinstance(name, str) else json_name(spec.name)


def _canonical(key: str) -> str:
    return key.replace("_", "").lower()


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    names |= {int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _strict(kind: type[Any] | tuple[type[Any], ...], expected: str) -> Callable[[Any, Any], Any]:
    """A scalar hook that takes only values already of ``kind`` (booleans are not numbers)."""

    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise ValueError(f"expected {expected}, got a boolean")
        if not isinstance(value, kind):
            raise ValueError(f"expected {expected}, got {_kind(value)}")
        return value

    return structure


def _json_value(value: Any, _: Any = None) -> Any:
    """Free-form values (``Value``, ``Data``) must be storable as JSON: no bytes, no NaN."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("numbers must be finite (JSON has no NaN or infinity)")
        return value
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise ValueError("object keys must be strings")
        return {key: _json_value(item) for key, item in value.items()}
    raise ValueError(f"expected a JSON value, got {type(value).__name__}")


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(detailed_validation=True)
    converter.register_structure_hook(str, _strict(str, "a string"))
    converter.register_structure_hook(int, _strict(int, "an integer"))
    converter.register_structure_hook(bool, _strict(bool, "true or false"))
    converter.register_structure_hook_func(lambda kind: kind is Any, _json_value)

    converter.register_structure_hook_factory(_is_list, _list_structure_factory)
    converter.register_structure_hook_factory(_is_model, _model_structure_factory)
    converter.register_unstructure_hook_factory(_is_model, _model_unstructure_factory)
    return converter


def _is_list(kind: Any) -> bool:
    return get_origin(kind) is list or (is_sequence(kind) and kind is not str)


def _is_model(kind: Any) -> bool:
    return kind in _MODEL_TYPES


def _list_structure_factory(kind: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """cattrs takes any iterable as a list (a string as a list of letters); we take arrays."""
    base = list_structure_factory(kind, converter)

    def structure(value: Any, cls: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"expected an array, got {_kind(value)}")
        return base(value, cls)

    return structure


def _renames(cls: Any) -> dict[str, Any]:
    """cattrs overrides giving every field of ``cls`` its JSON (PascalCase) name."""
    return {spec.name: override(rename=_field_json_name(spec)) for spec in dataclasses.fields(cls)}


def _model_structure_factory(cls: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    specs = dataclasses.fields(cls)
    names = {_canonical(_field_json_name(spec)): _field_json_name(spec) for spec in specs}
    base = make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **_renames(cls))

    def structure(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError(f"expected an object, got {_kind(value)}")
        renamed: dict[Any, Any] = {}
        for key, item in value.items():
            name = names.get(_canonical(key), key) if isinstance(key, str) else key
            if name in renamed:
                raise ValueError(f"{name} is given twice (as {key!r} too)")
            renamed[name] = item
        return base(renamed, cls)

    return structure


def _model_unstructure_factory(cls: Any, converter: cattrs.Converter) -> Callable[[Any], Any]:
    """PascalCase keys; fields left at their default (``None``) are omitted, as OPC JSON does."""
    return make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True, **_renames(cls))


CONVERTER = _make_converter()


def from_json(data: Any, cls: type[T], *, element: str = "data") -> T:
    """Structure decoded JSON (or msgpack) into ``cls``; ``ValidationError`` names the field."""
    try:
        return CONVERTER.structure(data, cls)
    except cattrs.BaseValidationError as error:
        problems = cattrs.transform_error(error, path=element, format_exception=_describe)
        first, *others = (_split_problem(text, element) for text in problems)
        reason = "; ".join([first[1], *(f"{path}: {what}" for path, what in others)])
        raise ValidationError(first[0], reason[:1000]) from None
    except ValueError as error:  # raised by a hook on the top-level value itself
        raise ValidationError(element, str(error)) from None


def _describe(error: BaseException, kind: type | None) -> str:
    """Our hooks and checks explain themselves; cattrs' generic text is the fallback."""
    if type(error) is ValueError and error.args and isinstance(error.args[0], str):
        return error.args[0]
    return cattrs.v.format_exception(error, kind)


_JSON_NAMES = {
    spec.name: _field_json_name(spec)
    for model in _MODEL_TYPES
    for spec in dataclasses.fields(model)
}
_PATH_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _split_problem(text: str, element: str) -> tuple[str, str]:
    """cattrs says ``"<what> @ <path>"`` with Python names; the path is given in JSON names."""
    what, separator, path = text.rpartition(" @ ")
    if not separator:
        return element, text
    head, rest = path[: len(element)], path[len(element) :]
    return head + _PATH_PART.sub(lambda part: _JSON_NAMES.get(part[0], part[0]), rest), what


def to_json(value: Any) -> Any:
    """The JSON form (PascalCase) of a model value."""
    return CONVERTER.unstructure(value)
