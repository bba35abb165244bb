"""The Sparkplug B payload schema (``sparkplug_b.proto``), built at run time with ``protobuf``.

Why not generated code: protoc is not a Python package (grpcio-tools would be a build-time
dependency of every install), and the ``_pb2`` modules it writes check the protobuf runtime
against the version that generated them, so committed generated code breaks with the next
major protobuf. A descriptor built here with ``descriptor_pb2`` needs neither; the message
classes come from protobuf's own message factory (the C implementation when installed).

``sparkplug_b.proto`` beside this module stays the interface definition people read; the tests
compile it with protoc and check that its descriptor equals ``FILE`` field for field.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "org.eclipse.tahu.protobuf"
FILE_NAME = "sparkplug_b.proto"
_MAX = 536_870_912  # ``to max`` in an extension range: the highest field number + 1

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "float": _F.TYPE_FLOAT,
    "double": _F.TYPE_DOUBLE,
    "bool": _F.TYPE_BOOL,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}


class DataType(IntEnum):
    """The specification's data types (``Metric.datatype``), those the gateway uses first."""

    UNKNOWN = 0
    INT8 = 1
    INT16 = 2
    INT32 = 3
    INT64 = 4
    UINT8 = 5
    UINT16 = 6
    UINT32 = 7
    UINT64 = 8
    FLOAT = 9
    DOUBLE = 10
    BOOLEAN = 11
    STRING = 12
    DATETIME = 13
    TEXT = 14
    UUID = 15
    DATASET = 16
    BYTES = 17
    FILE = 18
    TEMPLATE = 19
    PROPERTYSET = 20
    PROPERTYSETLIST = 21
    INT8_ARRAY = 22
    INT16_ARRAY = 23
    INT32_ARRAY = 24
    INT64_ARRAY = 25
    UINT8_ARRAY = 26
    UINT16_ARRAY = 27
    UINT32_ARRAY = 28
    UINT64_ARRAY = 29
    FLOAT_ARRAY = 30
    DOUBLE_ARRAY = 31
    BOOLEAN_ARRAY = 32
    STRING_ARRAY = 33
    DATETIME_ARRAY = 34


# The .proto's names of DataType's values (they are not Python identifiers' style).
_DATA_TYPE_NAMES = [
    "Unknown",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "UInt8",
    "UInt16",
    "UInt32",
    "UInt64",
    "Float",
    "Double",
    "Boolean",
    "String",
    "DateTime",
    "Text",
    "UUID",
    "DataSet",
    "Bytes",
    "File",
    "Template",
    "PropertySet",
    "PropertySetList",
    "Int8Array",
    "Int16Array",
    "Int32Array",
    "Int64Array",
    "UInt8Array",
    "UInt16Array",
    "UInt32Array",
    "UInt64Array",
    "FloatArray",
    "DoubleArray",
    "BooleanArray",
    "StringArray",
    "DateTimeArray",
]


def _message(
    name: str,
    fields: str,
    *,
    nested: tuple[descriptor_pb2.DescriptorProto, ...] = (),
    extensions_from: int | None = None,
) -> descriptor_pb2.DescriptorProto:
    """A message from ``fields``: one ``label type name number`` per line, where label is
    ``optional``, ``repeated`` or ``oneof`` (a member of the message's one oneof, ``value``) and
    a type that is no scalar is a message type path under ``Payload``."""
    message = descriptor_pb2.DescriptorProto(name=name)
    for line in fields.strip().splitlines():
        label, kind, field_name, number = line.split()
        field = message.field.add(name=field_name, number=int(number))
        field.label = _F.LABEL_REPEATED if label == "repeated" else _F.LABEL_OPTIONAL
        if kind in _SCALARS:
            field.type = _SCALARS[kind]
        else:
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{PACKAGE}.Payload.{kind}"
        if label == "oneof":
            if not message.oneof_decl:
                message.oneof_decl.add(name="value")
            field.oneof_index = 0
    message.nested_type.extend(nested)
    if extensions_from is not None:
        message.extension_range.add(start=extensions_from, end=_MAX)
    return message


def _extension(name: str) -> descriptor_pb2.DescriptorProto:
    return _message(name, "", extensions_from=1)


def _values(first: int, path: str, extension: str, *extra: str) -> str:
    """The ``value`` oneof's scalar members numbered from ``first``, then ``extra`` members,
    then ``extension_value`` (of type ``path.extension``)."""
    scalars = (
        "uint32 int_value",
        "uint64 long_value",
        "float float_value",
        "double double_value",
        "bool boolean_value",
        "string string_value",
    )
    lines = [f"oneof {member} {first + i}" for i, member in enumerate(scalars + extra)]
    lines.append(f"oneof {path}.{extension} extension_value {first + len(scalars + extra)}")
    return "\n".join(lines)


def build_file() -> descriptor_pb2.FileDescriptorProto:
    """``sparkplug_b.proto`` as a descriptor."""
    parameter = _message(
        "Parameter",
        "optional string name 1\noptional uint32 type 2\n"
        + _values(3, "Template.Parameter", "ParameterValueExtension"),
        nested=(_extension("ParameterValueExtension"),),
    )
    template = _message(
        "Template",
        """
        optional string version 1
        repeated Metric metrics 2
        repeated Template.Parameter parameters 3
        optional string template_ref 4
        optional bool is_definition 5
        """,
        nested=(parameter,),
        extensions_from=6,
    )
    dataset_value = _message(
        "DataSetValue",
        _values(1, "DataSet.DataSetValue", "DataSetValueExtension"),
        nested=(_extension("DataSetValueExtension"),),
    )
    row = _message("Row", "repeated DataSet.DataSetValue elements 1", extensions_from=2)
    dataset = _message(
        "DataSet",
        """
        optional uint64 num_of_columns 1
        repeated string columns 2
        repeated uint32 types 3
        repeated DataSet.Row rows 4
        """,
        nested=(dataset_value, row),
        extensions_from=5,
    )
    property_value = _message(
        "PropertyValue",
        "optional uint32 type 1\noptional bool is_null 2\n"
        + _values(
            3,
            "PropertyValue",
            "PropertyValueExtension",
            "PropertySet propertyset_value",
            "PropertySetList propertysets_value",
        ),
        nested=(_extension("PropertyValueExtension"),),
    )
    property_set = _message(
        "PropertySet",
        "repeated string keys 1\nrepeated PropertyValue values 2",
        extensions_from=3,
    )
    property_set_list = _message(
        "PropertySetList", "repeated PropertySet propertyset 1", extensions_from=2
    )
    metadata = _message(
        "MetaData",
        """
        optional bool is_multi_part 1
        optional string content_type 2
        optional uint64 size 3
        optional uint64 seq 4
        optional string file_name 5
        optional string file_type 6
        optional string md5 7
        optional string description 8
        """,
        extensions_from=9,
    )
    metric = _message(
        "Metric",
        """
        optional string name 1
        optional uint64 alias 2
        optional uint64 timestamp 3
        optional uint32 datatype 4
        optional bool is_historical 5
        optional bool is_transient 6
        optional bool is_null 7
        optional MetaData metadata 8
        optional PropertySet properties 9
        """
        + _values(
            10,
            "Metric",
            "MetricValueExtension",
            "bytes bytes_value",
            "DataSet dataset_value",
            "Template template_value",
        ),
        nested=(_extension("MetricValueExtension"),),
    )
    payload = _message(
        "Payload",
        """
        optional uint64 timestamp 1
        repeated Metric metrics 2
        optional uint64 seq 3
        optional string uuid 4
        optional bytes body 5
        """,
        nested=(
            template,
            dataset,
            property_value,
            property_set,
            property_set_list,
            metadata,
            metric,
        ),
        extensions_from=6,
    )
    # No ``syntax``: proto2 is the default, and protoc leaves it out for proto2 files.
    file = descriptor_pb2.FileDescriptorProto(
        name=FILE_NAME, package=PACKAGE, message_type=[payload]
    )
    file.options.java_package = PACKAGE
    file.options.java_outer_classname = "SparkplugBProto"
    data_type = file.enum_type.add(name="DataType")
    for number, name in enumerate(_DATA_TYPE_NAMES):
        data_type.value.add(name=name, number=number)
    return file


FILE = build_file()
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(FILE)
# Message classes are dynamic: typed ``Any`` (their fields are attributes protobuf makes).
Payload: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.Payload"))

assert [member.value for member in DataType] == list(range(len(_DATA_TYPE_NAMES)))
