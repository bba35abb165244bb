"""gateway_publisher plugin (being written)."""
