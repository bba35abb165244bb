"""The publisher's JSON Schemas describe its payloads; the AsyncAPI document every MES topic.

No JSON Schema or YAML library is a dependency, so this module carries two small readers that
cover what these files use: a validator for the JSON Schema keywords of the schemas, and a
loader for the block-style YAML subset the AsyncAPI document is written in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway_jobs.breakpoints import BREAKPOINT_TYPE
from gateway_jobs.editing import EDIT_TYPE
from gateway_jobs.events import METADATA_EVENT_TYPE, STATUS_EVENT_TYPE
from gateway_jobs.processor import CONFIG_TYPES, METHOD_TYPES, QUERY_TYPES
from gateway_jobs.queue import QueueEntry, QueueView
from gateway_jobs.queuefeed import QUEUE_EVENT_TYPE, queue_document
from gateway_publisher.index import IndexEntry, JobIndex
from gateway_publisher.topics import (
    JOB_ORDER_TYPE,
    JOB_RESPONSE_TYPE,
    STATE_INDEX_PAGE_TYPE,
    STATE_INDEX_TYPE,
)

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
RETAINED = SCHEMAS / "publisher" / "retained-topics.schema.json"
ASYNCAPI = SCHEMAS / "asyncapi.yaml"


# -- a JSON Schema validator for the keywords these schemas use -------------------------------


class Invalid(AssertionError):
    pass


def resolve(reference: str, base: Path) -> tuple[Any, Path]:
    file, _, pointer = reference.partition("#")
    path = (base.parent / file).resolve() if file else base
    node: Any = json.loads(path.read_text())
    for part in filter(None, pointer.split("/")):
        node = node[part]
    return node, path


def validate(value: Any, schema: Any, base: Path, at: str = "$") -> None:
    """Raise ``Invalid`` naming the first place where ``value`` breaks ``schema``."""
    if "$ref" in schema:
        target, path = resolve(schema["$ref"], base)
        validate(value, target, path, at)
    checks: dict[str, Callable[[Any, Any], bool]] = {
        "type": _type,
        "const": lambda v, c: v == c,
        "enum": lambda v, e: v in e,
        "pattern": lambda v, p: not isinstance(v, str) or re.search(p, v) is not None,
        "minimum": lambda v, m: not isinstance(v, int | float) or v >= m,
        "maximum": lambda v, m: not isinstance(v, int | float) or v <= m,
        "minItems": lambda v, m: not isinstance(v, list) or len(v) >= m,
        "maxItems": lambda v, m: not isinstance(v, list) or len(v) <= m,
        "required": lambda v, r: not isinstance(v, dict) or set(r) <= v.keys(),
    }
    for keyword, check in checks.items():
        if keyword in schema and not check(value, schema[keyword]):
            raise Invalid(f"{at}: fails {keyword} {schema[keyword]!r} with {value!r}"[:300])
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                validate(item, properties[name], base, f"{at}.{name}")
            elif schema.get("additionalProperties") is False:
                raise Invalid(f"{at}: unexpected property {name!r}")
    if isinstance(value, list) and "items" in schema:
        for number, item in enumerate(value):
            validate(item, schema["items"], base, f"{at}[{number}]")
    for number, option in enumerate(schema.get("allOf", [])):
        validate(value, option, base, f"{at}(allOf {number})")
    if "anyOf" in schema and not any(_valid(value, s, base) for s in schema["anyOf"]):
        raise Invalid(f"{at}: matches none of anyOf")
    if "oneOf" in schema and sum(_valid(value, s, base) for s in schema["oneOf"]) != 1:
        raise Invalid(f"{at}: does not match exactly one of oneOf")


def _valid(value: Any, schema: Any, base: Path) -> bool:
    try:
        validate(value, schema, base)
    except Invalid:
        return False
    return True


def _type(value: Any, expected: str | list[str]) -> bool:
    kinds = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "null": type(None),
        "number": int | float,
    }
    names = [expected] if isinstance(expected, str) else expected
    for name in names:
        if name == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if name in kinds and isinstance(value, kinds[name]):
            return name != "number" or not isinstance(value, bool)
    return False


def state_index_schema() -> Any:
    return json.loads(RETAINED.read_text())["$defs"]["StateIndex"]


def test_the_rendered_state_index_and_its_pages_follow_their_schemas() -> None:
    index = JobIndex()
    index.put(IndexEntry("JO-1", "Ended.Completed", has_result=True))
    index.put(IndexEntry("JO-2", "Running", priority=3))
    index.put(IndexEntry("JO-3", "Interrupted.Held"))
    payload = index.render(
        seq=12, epoch="9f2c51d07ab3e6f1", scope="cell1", published_at="2026-04-11T14:23:01Z"
    )
    document = json.loads(payload)
    validate(document, state_index_schema(), RETAINED)  # raises naming what does not fit
    assert (document["seq"], document["scope"]) == (12, "cell1")
    assert len(document["jobs"]) == 3
    paged = index.render_paged(
        seq=12, epoch="9f2c51d07ab3e6f1", scope="cell1", published_at="2026-04-11T14:23:01Z"
    )
    validate(json.loads(paged), state_index_schema(), RETAINED)
    page = index.render_page(0, seq=12, scope="cell1")
    assert page is not None
    page_document = json.loads(page)
    validate(page_document, definition("StateIndexPage"), RETAINED)
    assert sorted(job["job_order_id"] for job in page_document["jobs"]) == ["JO-1", "JO-2", "JO-3"]


def definition(name: str) -> Any:
    return json.loads(RETAINED.read_text())["$defs"][name]


@pytest.mark.parametrize(
    "change",
    [
        {"seq": 0},
        {"epoch": "restart-1"},
        {"pages": [{"page": -1, "jobs": 1, "seq": 1}], "jobs_total": 1},
        {"pages": [{"page": 0, "jobs": 0, "seq": 1}], "jobs_total": 0},
        {"pages": []},  # both shapes at once: jobs inline and pages
        {"jobs": [{"job_order_id": "a/b", "state": [], "has_result": False}]},
        {"extra": True},
    ],
)
def test_the_schema_refuses_what_the_publisher_never_sends(change: dict[str, Any]) -> None:
    valid = {
        "seq": 1,
        "epoch": "0123456789abcdef",
        "scope": "cell1",
        "published_at": "2026-04-11T14:23:01Z",
        "jobs_total": 0,
        "jobs": [],
    }
    validate(valid, state_index_schema(), RETAINED)
    with pytest.raises(Invalid):
        validate({**valid, **change}, state_index_schema(), RETAINED)


def test_the_designs_own_example_is_a_valid_state_index() -> None:
    """The MicroDCS document's example (plus our epoch) validates: the design's shape."""
    example = {
        "seq": 103,
        "epoch": "0123456789abcdef",
        "scope": "machine-42",
        "published_at": "2026-04-11T14:23:01Z",
        "jobs": [
            {
                "job_order_id": "JO-2026-0443",
                "state": [
                    {"state_text": {"text": "Running", "locale": "en"}, "state_number": 3},
                ],
                "has_result": False,
            }
        ],
    }
    validate(example, state_index_schema(), RETAINED)


@pytest.mark.parametrize(
    "jobs",
    [
        [{"job_order_id": "a/b", "state": [], "has_result": False}],
        [{"job_order_id": "j", "state": [{"state_number": 3}], "has_result": False}],
        [],
    ],
)
def test_the_page_schema_refuses_what_the_publisher_never_sends(jobs: list[Any]) -> None:
    with pytest.raises(Invalid):
        validate(
            {"seq": 1, "scope": "s", "page": 0, "jobs": jobs},
            definition("StateIndexPage"),
            RETAINED,
        )


def test_the_retained_queue_follows_its_schema() -> None:
    view = QueueView(
        online=False,
        reason="maintenance",
        capacity=1,
        admitted={"J7": ("positioner", "tightener")},
        waiting=[QueueEntry("J9", 5, 1_800_000_000.0, ("positioner",), 3, 1)],
    )
    document = queue_document("cell1", view, 100) | {"UpdatedAt": "2026-11-26T09:59:58.125Z"}
    schema = {"$ref": "events.schema.json#/$defs/Queue"}
    validate(document, schema, SCHEMAS / "jobs" / "events.schema.json")
    assert document["Waiting"][0]["StartTime"] == "2027-01-15T08:00:00Z"
    with pytest.raises(Invalid):
        validate(document | {"Extra": 1}, schema, SCHEMAS / "jobs" / "events.schema.json")


def test_order_and_result_topics_use_the_job_types() -> None:
    definitions = json.loads(RETAINED.read_text())["$defs"]
    for name, event_type in (
        ("StateIndex", STATE_INDEX_TYPE),
        ("StateIndexPage", STATE_INDEX_PAGE_TYPE),
        ("JobOrder", JOB_ORDER_TYPE),
        ("JobResponse", JOB_RESPONSE_TYPE),
    ):
        assert definitions[name]["x-cloudevent-types"] == [event_type]
        if "$ref" in definitions[name]:
            target, _ = resolve(definitions[name]["$ref"], RETAINED)
            assert target["type"] == "object"


# -- a loader for the block-style YAML subset of the AsyncAPI document ------------------------


def load_yaml(text: str) -> Any:
    """Block mappings and sequences, quoted and plain scalars, ``>-`` / ``|`` block scalars."""
    lines = [
        (len(line) - len(line.lstrip(" ")), line.strip())
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    value, end = _block(lines, 0, lines[0][0])
    assert end == len(lines), f"unparsed from line {end}: {lines[end]}"
    return value


def _block(lines: list[tuple[int, str]], start: int, indent: int) -> tuple[Any, int]:
    if lines[start][1].startswith("- "):
        return _sequence(lines, start, indent)
    return _mapping(lines, start, indent)


def _sequence(lines: list[tuple[int, str]], start: int, indent: int) -> tuple[Any, int]:
    items: list[Any] = []
    position = start
    while position < len(lines) and lines[position][0] == indent:
        text = lines[position][1]
        if not text.startswith("- "):
            break
        # "- key: value" starts a mapping whose keys sit two columns further in.
        lines[position] = (indent + 2, text[2:])
        if _is_key(text[2:]):
            item, position = _mapping(lines, position, indent + 2)
        else:
            item, position = _scalar(text[2:]), position + 1
        items.append(item)
    return items, position


def _mapping(lines: list[tuple[int, str]], start: int, indent: int) -> tuple[Any, int]:
    mapping: dict[str, Any] = {}
    position = start
    while position < len(lines) and lines[position][0] == indent:
        key, _, rest = lines[position][1].partition(":")
        key, rest = _scalar(key), rest.strip()
        position += 1
        if rest in (">-", ">", "|", "|-"):
            folded: list[str] = []
            while position < len(lines) and lines[position][0] > indent:
                folded.append(lines[position][1])
                position += 1
            mapping[key] = " ".join(folded)
        elif rest:
            mapping[key] = _scalar(rest)
        elif position < len(lines) and lines[position][0] > indent:
            mapping[key], position = _block(lines, position, lines[position][0])
        else:
            mapping[key] = None
    return mapping, position


def _is_key(text: str) -> bool:
    return re.match(r"^('[^']*'|\"[^\"]*\"|[^'\"\s][^:]*):(\s|$)", text) is not None


def _scalar(text: str) -> Any:
    if text[:1] in ("'", '"'):
        return text[1:-1]
    if text == "null":
        return None
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


@pytest.fixture(scope="module")
def asyncapi() -> Any:
    return load_yaml(ASYNCAPI.read_text())


def test_every_topic_of_the_mes_interface_is_a_channel(asyncapi: Any) -> None:
    assert asyncapi["asyncapi"] == "3.0.0"
    addresses = {channel["address"] for channel in asyncapi["channels"].values()}
    assert addresses == {
        "{prefix}/{scope}/commands",
        None,  # replies: the command's Response Topic
        "{prefix}/{scope}/events",
        "{prefix}/metadata",
        "{prefix}/{scope}/queue",
        "{prefix}/{scope}/state-index",
        "{prefix}/{scope}/index/{page}",
        "{prefix}/{scope}/order/{jobOrderId}",
        "{prefix}/{scope}/result/{jobOrderId}",
    }


def test_every_cloudevent_type_of_the_code_is_described(asyncapi: Any) -> None:
    described: set[str] = set()
    for message in asyncapi["components"]["messages"].values():
        for part in message["headers"].get("allOf", []):
            event_type = part.get("properties", {}).get("type", {})
            described |= set(event_type.get("enum", [])) | {event_type.get("const")}
    described.discard(None)
    expected = {*METHOD_TYPES, *QUERY_TYPES, *CONFIG_TYPES, STATUS_EVENT_TYPE}
    expected |= {METADATA_EVENT_TYPE, STATE_INDEX_TYPE, JOB_ORDER_TYPE, JOB_RESPONSE_TYPE}
    expected |= {STATE_INDEX_PAGE_TYPE, QUEUE_EVENT_TYPE, BREAKPOINT_TYPE, EDIT_TYPE}
    assert described == expected


def test_every_reference_resolves(asyncapi: Any) -> None:
    def references(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [node["$ref"]] if "$ref" in node else []
            return found + [ref for value in node.values() for ref in references(value)]
        if isinstance(node, list):
            return [ref for value in node for ref in references(value)]
        return []

    found = references(asyncapi)
    assert len(found) > 50
    for reference in found:
        if reference.startswith("#/"):
            node = asyncapi
            for part in reference[2:].split("/"):
                assert part in node, reference
                node = node[part]
        else:
            resolve(reference, ASYNCAPI)  # a payload schema file and its $defs entry


def test_operations_use_their_channels_messages_and_the_publisher_qos(asyncapi: Any) -> None:
    channels = asyncapi["channels"]
    for name, operation in asyncapi["operations"].items():
        channel = operation["channel"]["$ref"].rsplit("/", 1)[-1]
        for message in operation["messages"]:
            assert message["$ref"].startswith(f"#/channels/{channel}/messages/"), name
        assert operation["bindings"]["mqtt"]["qos"] == 1, name
    for name in ("sendStateIndex", "sendJobOrders", "sendJobResults"):
        binding = asyncapi["operations"][name]["bindings"]["mqtt"]
        assert binding["retain"] is True
        assert binding["messageExpiryInterval"] == 172_800
    assert set(channels["order"]["messages"]) == {"jobOrder", "deleted"}
