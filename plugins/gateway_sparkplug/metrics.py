"""The Sparkplug mirror's figures on ``/metrics``."""

from __future__ import annotations

from gateway.metrics import Metrics


class SparkplugMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self.messages = metrics.counter(
            "sparkplug_messages_total",
            "Sparkplug messages published, by type (NBIRTH, DDATA, NDEATH...)",
            ["type"],
        )
        self.payload_bytes = metrics.counter(
            "sparkplug_payload_bytes_total", "Bytes of Sparkplug payloads published"
        )
        self.terms = metrics.counter(
            "sparkplug_terms_total", "Terms begun speaking for a scope (each with a new bdSeq)"
        )
        self.rebirths = metrics.counter(
            "sparkplug_rebirths_total", "NCMD Node Control/Rebirth requests answered"
        )
        self.speaking = metrics.gauge(
            "sparkplug_speaking", "1 while this instance speaks for the scope", ["scope"]
        )
