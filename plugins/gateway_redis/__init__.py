"""The default store/coordination backend: Redis (or an embedded redis-server), no modules.

State documents are JSON strings; each write to a scope commits atomically with a record on the
scope's change stream; incoming CloudEvents are de-duplicated with a lease-then-done marker.
"""

from gateway_redis.settings import RedisSettings
from gateway_redis.store import RedisScopeTransaction, RedisStore

__all__ = ["RedisScopeTransaction", "RedisSettings", "RedisStore"]
