"""Publishes the broker refused: said once per topic in the log, counted always.

A broker whose ACL does not let the gateway's user write a topic acknowledges the publish with a
failure reason code (MQTT v5 PUBACK 0x87 Not authorized) and drops it. For a reply, the command
was handled and its sender waits in vain; for an event or a retained topic, the MES never sees
it. Saying so at every message would flood the log of a station whose ACL is wrong; saying
nothing left integrators guessing. So the first refusal per topic is a WARNING naming the topic,
the reason and what to check; later ones are counted
(``gateway_mqtt_publishes_refused_total{kind,reason}``, ``kind`` ``reply`` or ``publish``) and
logged again only when the count for that topic reaches 10, 100, 1000... At most ``MAX_TOPICS``
topics are remembered.
"""

from __future__ import annotations

import logging
from typing import Literal

from prometheus_client import Counter

log = logging.getLogger("gateway_mqtt.binding")

MAX_TOPICS = 1000
OTHER = "<other topics>"
Kind = Literal["reply", "publish"]


class RefusedPublishes:
    def __init__(self, user: str | None, counter: Counter | None = None) -> None:
        self.user = user or "(anonymous)"
        self.counter = counter
        self.counts: dict[str, int] = {}

    def note(self, kind: Kind, topic: str, reason: str, request_topic: str = "") -> None:
        """One more publish on ``topic`` refused (a reply: to a message of ``request_topic``)."""
        if self.counter is not None:
            self.counter.labels(kind, reason).inc()
        if topic not in self.counts and len(self.counts) >= MAX_TOPICS:
            topic = OTHER
        count = self.counts.get(topic, 0) + 1
        self.counts[topic] = count
        if count == 1 and kind == "reply":
            log.warning(
                "reply to a message on %s refused by the broker on %s: %s. The message was "
                "handled, but its sender gets no reply: check that the broker's ACL lets the "
                "gateway's user %s write %s (and that the sender asked for its replies where "
                "it meant to); further refusals on this topic are counted "
                "(gateway_mqtt_publishes_refused_total)",
                request_topic,
                topic,
                reason,
                self.user,
                topic,
            )
        elif count == 1:
            log.warning(
                "publish refused by the broker on %s: %s; nobody receives it: check that the "
                "broker's ACL lets the gateway's user %s write %s; further refusals on this "
                "topic are counted (gateway_mqtt_publishes_refused_total)",
                topic,
                reason,
                self.user,
                topic,
            )
        elif _power_of_ten(count):
            log.warning(
                "publishes refused by the broker on %s: %d so far (%s)", topic, count, reason
            )


def _power_of_ten(number: int) -> bool:
    while number % 10 == 0 and number > 1:
        number //= 10
    return number == 1
