"""Simulated station equipment (positioning unit, tightening controller, camera QA station)
speaking real MQTT, for the demo, for trying recipes and for the tests."""
