"""Replies the broker refused: said once per topic in the log, counted always.

A broker whose ACL does not let the gateway's user write a Response Topic acknowledges the reply
with a failure reason code (MQTT v5 PUBACK 0x87 Not authorized) and drops it: the command was
handled, its sender waits in vain. Saying so at every reply would flood the log of a station
whose MES asks for replies where it may not; saying nothing left integrators guessing. So the
first refusal per topic is a WARNING naming the topic, the reason and what to check; later ones
are counted (``gateway_mqtt_replies_refused_total{reason}``) and logged again only when the
count reaches 10, 100, 1000... for that topic. At most ``MAX_TOPICS`` topics are remembered.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

log = logging.getLogger("gateway_mqtt.binding")

MAX_TOPICS = 1000
OTHER = "<other topics>"


class RefusedReplies:
    def __init__(self, user: str | None) -> None:
        self.user = user or "(anonymous)"
        self.counts: dict[str, int] = {}

    def note(self, request_topic: str, topic: str, reason: str, counter: Counter) -> None:
        """One more reply to a message of ``request_topic`` refused on ``topic``."""
        counter.labels(reason).inc()
        if topic not in self.counts and len(self.counts) >= MAX_TOPICS:
            topic = OTHER
        count = self.counts.get(topic, 0) + 1
        self.counts[topic] = count
        if count == 1:
            log.warning(
                "reply to a message on %s refused by the broker on %s: %s. The message was "
                "handled, but its sender gets no reply: check that the broker's ACL lets the "
                "gateway's user %s write %s (and that the sender asked for its replies where "
                "it meant to); further refusals on this topic are counted "
                "(gateway_mqtt_replies_refused_total)",
                request_topic,
                topic,
                reason,
                self.user,
                topic,
            )
        elif _power_of_ten(count):
            log.warning("replies refused by the broker on %s: %d so far (%s)", topic, count, reason)


def _power_of_ten(number: int) -> bool:
    while number % 10 == 0 and number > 1:
        number //= 10
    return number == 1
