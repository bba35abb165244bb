"""gateway_mqtt_equipment plugin (being written)."""
