"""Hook implementations of the gateway_simulator plugin (none yet)."""
