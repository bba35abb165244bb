"""The ISA-95 types in JSON: PascalCase out, either case in, strict types, and the JSON Schemas."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import ValidationError
from gateway.jobstates import JobState, TopState
from gateway_jobs import model
from gateway_jobs.breakpoints import BREAKPOINT_TYPE
from gateway_jobs.editing import EDIT_TYPE
from gateway_jobs.model import (
    EUInformation,
    JobOrder,
    JobOrderCall,
    JobResponse,
    WorkMaster,
    from_json,
    json_name,
    to_json,
)
from gateway_jobs.processor import CONFIG_TYPES, METHOD_TYPES, QUERY_TYPES
from gateway_jobs.states import job_state, state_filter, state_list

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas" / "jobs"


def test_json_names_follow_opc_ua() -> None:
    assert json_name("job_order_id") == "JobOrderID"
    assert json_name("id") == "ID"
    assert json_name("max_downloadable_job_orders") == "MaxDownloadableJobOrders"
    assert to_json(EUInformation(namespace_uri="u", unit_id=5)) == {
        "NamespaceUri": "u",
        "UnitId": 5,
    }


def test_snake_case_pascal_case_and_mixed_keys_load_alike() -> None:
    pascal = {"JobOrder": {"JobOrderID": "j", "WorkMasterID": [{"ID": "wm"}], "Priority": 2}}
    snake = {"job_order": {"job_order_id": "j", "work_master_id": [{"id": "wm"}], "priority": 2}}
    mixed = {"jobOrder": {"JobOrderId": "j", "work_master_ID": [{"Id": "wm"}], "PRIORITY": 2}}
    loaded = [from_json(data, JobOrderCall) for data in (pascal, snake, mixed)]
    assert loaded[0] == loaded[1] == loaded[2]
    assert to_json(loaded[1]) == pascal


def test_work_master_keeps_its_recipe() -> None:
    data = {"ID": "wm", "Data": {"steps": [{"name": "Init"}]}, "dataschema": "urn:x"}
    work_master = from_json(data, WorkMaster)
    assert work_master.data_schema == "urn:x"
    assert to_json(work_master) == {
        "ID": "wm",
        "Data": {"steps": [{"name": "Init"}]},
        "DataSchema": "urn:x",
    }


@pytest.mark.parametrize(
    ("job_order", "element", "reason"),
    [
        ("j1", "data.JobOrder", "expected an object, got a string"),
        ({"JobOrderID": 7}, "data.JobOrder.JobOrderID", "expected a string, got an integer"),
        ({"JobOrderID": "j", "Priority": "5"}, "data.JobOrder.Priority", "expected an integer"),
        ({"JobOrderID": "j", "Priority": True}, "data.JobOrder.Priority", "got a boolean"),
        ({"JobOrderID": "j", "Priority": 2**40}, "data.JobOrder", "32-bit"),
        ({"JobOrderID": "j", "WorkMasterID": "wm"}, "data.JobOrder.WorkMasterID", "array"),
        ({"JobOrderID": "j", "WorkMasterID": [{}]}, "data.JobOrder.WorkMasterID[0].ID", "missing"),
        ({"JobOrderID": "a/b"}, "data.JobOrder", "must not contain '/'"),
        ({"JobOrderID": ""}, "data.JobOrder", "1-256 characters"),
        ({"JobOrderID": "j", "Colour": "red"}, "data.JobOrder", "extra fields found (Colour)"),
        ({"JobOrderID": "j", "job_order_id": "k"}, "data.JobOrder", "given twice"),
        ({"JobOrderID": "j", "StartTime": "soon"}, "data.JobOrder", "date-time"),
        (
            {"JobOrderID": "j", "JobOrderParameters": [{"ID": "x", "Value": float("nan")}]},
            "data.JobOrder.JobOrderParameters[0].Value",
            "finite",
        ),
        (
            {"JobOrderID": "j", "JobOrderParameters": [{"ID": "x", "Value": b"\x00"}]},
            "data.JobOrder.JobOrderParameters[0].Value",
            "JSON value",
        ),
    ],
)
def test_wrong_payloads_name_the_field(job_order: Any, element: str, reason: str) -> None:
    with pytest.raises(ValidationError) as raised:
        from_json({"JobOrder": job_order}, JobOrderCall)
    assert raised.value.element == element
    assert reason in raised.value.reason


def test_a_payload_that_is_not_an_object_is_refused() -> None:
    wrong: list[Any] = [None, [], "x", 3]
    for data in wrong:
        with pytest.raises(ValidationError) as raised:
            from_json(data, JobOrderCall)
        assert raised.value.element == "data"


def test_fields_left_unset_are_left_out() -> None:
    assert to_json(JobResponse(job_response_id="j", job_order_id="j")) == {
        "JobResponseID": "j",
        "JobOrderID": "j",
    }
    assert to_json(JobOrder("j")) == {"JobOrderID": "j"}


def test_states_are_written_and_read_as_isa95_state_arrays() -> None:
    entries = to_json(state_list(JobState.HELD))
    assert entries[0] == {"StateText": {"Locale": "en", "Text": "Interrupted"}, "StateNumber": 4}
    assert entries[1]["StateNumber"] == 1
    assert [part["TargetName"] for part in entries[1]["BrowsePath"]["Elements"]] == [
        "InterruptedSubstates",
        "Held",
    ]
    assert job_state(state_list(JobState.HELD)) is JobState.HELD
    assert to_json(state_list(JobState.HELD)) == entries  # the wire text is the state path's
    by_number = from_json([{"StateNumber": 5}, {"StateNumber": 2}], list[model.State])
    assert job_state(by_number) is JobState.CLOSED
    with pytest.raises(ValueError, match="not a top-level state"):
        job_state(from_json([{"StateText": {"Text": "Sleeping"}}], list[model.State]))


def test_a_query_may_name_a_top_level_state_a_job_never_is_in_alone() -> None:
    interrupted = from_json([{"StateText": {"Text": "Interrupted"}}], list[model.State])
    assert state_filter(interrupted) is TopState.INTERRUPTED
    with pytest.raises(ValueError, match="needs its substate"):
        job_state(interrupted)
    running = from_json([{"StateNumber": 3}], list[model.State])
    assert state_filter(running) is JobState.RUNNING  # no substates: a job's whole state


# -- the JSON Schemas in schemas/jobs describe exactly these types ------------------------------

SCHEMA_MODELS: list[tuple[str, str, type[Any]]] = [
    ("isa95-types", "LocalizedText", model.LocalizedText),
    ("isa95-types", "EUInformation", model.EUInformation),
    ("isa95-types", "ISA95PropertyDataType", model.Property),
    ("isa95-types", "ISA95ParameterDataType", model.Parameter),
    ("isa95-types", "ISA95EquipmentDataType", model.Equipment),
    ("isa95-types", "ISA95MaterialDataType", model.Material),
    ("isa95-types", "ISA95PersonnelDataType", model.Personnel),
    ("isa95-types", "ISA95PhysicalAssetDataType", model.PhysicalAsset),
    ("isa95-types", "ISA95WorkMasterDataType", model.WorkMaster),
    ("isa95-types", "ISA95JobOrderDataType", model.JobOrder),
    ("isa95-types", "RelativePathElement", model.RelativePathElement),
    ("isa95-types", "RelativePath", model.RelativePath),
    ("isa95-types", "ISA95StateDataType", model.State),
    ("isa95-types", "ISA95JobOrderAndStateDataType", model.JobOrderAndState),
    ("isa95-types", "ISA95JobResponseDataType", model.JobResponse),
    ("methods", "JobOrderCall", model.JobOrderCall),
    ("methods", "JobOrderIDCall", model.JobOrderIDCall),
    ("methods", "MethodResponse", model.MethodReply),
    ("methods", "RequestJobResponseByJobOrderIDCall", model.JobResponseByIDCall),
    ("methods", "RequestJobResponseByJobOrderIDResponse", model.JobResponseReply),
    ("methods", "RequestJobResponseByJobOrderStateCall", model.JobResponseByStateCall),
    ("methods", "RequestJobResponseByJobOrderStateResponse", model.JobResponsesReply),
    ("events", "ISA95JobOrderStatusEventType", model.JobOrderStatusEvent),
    ("config", "jobacceptance", model.JobAcceptance),
    ("config", "online", model.Online),
]


def load_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return schema


@pytest.mark.parametrize(("file", "definition", "cls"), SCHEMA_MODELS)
def test_schema_lists_the_fields_of_the_model(file: str, definition: str, cls: type[Any]) -> None:
    schema = load_schema(file)["$defs"][definition]
    fields = dataclasses.fields(cls)
    names = {spec.metadata.get("json", json_name(spec.name)) for spec in fields}
    required = {
        spec.metadata.get("json", json_name(spec.name))
        for spec in fields
        if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
    }
    assert set(schema["properties"]) == names
    assert set(schema["required"]) == required
    assert schema["additionalProperties"] is False


def test_schemas_cover_every_cloudevent_type_the_processor_handles() -> None:
    def types_in(file: str) -> set[str]:
        return {
            event_type
            for definition in load_schema(file)["$defs"].values()
            for event_type in definition.get("x-cloudevent-types", [])
        }

    extensions = {BREAKPOINT_TYPE, EDIT_TYPE}  # the project's own job controls
    assert types_in("methods") == set(METHOD_TYPES) | set(QUERY_TYPES) | extensions
    assert types_in("config") == set(CONFIG_TYPES)


def test_every_schema_reference_resolves() -> None:
    schemas = {path.name: json.loads(path.read_text()) for path in SCHEMAS.glob("*.json")}

    def references(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [node["$ref"]] if "$ref" in node else []
            return found + [ref for value in node.values() for ref in references(value)]
        if isinstance(node, list):
            return [ref for value in node for ref in references(value)]
        return []

    def resolve(document: Any, pointer: str) -> Any:
        for part in pointer.split("/"):
            document = document[part.replace("~1", "/").replace("~0", "~")]
        return document

    for name, schema in schemas.items():
        for reference in references(schema):
            file, _, pointer = reference.partition("#/")
            try:
                resolve(schemas[file or name], pointer)
            except (KeyError, IndexError, TypeError):
                raise AssertionError(f"{name}: {reference} does not resolve") from None
