"""Hook implementations of the MQTT binding plugin."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core import CoreSettings
from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.transport import Binding
from gateway_mqtt.binding import MqttBinding
from gateway_mqtt.settings import MqttSettings


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("mqtt", MqttSettings)


@hookimpl
def gateway_register_bindings(register: Callable[[Binding], None], settings: Settings) -> None:
    core = settings.get(CoreSettings)
    register(
        MqttBinding(
            settings.get(MqttSettings),
            instance_id=core.effective_instance_id,
            source=core.effective_source,
        )
    )
