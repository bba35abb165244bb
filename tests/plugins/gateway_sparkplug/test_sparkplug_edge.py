"""The session rules, without a broker: seq, aliases, report by exception, device deaths."""

from __future__ import annotations

from types import ModuleType

from gateway_sparkplug.edge import Device, EdgeNode
from gateway_sparkplug.schema import Payload
from gateway_sparkplug.tags import boolean, integer, text
from gateway_sparkplug.topics import MessageType


def decoded(payload: bytes) -> object:
    message = Payload()
    message.ParseFromString(payload)
    return message


def test_births_name_and_alias_every_metric_and_data_carries_only_changes(
    spb: ModuleType,
) -> None:
    edge = EdgeNode("line1", "cell1", 3, lambda: 1000)
    node = {"Scope/Online": boolean(True)}
    devices = {"Jobs": Device({"Running/1/State": text(None), "Queue/WaitingCount": integer(0)})}
    births = edge.birth(node, devices)
    assert [(m.kind, m.topic) for m in births] == [
        (MessageType.NBIRTH, "spBv1.0/line1/NBIRTH/cell1"),
        (MessageType.DBIRTH, "spBv1.0/line1/DBIRTH/cell1/Jobs"),
    ]
    nbirth = spb.Payload.FromString(births[0].payload)
    assert nbirth.seq == 0
    assert [m.name for m in nbirth.metrics] == ["bdSeq", "Node Control/Rebirth", "Scope/Online"]
    assert nbirth.metrics[0].long_value == 3
    dbirth = spb.Payload.FromString(births[1].payload)
    aliases = {m.name: m.alias for m in dbirth.metrics}
    assert len(set(aliases.values()) | {m.alias for m in nbirth.metrics[1:]}) == 4  # unique
    changed = {"Running/1/State": text("Running"), "Queue/WaitingCount": integer(0)}
    [ddata] = edge.update(node, {"Jobs": Device(changed)})
    data = spb.Payload.FromString(ddata.payload)
    assert ddata.kind is MessageType.DDATA
    assert data.seq == 2
    [metric] = data.metrics
    assert not metric.HasField("name")
    assert (metric.alias, metric.string_value) == (aliases["Running/1/State"], "Running")
    assert edge.update(node, {"Jobs": Device(changed)}) == []  # nothing changed, nothing sent


def test_seq_wraps_at_256_and_a_rebirth_starts_again_at_0() -> None:
    edge = EdgeNode("g", "n", 0, lambda: 1)
    edge.birth({"x": integer(0)}, {})
    for value in range(1, 300):
        [message] = edge.update({"x": integer(value)}, {})
        assert decoded(message.payload).seq == value % 256  # type: ignore[attr-defined]
    [nbirth] = edge.birth({"x": integer(0)}, {})
    assert decoded(nbirth.payload).seq == 0  # type: ignore[attr-defined]


def test_a_device_that_dies_gets_a_ddeath_and_a_dbirth_when_back() -> None:
    edge = EdgeNode("g", "n", 0, lambda: 1)
    tags = {"Online": boolean(True)}
    births = edge.birth({}, {"camera": Device(tags, alive=False)})
    assert [m.kind for m in births] == [
        MessageType.NBIRTH,
        MessageType.DBIRTH,
        MessageType.DDEATH,  # born with its last values, shown stale at once
    ]
    assert edge.update({}, {"camera": Device(tags, alive=False)}) == []
    [back] = edge.update({}, {"camera": Device(tags)})
    assert back.kind is MessageType.DBIRTH
    [gone] = edge.update({}, {"camera": Device(tags, alive=False)})
    assert (gone.kind, gone.device_id) == (MessageType.DDEATH, "camera")


def test_a_device_whose_metric_names_change_is_born_again_with_new_aliases(
    spb: ModuleType,
) -> None:
    """MaxRunningJobOrders went from 1 to 2: the Jobs device gets a DBIRTH with slot 2."""
    edge = EdgeNode("g", "n", 0, lambda: 1)
    [_, first] = edge.birth({}, {"Jobs": Device({"Running/1/State": text(None)})})
    two_slots = {"Running/1/State": text("Running"), "Running/2/State": text(None)}
    [again] = edge.update({}, {"Jobs": Device(two_slots)})
    assert again.kind is MessageType.DBIRTH
    before = {m.name: m.alias for m in spb.Payload.FromString(first.payload).metrics}
    after = {m.name: m.alias for m in spb.Payload.FromString(again.payload).metrics}
    assert after["Running/1/State"] == before["Running/1/State"]  # a name keeps its alias
    assert after["Running/2/State"] not in before.values()
