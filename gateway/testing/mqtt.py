"""The MQTT client tests play the MES or equipment with (``gateway.mqttclient``, public now).

Kept under its test names so tests and third-party plugins' tests keep working.
"""

from gateway.mqttclient import CloudEventClient as MqttTestClient
from gateway.mqttclient import connect_client as connect_test_client

__all__ = ["MqttTestClient", "connect_test_client"]
