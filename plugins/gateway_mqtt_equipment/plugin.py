"""Hook implementations of the gateway_mqtt_equipment plugin (none yet)."""
