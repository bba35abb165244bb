"""A payload over ``mqtt.max_payload_bytes`` gets an ``invalid-request`` error reply, unprocessed;
the gateway goes on serving (on mosquitto and on the in-process broker)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import from_mqtt, to_mqtt
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.testing import running
from gateway.transport import Processor, Subscription
from gateway_mqtt import memory
from gateway_mqtt.clients import connect_test_client

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

LIMIT = 1024  # the smallest limit the setting allows
ECHO = "com.example.security.size.v1"


class Sizes:
    """Answers with the size of the data it was given; counts what it handled."""

    def __init__(self, topic_root: str) -> None:
        self.topic_root = topic_root
        self.handled = 0

    @hookimpl
    def gateway_register_processors(
        self, register: Callable[[Processor], None], settings: Settings
    ) -> None:
        async def handle(event: CloudEvent) -> Sequence[CloudEvent]:
            self.handled += 1
            return [event.reply(source="urn:gw", data={"chars": len(event.data["text"])})]

        register(Processor("sizes", [Subscription(f"{self.topic_root}/+/commands")], handle))


@pytest.fixture(params=["mosquitto", "inprocess"])
def broker_url(request: Any, unique: str) -> Iterator[str]:
    if request.param == "mosquitto":
        yield request.getfixturevalue("mqtt_url")
        return
    yield f"memory://{unique}"
    memory.drop_broker(unique)


OVERHEAD = len(json.dumps({"text": ""}, separators=(",", ":")))  # the codec's compact JSON


def command_of_size(size: int, event_id: str) -> CloudEvent:
    """A command whose JSON payload is exactly ``size`` bytes."""
    return CloudEvent(
        id=event_id,
        type=ECHO,
        source="urn:mes",
        subject="s1",
        datacontenttype="application/json",
        data={"text": "x" * (size - OVERHEAD)},
    )


async def test_a_payload_over_the_limit_gets_an_invalid_request_reply(
    broker_url: str, unique: str
) -> None:
    sizes = Sizes(unique)
    gateway = Gateway.from_environment(
        None,
        {
            "GATEWAY_PLUGINS_ALLOW": "mqtt",
            "GATEWAY_MQTT_URL": broker_url,
            "GATEWAY_MQTT_SHARE_GROUP": unique,
            "GATEWAY_GATEWAY_INSTANCE_ID": unique,
            "GATEWAY_MQTT_MAX_PAYLOAD_BYTES": str(LIMIT),
        },
        extra_plugins={"sizes": sizes},
    )
    topic = f"{unique}/s1/commands"
    at_limit, over_limit = command_of_size(LIMIT, "at"), command_of_size(LIMIT + 1, "over")
    assert len(to_mqtt(at_limit, topic).payload) == LIMIT
    assert len(to_mqtt(over_limit, topic).payload) == LIMIT + 1
    async with running(gateway), connect_test_client(broker_url) as mes:
        rejected = from_mqtt(await mes.request_raw(to_mqtt(over_limit, topic)))
        accepted = await mes.request(topic, at_limit)
    assert rejected.errorcode == "invalid-request"
    assert rejected.type == ECHO  # the error reply keeps the request's type
    assert rejected.data["error"] == "invalid-request"
    assert f"{LIMIT + 1} bytes exceeds the limit of {LIMIT}" in (rejected.errormessage or "")
    assert accepted.errorcode is None
    assert accepted.data == {"chars": LIMIT - OVERHEAD}
    assert sizes.handled == 1  # the oversize one never reached the handler
