"""gateway_simulator plugin (being written)."""
