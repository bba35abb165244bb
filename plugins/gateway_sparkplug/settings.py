"""The ``[sparkplug]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.settings import Secret, setting


@dataclass(frozen=True)
class SparkplugSettings:
    enabled: bool = setting(
        False,
        "Mirror each scope's jobs, queue and equipment as Sparkplug B tags for SCADA "
        "(needs station-gateway[sparkplug])",
    )
    url: str = setting(
        "",
        "Broker of the Sparkplug connections (mqtt://host:port, mqtts://host:port); empty: "
        "mqtt.url. Sparkplug needs a real broker: the in-process memory:// one has no Wills",
        schemes=("mqtt", "mqtts"),
    )
    username: str = setting("", "User name on that broker; empty: mqtt.username")
    password: Secret | None = setting(
        None, "Password on that broker; empty: mqtt.password", secret=True
    )
    group_id: str = setting(
        "station", "Sparkplug group id (a site or line): spBv1.0/<group_id>/..."
    )
    scopes: list[str] = setting(
        [], "Scopes to publish as edge nodes (edge node id = scope); empty: every scope known"
    )
    equipment: list[str] = setting(
        [],
        "Equipment published as devices of every scope, besides the scope's configured "
        "equipment (config.equipment) and any equipment its jobs command",
    )
    primary_host_id: str = setting(
        "",
        "Sparkplug host application id whose STATE to wait for: births only while it is "
        "online (spBv1.0/STATE/<id>); empty: publish at once",
    )
    lease_seconds: float = setting(
        10.0,
        "Lifetime of the lease by which one instance speaks for a scope; a standby takes "
        "over within it after the speaking instance died",
        minimum=0.5,
    )
    poll_seconds: float = setting(
        1.0,
        "How often liveness, steps, the queue and the equipment's last commands are read "
        "(job state changes are published as they happen)",
        minimum=0.05,
    )
    unlimited_slots: int = setting(
        4,
        "Running/<n> slots of the Jobs device when MaxRunningJobOrders is 0 (no limit)",
        minimum=1,
        maximum=256,
    )
    keepalive_seconds: int = setting(30, "MQTT keep-alive of the Sparkplug connections", minimum=5)
