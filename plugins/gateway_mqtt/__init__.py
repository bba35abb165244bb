"""MQTT v5 binding (aiomqtt): CloudEvents in binary mode, shared subscriptions, sessions."""

from gateway_mqtt.settings import MqttSettings

__all__ = ["MqttSettings"]
