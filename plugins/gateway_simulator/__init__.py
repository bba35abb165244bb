"""Simulated station equipment (positioning unit, tightening controller, camera QA station)
speaking real MQTT or MessagePack-RPC, for the demo, for trying recipes and for the tests."""
