"""The in-process broker: the MQTT v5 semantics the gateway relies on, without a socket."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from gateway.codecs.mqtt import MqttMessage
from gateway.errors import ValidationError
from gateway_mqtt import memory
from gateway_mqtt.memory import NEVER_EXPIRES, Broker, Connection, ConnectionClosed, Delivery

pytestmark = pytest.mark.anyio


class Clock:
    """A clock the test moves by hand (message and session expiry)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker(clock: Clock) -> Broker:
    return Broker("test", clock=clock)


def message(topic: str, payload: bytes = b"x", **fields: object) -> MqttMessage:
    return MqttMessage(topic=topic, payload=payload, **fields)  # type: ignore[arg-type]


async def take(connection: Connection, *, ack: bool = True) -> list[Delivery]:
    """Every delivery due now (the broker delivers synchronously, so nothing is in transit)."""
    deliveries: list[Delivery] = []
    while True:
        # Something queued is due at once; the generous deadline only covers a loaded machine,
        # where ``receive``'s checkpoint alone may outlast 10 ms.
        session = connection._session
        due = session.resend or (session.queue and len(session.in_flight) < connection._window)
        with anyio.move_on_after(10 if due else 0.01) as waiting:
            delivery = await connection.receive()
        if waiting.cancelled_caught:
            return deliveries
        deliveries.append(delivery)
        if ack and delivery.packet_id is not None:
            connection.ack(delivery.packet_id)


async def topics(connection: Connection) -> list[str]:
    return [delivery.message.topic for delivery in await take(connection)]


def persistent(broker: Broker, client_id: str, **options: int) -> Connection:
    return broker.connect(client_id, clean_start=False, session_expiry_interval=3600, **options)


# -- topics and wildcards ---------------------------------------------------------------------


async def test_wildcards_match_one_level_or_the_rest(broker: Broker) -> None:
    plus, hash_, exact = broker.connect("plus"), broker.connect("hash"), broker.connect("exact")
    await plus.subscribe([("st/+/commands", 1)])
    await hash_.subscribe([("st/#", 1)])
    await exact.subscribe([("st/a/commands", 1)])
    publisher = broker.connect("pub")
    for topic in ("st/a/commands", "st/b/commands", "st/a/b/commands", "st", "other/a/commands"):
        await publisher.publish(message(topic))
    assert await topics(plus) == ["st/a/commands", "st/b/commands"]
    assert await topics(hash_) == ["st/a/commands", "st/b/commands", "st/a/b/commands", "st"]
    assert await topics(exact) == ["st/a/commands"]


async def test_overlapping_filters_deliver_one_copy_at_the_highest_qos(broker: Broker) -> None:
    subscriber = broker.connect("sub")
    await subscriber.subscribe([("a/#", 0), ("a/+", 1)])
    await broker.connect("pub").publish(message("a/b"))
    [delivery] = await take(subscriber)
    assert delivery.message.qos == 1
    assert delivery.packet_id is not None


async def test_wildcards_do_not_match_dollar_topics(broker: Broker) -> None:
    subscriber = broker.connect("sub")
    await subscriber.subscribe([("#", 1), ("+/info", 1)])
    await broker.connect("pub").publish(message("$SYS/info"))
    assert await take(subscriber) == []


@pytest.mark.parametrize("bad", ["a/#/b", "a+/b", "", "$share/g", "$share//a", "$share/g+/a"])
async def test_invalid_filters_are_refused(broker: Broker, bad: str) -> None:
    with pytest.raises(ValidationError):
        await broker.connect("sub").subscribe([(bad, 1)])


@pytest.mark.parametrize("bad", ["a/+", "a/#", ""])
async def test_publishing_to_a_wildcard_topic_is_refused(broker: Broker, bad: str) -> None:
    with pytest.raises(ValidationError):
        await broker.connect("pub").publish(message(bad))


async def test_mqtt_v5_properties_travel_unchanged(broker: Broker) -> None:
    subscriber = broker.connect("sub")
    await subscriber.subscribe([("a", 1)])
    sent = message(
        "a",
        b"{}",
        content_type="application/json",
        correlation_data=b"\xff\x00c",
        response_topic="replies/me",
        user_properties=(("type", "t"), ("type2", "u")),
    )
    await broker.connect("pub").publish(sent)
    [delivery] = await take(subscriber)
    assert delivery.message == sent


# -- shared subscriptions ---------------------------------------------------------------------


async def test_a_share_group_gives_each_message_to_one_member_in_turn(broker: Broker) -> None:
    a, b = broker.connect("a"), broker.connect("b")
    watcher = broker.connect("watcher")
    for member in (a, b):
        await member.subscribe([("$share/g/cmd/+", 1)])
    await watcher.subscribe([("cmd/+", 1)])
    publisher = broker.connect("pub")
    for number in range(6):
        await publisher.publish(message(f"cmd/{number}"))
    assert await topics(a) == ["cmd/0", "cmd/2", "cmd/4"]
    assert await topics(b) == ["cmd/1", "cmd/3", "cmd/5"]
    assert len(await take(watcher)) == 6  # a plain subscription still sees every message


async def test_each_share_group_gets_its_own_copy(broker: Broker) -> None:
    first, second = broker.connect("first"), broker.connect("second")
    await first.subscribe([("$share/one/t", 1)])
    await second.subscribe([("$share/two/t", 1)])
    await broker.connect("pub").publish(message("t"))
    assert await topics(first) == ["t"]
    assert await topics(second) == ["t"]


async def test_an_offline_persistent_member_keeps_its_turn_and_gets_its_messages_later(
    broker: Broker,
) -> None:
    """Mirrors mosquitto: members are sessions, connected or not, taken in turn."""
    online = persistent(broker, "online")
    offline = persistent(broker, "offline")
    for member in (online, offline):
        await member.subscribe([("$share/g/cmd", 1)])
    offline.close()
    publisher = broker.connect("pub")
    for number in range(4):
        await publisher.publish(message("cmd", str(number).encode()))
    assert [d.message.payload for d in await take(online)] == [b"0", b"2"]
    assert broker.pending("offline") == 2
    back = persistent(broker, "offline")
    assert back.session_present
    assert [d.message.payload for d in await take(back)] == [b"1", b"3"]


async def test_unacknowledged_shared_messages_stay_with_their_member(broker: Broker) -> None:
    a, b = persistent(broker, "a"), persistent(broker, "b")
    for member in (a, b):
        await member.subscribe([("$share/g/cmd", 1)])
    await broker.connect("pub").publish(message("cmd"))
    [delivery] = await take(a, ack=False)
    a.close()
    assert await take(b) == []
    [again] = await take(persistent(broker, "a"))
    assert again.duplicate
    assert again.message == delivery.message


async def test_a_member_whose_session_ends_leaves_the_group_and_its_queue_is_dropped(
    broker: Broker, clock: Clock
) -> None:
    stays = persistent(broker, "stays")
    leaves = broker.connect("leaves", clean_start=False, session_expiry_interval=10)
    for member in (stays, leaves):
        await member.subscribe([("$share/g/cmd", 1)])
    leaves.close()
    publisher = broker.connect("pub")
    await publisher.publish(message("cmd", b"0"))
    await publisher.publish(message("cmd", b"1"))  # queued for "leaves"
    clock.now += 11
    assert not broker.has_session("leaves")
    await publisher.publish(message("cmd", b"2"))
    assert [d.message.payload for d in await take(stays)] == [b"0", b"2"]


async def test_retained_messages_are_not_sent_to_shared_subscriptions(broker: Broker) -> None:
    await broker.connect("pub").publish(message("state", retain=True))
    member = broker.connect("member")
    await member.subscribe([("$share/g/state", 1)])
    assert await take(member) == []


async def test_unsubscribing_leaves_the_share_group(broker: Broker) -> None:
    a, b = broker.connect("a"), broker.connect("b")
    for member in (a, b):
        await member.subscribe([("$share/g/cmd", 1)])
    await b.unsubscribe(["$share/g/cmd"])
    publisher = broker.connect("pub")
    await publisher.publish(message("cmd"))
    await publisher.publish(message("cmd"))
    assert len(await take(a)) == 2
    assert await take(b) == []


# -- sessions, acknowledgement, redelivery ---------------------------------------------------------


async def test_a_persistent_session_queues_qos1_while_offline_but_not_qos0(broker: Broker) -> None:
    subscriber = persistent(broker, "sub")
    await subscriber.subscribe([("t/#", 1)])
    subscriber.close()
    publisher = broker.connect("pub")
    await publisher.publish(message("t/1", qos=1))
    await publisher.publish(message("t/0", qos=0))
    back = persistent(broker, "sub")
    assert back.session_present
    assert await topics(back) == ["t/1"]


async def test_unacknowledged_messages_are_redelivered_first_after_reconnect(
    broker: Broker,
) -> None:
    subscriber = persistent(broker, "sub")
    await subscriber.subscribe([("t/+", 1)])
    publisher = broker.connect("pub")
    await publisher.publish(message("t/1"))
    await publisher.publish(message("t/2"))
    first, second = await take(subscriber, ack=False)
    subscriber.ack(second.packet_id or 0)
    subscriber.close()
    await publisher.publish(message("t/3"))
    back = persistent(broker, "sub")
    redelivered, queued = await take(back)
    assert (redelivered.message.topic, redelivered.packet_id) == ("t/1", first.packet_id)
    assert redelivered.duplicate
    assert (queued.message.topic, queued.duplicate) == ("t/3", False)
    assert broker.pending("sub") == 0


async def test_an_ack_on_a_closed_connection_is_lost(broker: Broker) -> None:
    subscriber = persistent(broker, "sub")
    await subscriber.subscribe([("t", 1)])
    await broker.connect("pub").publish(message("t"))
    [delivery] = await take(subscriber, ack=False)
    subscriber.close()
    subscriber.ack(delivery.packet_id or 0)
    assert [d.duplicate for d in await take(persistent(broker, "sub"))] == [True]


async def test_clean_start_discards_the_session(broker: Broker) -> None:
    subscriber = persistent(broker, "sub")
    await subscriber.subscribe([("t", 1)])
    subscriber.close()
    await broker.connect("pub").publish(message("t"))
    fresh = broker.connect("sub", clean_start=True)
    assert not fresh.session_present
    assert await take(fresh) == []
    await broker.connect("pub").publish(message("t"))
    assert await take(fresh) == []  # the subscription went with the session


async def test_a_session_without_expiry_ends_at_disconnect(broker: Broker) -> None:
    broker.connect("sub", clean_start=False, session_expiry_interval=0).close()
    assert not broker.has_session("sub")


async def test_a_session_expires_after_its_interval(broker: Broker, clock: Clock) -> None:
    broker.connect("short", clean_start=False, session_expiry_interval=60).close()
    broker.connect("never", clean_start=False, session_expiry_interval=NEVER_EXPIRES).close()
    clock.now += 59
    assert broker.has_session("short")
    clock.now += 1
    assert not broker.has_session("short")
    clock.now += 10**9
    assert broker.has_session("never")


async def test_a_second_connection_takes_the_session_over(broker: Broker) -> None:
    first = persistent(broker, "sub")
    await first.subscribe([("t", 1)])
    second = persistent(broker, "sub")
    assert second.session_present
    with pytest.raises(ConnectionClosed, match="taken over"):
        await first.receive()
    await broker.connect("pub").publish(message("t"))
    assert await topics(second) == ["t"]


async def test_a_waiting_reader_learns_that_its_connection_closed(broker: Broker) -> None:
    subscriber = broker.connect("sub")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_restart_soon, broker)
        with pytest.raises(ConnectionClosed, match="broker restarted"), anyio.fail_after(1):
            await subscriber.receive()
    assert not broker.has_session("sub")


async def _restart_soon(broker: Broker) -> None:
    await anyio.sleep(0.01)
    broker.restart()


async def test_closed_connections_refuse_to_publish(broker: Broker) -> None:
    async with broker.connect("pub") as publisher:
        pass
    with pytest.raises(ConnectionClosed):
        await publisher.publish(message("t"))


# -- flow control and bounded queues ---------------------------------------------------------------


async def test_receive_maximum_bounds_the_messages_in_flight(broker: Broker) -> None:
    subscriber = broker.connect("sub", receive_maximum=2)
    await subscriber.subscribe([("t", 1)])
    publisher = broker.connect("pub")
    for _ in range(3):
        await publisher.publish(message("t"))
    first, _ = await take(subscriber, ack=False)
    assert await take(subscriber) == []  # the third waits at the broker
    subscriber.ack(first.packet_id or 0)
    assert len(await take(subscriber)) == 1
    assert broker.pending("sub") == 1  # the second is still unacknowledged


async def test_a_full_queue_drops_new_messages_and_counts_them(clock: Clock) -> None:
    broker = Broker("small", max_queued_messages=3, clock=clock)
    subscriber = persistent(broker, "sub")
    await subscriber.subscribe([("t", 1)])
    subscriber.close()
    publisher = broker.connect("pub")
    for number in range(5):
        await publisher.publish(message("t", str(number).encode()))
    assert broker.dropped == 2
    assert [d.message.payload for d in await take(persistent(broker, "sub"))] == [
        b"0",
        b"1",
        b"2",
    ]


# -- retained messages -----------------------------------------------------------------------------


async def test_retained_messages_reach_new_subscribers_with_the_retain_flag(
    broker: Broker,
) -> None:
    publisher = broker.connect("pub")
    await publisher.publish(message("state/a", b"old", retain=True))
    await publisher.publish(message("state/a", b"new", retain=True))
    await publisher.publish(message("state/b", b"b", retain=True))
    subscriber = broker.connect("sub")
    await subscriber.subscribe([("state/+", 1)])
    retained = await take(subscriber)
    assert sorted((d.message.topic, d.message.payload) for d in retained) == [
        ("state/a", b"new"),
        ("state/b", b"b"),
    ]
    assert all(d.message.retain for d in retained)
    await publisher.publish(message("state/a", b"live", retain=True))
    [live] = await take(subscriber)
    assert not live.message.retain  # retain-as-published is off, as in mosquitto's default


async def test_a_zero_byte_retained_message_deletes_and_still_reaches_subscribers(
    broker: Broker,
) -> None:
    publisher = broker.connect("pub")
    await publisher.publish(message("state/a", b"value", retain=True))
    subscriber = broker.connect("sub")
    await subscriber.subscribe([("state/a", 1)])
    await take(subscriber)
    await publisher.publish(message("state/a", b"", retain=True))
    [deleted] = await take(subscriber)
    assert deleted.message.payload == b""
    assert broker.retained_topics() == []
    late = broker.connect("late")
    await late.subscribe([("state/#", 1)])
    assert await take(late) == []


# -- message expiry --------------------------------------------------------------------------------


async def test_a_queued_message_that_expired_is_not_delivered(broker: Broker, clock: Clock) -> None:
    subscriber = persistent(broker, "sub")
    await subscriber.subscribe([("t/+", 1)])
    subscriber.close()
    publisher = broker.connect("pub")
    await publisher.publish(message("t/short", message_expiry_interval=10))
    await publisher.publish(message("t/long", message_expiry_interval=100))
    await publisher.publish(message("t/forever"))
    clock.now += 30
    delivered = {d.message.topic: d.message for d in await take(persistent(broker, "sub"))}
    assert set(delivered) == {"t/long", "t/forever"}
    assert delivered["t/long"].message_expiry_interval == 70  # the remaining lifetime
    assert delivered["t/forever"].message_expiry_interval is None


async def test_a_retained_message_expires(broker: Broker, clock: Clock) -> None:
    publisher = broker.connect("pub")
    await publisher.publish(message("state", retain=True, message_expiry_interval=60))
    clock.now += 59.5
    assert broker.retained_topics() == ["state"]
    early = broker.connect("early")
    await early.subscribe([("state", 1)])
    [delivery] = await take(early)
    assert delivery.message.message_expiry_interval == 1
    clock.now += 1
    late = broker.connect("late")
    await late.subscribe([("state", 1)])
    assert await take(late) == []
    assert broker.retained_topics() == []


# -- the registry --------------------------------------------------------------------------------


@pytest.fixture
def registered() -> Iterator[str]:
    name = "test-registry"
    yield name
    memory.drop_broker(name)


async def test_brokers_are_found_by_name(registered: str) -> None:
    broker = memory.get_broker(registered)
    assert memory.get_broker(registered) is broker
    assert memory.broker_name(f"memory://{registered}") == registered
    assert memory.broker_name("mqtt://localhost:1883") is None
    with pytest.raises(ValidationError):
        memory.broker_name("memory://")
    connection = broker.connect("c")
    memory.drop_broker(registered)
    assert connection.closed
    assert memory.get_broker(registered) is not broker
