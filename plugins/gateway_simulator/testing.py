"""Settings of a gateway instance running the simulated station, for tests.

One place for what every test of a simulated station sets: the real MQTT broker and Redis,
names derived from the station's name (so tests sharing servers never meet), fast engine
timers, and the simulator's own settings (``[simulator]`` keys, overridable per test).
"""

from __future__ import annotations

from collections.abc import Mapping


def station_environ(
    *,
    mqtt_url: str,
    redis_url: str,
    name: str,
    instance: str = "a",
    role: str = "all",
    simulator: Mapping[str, str],
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``GATEWAY_...`` environment of instance ``instance`` of the station ``name``.

    ``simulator`` holds ``[simulator]`` settings by key (``{"tighten_seconds": "0.05"}``);
    ``extra`` further ``GATEWAY_...`` variables (an RPC port, say).
    """
    return {
        "GATEWAY_MQTT_URL": mqtt_url,
        "GATEWAY_MQTT_SHARE_GROUP": name,
        "GATEWAY_REDIS_URL": redis_url,
        "GATEWAY_REDIS_KEY_PREFIX": name,
        "GATEWAY_GATEWAY_INSTANCE_ID": f"{name}-{instance}",
        "GATEWAY_GATEWAY_ROLE": role,
        "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
        "GATEWAY_JOBS_TOPIC_PREFIX": name,
        "GATEWAY_RUNTIME_TIMER_POLL_SECONDS": "0.01",
        **{f"GATEWAY_SIMULATOR_{key.upper()}": value for key, value in simulator.items()},
        **(extra or {}),
    }


def fast_devices(topic_prefix: str, **overrides: str) -> dict[str, str]:
    """``[simulator]`` settings of a test station: on, under ``topic_prefix``, seeded, with
    devices that take a few hundredths of a second; ``overrides`` change any of them."""
    return {
        "enabled": "true",
        "topic_prefix": topic_prefix,
        "position_seconds": "0.05",
        "tighten_seconds": "0.05",
        "inspect_seconds": "0.1",
        "heartbeat_seconds": "0.2",
        "seed": "1",
        **overrides,
    }
