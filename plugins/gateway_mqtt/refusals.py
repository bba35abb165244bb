"""Publishes the broker refused: said once per topic in the log (``gateway.peers.LogOnce``),
counted always.

A broker whose ACL does not let the gateway's user write a topic acknowledges the publish with a
failure reason code (MQTT v5 PUBACK 0x87 Not authorized) and drops it. For a reply, the command
was handled and its sender waits in vain; for an event or a retained topic, the MES never sees
it. Saying so at every message would flood the log of a station whose ACL is wrong; saying
nothing left integrators guessing. So a refusal is a WARNING naming the topic, the reason and
what to check, at most once a minute per topic (the next one says how many were left out), and
every one is counted (``gateway_mqtt_publishes_refused_total{kind,reason}``, ``kind`` ``reply``
or ``publish``).
"""

from __future__ import annotations

import logging
from typing import Literal

from prometheus_client import Counter

from gateway.peers import LogOnce

log = logging.getLogger("gateway_mqtt.binding")

Kind = Literal["reply", "publish"]


class RefusedPublishes:
    def __init__(self, user: str | None, counter: Counter | None = None) -> None:
        self.user = user or "(anonymous)"
        self.counter = counter
        self._log = LogOnce(log)

    def note(self, kind: Kind, topic: str, reason: str, request_topic: str = "") -> None:
        """One more publish on ``topic`` refused (a reply: to a message of ``request_topic``)."""
        if self.counter is not None:
            self.counter.labels(kind, reason).inc()
        if kind == "reply":
            self._log.report(
                topic,
                "reply to a message on %s refused by the broker on %s: %s. The message was "
                "handled, but its sender gets no reply: check that the broker's ACL lets the "
                "gateway's user %s write %s (and that the sender asked for its replies where "
                "it meant to); every refusal is counted (gateway_mqtt_publishes_refused_total)",
                request_topic,
                topic,
                reason,
                self.user,
                topic,
            )
        else:
            self._log.report(
                topic,
                "publish refused by the broker on %s: %s; nobody receives it: check that the "
                "broker's ACL lets the gateway's user %s write %s; every refusal is counted "
                "(gateway_mqtt_publishes_refused_total)",
                topic,
                reason,
                self.user,
                topic,
            )
