"""Hook implementations of the gateway_msgpack_rpc plugin (none yet)."""
