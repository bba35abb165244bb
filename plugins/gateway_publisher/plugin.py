"""Hook implementations of the gateway_publisher plugin (none yet)."""
