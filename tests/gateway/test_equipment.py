"""The equipment hub: routing commands to drivers, and equipment liveness (in Redis and without)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import pytest

from gateway.app import Gateway
from gateway.cloudevents import MSGPACK, CloudEvent
from gateway.equipment import (
    ACTION_ATTRIBUTE,
    EQUIPMENT_ATTRIBUTE,
    JOB_ORDER_ATTRIBUTE,
    CorrelationId,
    EquipmentCommand,
    EquipmentEvent,
    EquipmentHub,
    EquipmentReply,
    Liveness,
    command_event,
    event_from_cloudevent,
    reply_from_event,
)
from gateway.errors import GatewayError, NotPermitted, ValidationError


def command(equipment: str | None, type: str = "com.example.do.v1") -> EquipmentCommand:
    return EquipmentCommand(
        correlation_id="J1:a:1",
        type=type,
        equipment=equipment,
        scope="cell1",
        job_order_id="J1",
        action="a",
    )


@dataclass
class Driver:
    name: str
    equipment: frozenset[str] = frozenset()
    catch_all: bool = False
    heartbeats: bool = False
    sent: list[EquipmentCommand] = field(default_factory=list)

    def serves(self, command: EquipmentCommand) -> bool:
        return self.catch_all or command.equipment in self.equipment

    async def send(self, command: EquipmentCommand) -> None:
        self.sent.append(command)


@dataclass
class TrackingDriver(Driver):
    def expects_heartbeats(self, equipment_id: str) -> bool:
        return equipment_id in self.equipment


@dataclass
class Sink:
    replies: list[EquipmentReply] = field(default_factory=list)
    events: list[EquipmentEvent] = field(default_factory=list)

    async def reply(self, reply: EquipmentReply) -> None:
        self.replies.append(reply)

    async def event(self, event: EquipmentEvent) -> None:
        self.events.append(event)


# -- routing ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_specific_driver_wins_over_a_catch_all_whatever_the_order() -> None:
    hub = EquipmentHub()
    everything = Driver("everything", catch_all=True)
    press = Driver("press", frozenset({"press"}))
    hub.add_driver(everything)
    hub.add_driver(press)
    await hub.send(command("press"))
    await hub.send(command("robot"))
    assert [c.equipment for c in press.sent] == ["press"]
    assert [c.equipment for c in everything.sent] == ["robot"]


def test_no_driver_names_the_drivers_there_are() -> None:
    hub = EquipmentHub()
    hub.add_driver(Driver("press", frozenset({"press"})))
    with pytest.raises(GatewayError, match=r"no equipment driver serves .* \(drivers: press\)"):
        hub.driver_for(command("robot"))


def test_two_drivers_of_one_name_are_refused() -> None:
    hub = EquipmentHub()
    hub.add_driver(Driver("press"))
    with pytest.raises(GatewayError, match="two equipment drivers"):
        hub.add_driver(Driver("press"))


@pytest.mark.anyio
async def test_replies_and_events_go_to_the_attached_sink() -> None:
    hub = EquipmentHub()
    with pytest.raises(GatewayError, match="no equipment sink is attached as 'recipes'"):
        await hub.reply(EquipmentReply("J1:a:1"))
    sink = Sink()
    hub.attach(sink)
    await hub.reply(EquipmentReply("J1:a:1", data={"ok": True}))
    await hub.event(EquipmentEvent(type="com.example.seen.v1", id="e1"))
    assert [r.data for r in sink.replies] == [{"ok": True}]
    assert [e.id for e in sink.events] == ["e1"]


@pytest.mark.anyio
async def test_a_reply_goes_to_the_sink_of_the_owner_its_correlation_id_names() -> None:
    hub = EquipmentHub()
    recipes, line = Sink(), Sink()
    hub.attach(recipes)
    hub.attach(line, owner="line")
    hub.attach(recipes)  # again: nothing changes
    assert hub.sinks == {"recipes": recipes, "line": line}
    await hub.reply(EquipmentReply(str(CorrelationId("J:2", "press", 1, "line")), data="line"))
    await hub.reply(EquipmentReply("J:1:tighten:3", data="recipes"))
    await hub.event(EquipmentEvent(type="t.v1", id="e1", job_order_id="J2"))
    assert [r.data for r in recipes.replies] == ["recipes"]
    assert [r.data for r in line.replies] == ["line"]
    assert [e.id for e in recipes.events] == ["e1"]  # events go to the recipe runtime
    with pytest.raises(GatewayError, match="no equipment sink is attached as 'cell'"):
        await hub.reply(EquipmentReply("J1:a:1:cell"))
    with pytest.raises(ValidationError, match="correlationid"):
        await hub.reply(EquipmentReply("no-attempt"))


def test_one_sink_per_owner() -> None:
    hub = EquipmentHub()
    hub.attach(Sink())
    with pytest.raises(GatewayError, match="two equipment sinks are attached as 'recipes'"):
        hub.attach(Sink())
    with pytest.raises(GatewayError, match="no ':' and not a number"):
        hub.attach(Sink(), owner="a:b")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("J1:tighten:3", CorrelationId("J1", "tighten", 3)),
        ("J:1:tighten:3", CorrelationId("J:1", "tighten", 3)),  # a job id may hold ':'
        ("J1:tighten:3:line", CorrelationId("J1", "tighten", 3, "line")),
        ("J:1:tighten:3:line", CorrelationId("J:1", "tighten", 3, "line")),
    ],
)
def test_a_correlation_id_has_one_format_and_one_parse(text: str, parsed: CorrelationId) -> None:
    assert CorrelationId.parse(text) == parsed
    assert str(parsed) == text


@pytest.mark.parametrize("text", ["", "J1", "J1:a", "J1:a:x", ":a:1", "J1::1", "J1:a:1:"])
def test_what_is_not_a_correlation_id_of_ours_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not"):
        CorrelationId.parse(text)


# -- identity: a reply is accepted only from the equipment the command went to -------------


@pytest.mark.anyio
async def test_a_reply_from_other_equipment_is_not_permitted_and_reaches_no_engine() -> None:
    hub = EquipmentHub()
    hub.add_driver(Driver("any", catch_all=True))
    sink = Sink()
    hub.attach(sink)
    await hub.send(command("press"))
    with pytest.raises(
        NotPermitted, match=r"robot may not answer command J1:a:1: it went to press"
    ):
        await hub.reply(EquipmentReply("J1:a:1", data="forged", equipment="robot"))
    assert sink.replies == []
    await hub.reply(EquipmentReply("J1:a:1", data="pressed", equipment="press"))
    assert [reply.data for reply in sink.replies] == ["pressed"]
    # Answered: a second reply finds no command waiting (until the command is sent again).
    with pytest.raises(NotPermitted, match="none is waiting for a reply"):
        await hub.reply(EquipmentReply("J1:a:1", data="again", equipment="press"))
    await hub.send(command("press"))
    await hub.reply(EquipmentReply("J1:a:1", data="re-sent", equipment="press"))
    assert [reply.data for reply in sink.replies] == ["pressed", "re-sent"]


@pytest.mark.anyio
async def test_a_reply_for_a_command_never_sent_is_not_permitted() -> None:
    hub = EquipmentHub()
    hub.attach(Sink())
    with pytest.raises(NotPermitted, match="none is waiting"):
        await hub.reply(EquipmentReply("J9:a:1", equipment="press"))


@pytest.mark.anyio
@pytest.mark.integration
async def test_the_command_record_is_shared_by_every_instance(
    two_hubs: tuple[Gateway, Gateway],
) -> None:
    """Sent from one instance, answered on another: checked against the store."""
    first, second = two_hubs
    first.equipment.add_driver(Driver("any", catch_all=True))
    sink = Sink()
    second.equipment.attach(sink)
    await first.equipment.send(command("press"))
    with pytest.raises(NotPermitted, match="it went to press"):
        await second.equipment.reply(EquipmentReply("J1:a:1", equipment="robot"))
    await second.equipment.reply(EquipmentReply("J1:a:1", data=1, equipment="press"))
    assert [reply.data for reply in sink.replies] == [1]
    store = first.store
    assert store is not None
    assert not await store.client.exists(store.keys.global_key("equipment", "sent", "J1:a:1"))


# -- the equipment CloudEvent shape ---------------------------------------------------------


def test_a_command_event_carries_the_command_in_every_drivers_shape() -> None:
    sent = EquipmentCommand(
        correlation_id="J1:tighten:2",
        type="com.example.tighten.v1",
        equipment="tightener",
        scope="cell1",
        job_order_id="J1",
        action="tighten",
        parameters={"torque_nm": 85},
        job_parameters={"bolts": 4},
        timeout_seconds=12.2,
    )
    event = command_event(sent, "urn:gw").validate()
    assert (event.type, event.source, event.subject) == (
        "com.example.tighten.v1",
        "urn:gw",
        "cell1",
    )
    assert event.correlationid == "J1:tighten:2"
    assert event.id != event.correlationid  # a fresh id unless the driver says otherwise
    assert event.expiryinterval == 13  # the timeout, rounded up: void once the action gave up
    assert event.datacontenttype == "application/json"
    assert event.data == {"parameters": {"torque_nm": 85}, "job_parameters": {"bolts": 4}}
    assert event.time is not None
    assert event.extensions == {
        EQUIPMENT_ATTRIBUTE: "tightener",
        JOB_ORDER_ATTRIBUTE: "J1",
        ACTION_ATTRIBUTE: "tighten",
    }
    shaped = command_event(
        sent, "urn:gw", data={"Nm": 85}, datacontenttype=MSGPACK, id=sent.correlation_id
    )
    assert (shaped.data, shaped.datacontenttype, shaped.id) == ({"Nm": 85}, MSGPACK, "J1:tighten:2")
    assert command_event(sent, "urn:gw", data=None).data is None  # None is a payload too
    anywhere = command_event(command(None), "urn:gw")
    assert EQUIPMENT_ATTRIBUTE not in anywhere.extensions
    assert anywhere.expiryinterval is None


def reply(**attributes: object) -> CloudEvent:
    fields: dict[str, object] = {"correlationid": "J1:a:1", "subject": "cell1", "data": {"x": 1}}
    fields.update(attributes)
    return CloudEvent(type="com.example.do.v1", source="urn:eq", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "message", "error"),
    [
        (None, None, None),
        ("interlock", "guard open", "interlock: guard open"),
        ("interlock", None, "interlock"),
        (None, "guard open", "guard open"),
        ("", "", "equipment reported an error"),
    ],
)
def test_a_reply_event_is_read_with_its_error(
    code: str | None, message: str | None, error: str | None
) -> None:
    read = reply_from_event(reply(errorcode=code, errormessage=message))
    assert read == EquipmentReply("J1:a:1", data={"x": 1}, error=error, scope="cell1")


def test_a_reply_event_without_correlation_answers_nothing() -> None:
    with pytest.raises(ValidationError, match="correlationid"):
        reply_from_event(reply(correlationid=None))


def test_an_equipment_event_is_read_with_its_equipment_scope_and_job() -> None:
    event = CloudEvent(
        type="com.example.qa_result.v1",
        source="urn:camera",
        id="e7",
        subject="cell1",
        data={"passed": True},
        extensions={EQUIPMENT_ATTRIBUTE: "camera", JOB_ORDER_ATTRIBUTE: "J1"},
    )
    assert event_from_cloudevent(event) == EquipmentEvent(
        type="com.example.qa_result.v1",
        id="e7",
        equipment="camera",
        scope="cell1",
        job_order_id="J1",
        data={"passed": True},
    )
    bare = event_from_cloudevent(CloudEvent(type="t.v1", source="urn:x", id="e8"))
    assert (bare.equipment, bare.scope, bare.job_order_id) == (None, None, None)


# -- liveness without a store (one process) ------------------------------------------------


class FakeClock:
    """Unix time that moves only when a test says so."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.anyio
async def test_liveness_in_process_follows_heartbeats_and_goodbyes() -> None:
    clock = FakeClock()
    hub = EquipmentHub(heartbeat_timeout_seconds=0.2, clock=clock)
    assert await hub.liveness("press") == Liveness(online=False, last_seen=None)
    await hub.heartbeat("press")
    assert await hub.liveness("press") == Liveness(online=True, last_seen=clock.now)
    assert await hub.offline_reason("press") is None
    clock.advance(0.25)
    assert not (await hub.liveness("press")).online
    assert await hub.offline_reason("press") == "equipment press offline: last heartbeat 0.2 s ago"
    await hub.heartbeat("press", timeout_seconds=30)
    assert (await hub.liveness("press")).online
    clock.advance(3)
    await hub.gone("press", "heartbeat timeout")
    state = await hub.liveness("press")
    assert state == Liveness(False, clock.now - 3, clock.now, "heartbeat timeout")
    clock.advance(1.5)
    assert await hub.offline_reason("press") == (
        "equipment press offline: heartbeat timeout 1.5 s ago (last heartbeat 4.5 s ago)"
    )


@pytest.mark.anyio
async def test_never_seen_is_reported_only_for_equipment_a_driver_expects_heartbeats_from() -> None:
    hub = EquipmentHub()
    hub.add_driver(TrackingDriver("press", frozenset({"press"})))
    hub.add_driver(Driver("robot", frozenset({"robot"})))
    assert hub.tracks("press")
    assert not hub.tracks("robot")
    assert await hub.offline_reason("press") == (
        "equipment press offline: never seen (no heartbeat yet)"
    )
    assert await hub.offline_reason("robot") is None  # sends no heartbeats: nothing to say


# -- liveness in Redis (every instance sees the same) --------------------------------------


def store_gateway(redis_url: str, prefix: str, instance: str) -> Gateway:
    environ = {
        "GATEWAY_PLUGINS_ALLOW": "redis",
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": prefix,
        "GATEWAY_GATEWAY_INSTANCE_ID": instance,
    }
    return Gateway.from_environment(environ=environ)


@pytest.fixture
async def two_hubs(redis_url: str, unique: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """The hubs of two gateway instances sharing one Redis (store entered, nothing running)."""
    first = store_gateway(redis_url, unique, "a")
    second = store_gateway(redis_url, unique, "b")
    assert first.store is not None
    assert second.store is not None
    async with first.store, second.store:
        yield first, second


@pytest.mark.anyio
@pytest.mark.integration
async def test_a_heartbeat_on_one_instance_is_seen_on_another_until_its_ttl_runs_out(
    two_hubs: tuple[Gateway, Gateway],
) -> None:
    first, second = two_hubs
    clock = FakeClock()
    first.equipment.clock = second.equipment.clock = clock
    assert await second.equipment.liveness("press") == Liveness(online=False, last_seen=None)
    await first.equipment.heartbeat("press", timeout_seconds=0.3)
    assert await second.equipment.liveness("press") == Liveness(online=True, last_seen=clock.now)
    assert await second.equipment.offline_reason("press") is None

    with anyio.fail_after(10):  # Redis's clock ends the TTL, the same for every instance
        while (await second.equipment.liveness("press")).online:  # noqa: ASYNC110 - no event for a TTL
            await anyio.sleep(0.02)
    clock.advance(0.4)
    assert await second.equipment.offline_reason("press") == (
        "equipment press offline: last heartbeat 0.4 s ago"
    )


@pytest.mark.anyio
@pytest.mark.integration
async def test_the_ttl_is_the_heartbeat_timeout(two_hubs: tuple[Gateway, Gateway]) -> None:
    first, _ = two_hubs
    store = first.store
    assert store is not None
    await first.equipment.heartbeat("press", timeout_seconds=12.5)
    ttl = await store.client.pttl(store.keys.global_key("equipment", "online", "press"))
    assert 12_000 < ttl <= 12_500
    first.equipment.heartbeat_timeout_seconds = 4
    await first.equipment.heartbeat("press")  # the hub's default
    ttl = await store.client.pttl(store.keys.global_key("equipment", "online", "press"))
    assert 3_500 < ttl <= 4_000


@pytest.mark.anyio
@pytest.mark.integration
async def test_a_goodbye_takes_equipment_offline_at_once_and_a_heartbeat_brings_it_back(
    two_hubs: tuple[Gateway, Gateway],
) -> None:
    first, second = two_hubs
    clock = FakeClock()
    first.equipment.clock = second.equipment.clock = clock
    await first.equipment.heartbeat("press", timeout_seconds=30)
    clock.advance(2)
    await second.equipment.gone("press")
    state = await first.equipment.liveness("press")
    assert state == Liveness(False, clock.now - 2, clock.now, "disconnected")
    clock.advance(0.5)
    assert await first.equipment.offline_reason("press") == (
        "equipment press offline: disconnected 0.5 s ago (last heartbeat 2.5 s ago)"
    )
    await second.equipment.heartbeat("press", timeout_seconds=30)
    state = await first.equipment.liveness("press")
    assert state.online
    assert state.gone_at is None
    await first.equipment.gone("press", "connection refused")
    assert (await second.equipment.liveness("press")).gone_reason == "connection refused"


@pytest.mark.anyio
@pytest.mark.integration
async def test_the_gateway_gives_its_hub_the_store(two_hubs: tuple[Gateway, Gateway]) -> None:
    first, _ = two_hubs
    store = first.store
    assert store is not None
    await first.equipment.heartbeat("press")
    assert await store.client.hexists(store.keys.global_key("equipment", "last-seen"), "press")
