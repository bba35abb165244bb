"""The plugin's run-time schema is the .proto's, and what it encodes a protoc decoder reads."""

from __future__ import annotations

from types import ModuleType

from google.protobuf import descriptor_pb2

from gateway_sparkplug.edge import EdgeNode
from gateway_sparkplug.payloads import Metric, Value, decode_commands, encode
from gateway_sparkplug.schema import FILE, DataType
from gateway_sparkplug.tags import text


def without_json_names(file: descriptor_pb2.FileDescriptorProto) -> None:
    def strip(message: descriptor_pb2.DescriptorProto) -> None:
        for entry in message.field:
            entry.ClearField("json_name")  # protoc fills it in, the run-time descriptor need not
        for nested in message.nested_type:
            strip(nested)

    for message in file.message_type:
        strip(message)


def test_the_run_time_descriptor_equals_the_proto_compiled_by_protoc(spb: ModuleType) -> None:
    compiled = descriptor_pb2.FileDescriptorSet.FromString(spb.DESCRIPTOR_SET).file[0]
    ours = descriptor_pb2.FileDescriptorProto()
    ours.CopyFrom(FILE)
    without_json_names(compiled)
    without_json_names(ours)
    assert ours == compiled


def test_values_go_to_the_member_their_type_calls_for(spb: ModuleType) -> None:
    metrics = [
        Metric(1, Value(DataType.INT32, -5), 1000, "a"),
        Metric(2, Value(DataType.DATETIME, 1_700_000_000_123), 1000, "b"),
        Metric(3, Value(DataType.BOOLEAN, True), 1000),
        Metric(4, text("Running"), 1000),
        Metric(5, Value(DataType.INT32, None), 1000),
    ]
    payload = spb.Payload.FromString(encode(metrics, timestamp=7, seq=255))
    assert (payload.timestamp, payload.seq) == (7, 255)
    a, b, c, d, e = payload.metrics
    assert (a.name, a.alias, a.datatype, a.int_value) == ("a", 1, 3, 2**32 - 5)
    assert (b.datatype, b.long_value) == (13, 1_700_000_000_123)
    assert not c.HasField("name")
    assert c.boolean_value is True
    assert d.string_value == "Running"
    assert e.is_null
    assert e.datatype == 3
    assert e.WhichOneof("value") is None


def test_the_ndeath_carries_bd_seq_and_no_seq(spb: ModuleType) -> None:
    death = spb.Payload.FromString(EdgeNode("g", "n", 42, lambda: 5).death().payload)
    assert not death.HasField("seq")
    [bd_seq] = death.metrics
    assert (bd_seq.name, bd_seq.datatype, bd_seq.long_value) == ("bdSeq", 4, 42)


def test_an_ncmd_from_a_protoc_encoder_is_read(spb: ModuleType) -> None:
    payload = spb.Payload(timestamp=1)
    payload.metrics.add(name="Node Control/Rebirth", datatype=11, boolean_value=True)
    [command] = decode_commands(payload.SerializeToString())
    assert (command.name, command.value) == ("Node Control/Rebirth", True)
