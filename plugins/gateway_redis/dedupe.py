"""CloudEvent de-duplication by (source, id), with a lease while the event is handled.

One key per event: ``{prefix}:{<scope>}:dedupe:<sha256(source NUL id)>`` holding a JSON marker,
either ``{"state": "busy", "owner": <store token>}`` (a short lease: a crashed handler's claim
runs out and the redelivery is processed) or ``{"state": "done", "replies": [...]}`` (kept for
``dedupe_ttl_seconds``: a redelivery is answered with the same replies, not processed again).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gateway.cloudevents import CloudEvent
from gateway.errors import CloudEventError, GatewayError, ValidationError
from gateway.store import Claim, DoneMarker, KeySchema, check_scope
from gateway_redis.events import event_from_json, event_to_json
from gateway_redis.jsondoc import dumps, loads

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

log = logging.getLogger(__name__)

_COMMITTED_KEPT = 1024  # markers committed and not yet completed: handlers in flight

# Claim, or read what holds the claim, in one round trip. KEYS[1] marker; ARGV[1] busy marker,
# ARGV[2] lease seconds. Returns nil when claimed, else the current marker.
CLAIM = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return false
end
return redis.call('GET', KEYS[1])
"""

# Delete the marker only while it is our own busy claim: never a "done" marker, never a claim
# another instance took after our lease ran out. KEYS[1] marker; ARGV[1] owner token.
RELEASE = """
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local ok, marker = pcall(cjson.decode, current)
if ok and type(marker) == 'table' and marker.state == 'busy' and marker.owner == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisDeduplicator:
    """``gateway.store.Deduplicator`` on Redis; usable once its store is entered."""

    def __init__(self, keys: KeySchema, *, lease_seconds: int, ttl_seconds: int) -> None:
        self._keys = keys
        self._lease_seconds = lease_seconds
        self._ttl_seconds = ttl_seconds
        self.owner = uuid.uuid4().hex  # tells this store's claims from other instances'
        self._busy = dumps({"state": "busy", "owner": self.owner})
        self._client: Redis | None = None
        # Markers written with a handler's own commit, until ``complete`` (or ``release``)
        # hears of them; bounded, for a handler that never gets that far (cancelled).
        self._committed: OrderedDict[str, str] = OrderedDict()
        self._claim: AsyncScript | None = None
        self._release: AsyncScript | None = None

    def attach(self, client: Redis) -> None:
        """Called by the store once it is connected."""
        self._client = client
        self._claim = client.register_script(CLAIM)
        self._release = client.register_script(RELEASE)

    def detach(self) -> None:
        self._client = self._claim = self._release = None

    def key(self, event: CloudEvent) -> str:
        """The marker key: in the event's scope (its subject) when that is a valid scope."""
        digest = hashlib.sha256(f"{event.source}\0{event.id}".encode()).hexdigest()
        return self._keys.dedupe(_scope_of(event), digest)

    async def claim(self, event: CloudEvent) -> Claim:
        if self._claim is None:
            raise _not_attached()
        current = await self._claim(keys=[self.key(event)], args=[self._busy, self._lease_seconds])
        if current is None:
            return Claim()
        marker = _marker(current)
        if marker.get("state") != "done":
            return Claim(busy=True)
        return Claim(duplicate=True, replies=_replies(marker, event))

    async def complete(self, event: CloudEvent, replies: Sequence[CloudEvent]) -> None:
        if self._client is None:
            raise _not_attached()
        marker = self.done(event, replies)
        if self._committed.pop(marker.key, None) == marker.text:
            return  # written with the handler's own commit
        await self._client.set(marker.key, marker.text, ex=marker.ttl_seconds)

    async def release(self, event: CloudEvent) -> None:
        if self._release is None:
            raise _not_attached()
        key = self.key(event)
        self._committed.pop(key, None)  # a "done" marker stays: the script keeps it
        await self._release(keys=[key], args=[self.owner])

    def done(self, event: CloudEvent, replies: Sequence[CloudEvent]) -> DoneMarker:
        return DoneMarker(self.key(event), self._done(event, replies), self._ttl_seconds)

    def committed(self, marker: DoneMarker) -> None:
        self._committed[marker.key] = marker.text
        while len(self._committed) > _COMMITTED_KEPT:
            self._committed.popitem(last=False)

    def _done(self, event: CloudEvent, replies: Sequence[CloudEvent]) -> str:
        try:
            return dumps({"state": "done", "replies": [event_to_json(r) for r in replies]})
        except (TypeError, ValueError) as error:
            # The event was processed: it must still be marked done, or a redelivery would run
            # it twice. Only the replay of its replies is lost.
            log.warning(
                "replies to event %s from %s cannot be kept as JSON (%s); "
                "a redelivery will get no reply",
                event.id,
                event.source,
                error,
            )
            return dumps({"state": "done", "replies": []})


def _scope_of(event: CloudEvent) -> str | None:
    """The event's scope for the marker's hash tag; ``None`` (global) when it names none."""
    if event.subject is None:
        return None
    try:
        return check_scope(event.subject)
    except ValidationError:
        return None


def _marker(text: str) -> dict[str, Any]:
    try:
        marker = loads(text)
    except ValueError:
        marker = None
    return marker if isinstance(marker, dict) else {}


def _replies(marker: dict[str, Any], event: CloudEvent) -> tuple[CloudEvent, ...]:
    try:
        return tuple(event_from_json(reply) for reply in marker.get("replies") or ())
    except (CloudEventError, TypeError, ValueError, AttributeError) as error:
        log.warning("stored replies to event %s are unreadable (%s)", event.id, error)
        return ()


def _not_attached() -> GatewayError:
    return GatewayError("the Redis store is not entered (use 'async with store')")
