"""gateway_msgpack_rpc plugin (being written)."""
