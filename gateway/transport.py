"""Bindings, processors and the dispatcher between them.

A *binding* moves CloudEvents over one transport (MQTT, MessagePack-RPC, in-process). A
*processor* handles the events that arrive on its subscriptions and returns reply events. The
*dispatcher* sits between the two and is the same for every transport: it picks the processor by
event type, de-duplicates redeliveries through the store, turns a failing handler into an error
reply, and reports failures to the ``gateway_message_failed`` observers.

A handler failure that may pass (``gateway.resilience.is_transient``: the store unreachable, a
timeout) is no error reply: ``dispatch`` raises it, and the binding keeps the message
unacknowledged and tries it again until it succeeds or the instance stops. Only a permanently
failing message gets a ``processing-failed`` reply and is acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import anyio
from anyio.abc import TaskStatus

from gateway.cloudevents import CloudEvent
from gateway.errors import GatewayError, NotPermitted, ValidationError
from gateway.logs import log_context
from gateway.metrics import Metrics
from gateway.peers import LogOnce
from gateway.resilience import Resilience, describe, is_transient

if TYPE_CHECKING:
    from gateway.app import Gateway
    from gateway.store import Claim, Deduplicator

log = logging.getLogger(__name__)

Handler = Callable[[CloudEvent], Awaitable[Sequence[CloudEvent]]]
"""Receives one validated event, returns the replies (possibly none)."""

MQTT_BINDING: Final = "mqtt"
"""The name of the MQTT v5 binding to the MES (the ``mqtt`` plugin's): processors default to
it, and plugins that talk to the MES name it through this constant."""

# Error codes carried in the ``errorcode`` attribute of error replies.
INVALID_REQUEST = "invalid-request"
UNKNOWN_TYPE = "unknown-type"
PROCESSING_FAILED = "processing-failed"
NOT_PERMITTED = "not-permitted"  # the sender may not send this (``gateway.errors.NotPermitted``)
# Type of an error reply to a message too malformed to have a usable type of its own.
ERROR_EVENT_TYPE = "io.github.station-gateway.error.v1"

# The (binding, topic, type) -> processor decisions the dispatcher keeps: the topics and types
# of a station's traffic (one reply topic per equipment), with room; more start it afresh.
HANDLERS_KEPT = 4096


_arrival: ContextVar[str | None] = ContextVar("gateway_arrival_topic", default=None)


def arrival_topic() -> str:
    """The topic the event a handler is handling arrived on (call it inside a handler).

    Where a transport authenticates senders per topic (an MQTT broker's ACL lets equipment
    publish only under its own name, the MessagePack-RPC binding names the connection's
    equipment in the topic), the topic says who sent the event, whatever the event claims.
    """
    topic = _arrival.get()
    if topic is None:
        raise GatewayError("arrival_topic() is only known while a processor handles an event")
    return topic


def error_event(
    *,
    source: str,
    code: str,
    message: str,
    request_type: str | None = None,
    correlationid: str | None = None,
    subject: str | None = None,
) -> CloudEvent:
    """An error reply built from what could be salvaged of a message that failed validation."""
    usable_type = (
        request_type if isinstance(request_type, str) and 0 < len(request_type) < 256 else None
    )
    usable_subject = subject if isinstance(subject, str) and 0 < len(subject) < 256 else None
    request = CloudEvent(
        type=usable_type or ERROR_EVENT_TYPE,
        source=source,
        subject=usable_subject,
        correlationid=correlationid,
    )
    return request.error_reply(source=source, code=code, message=message).replace(causationid=None)


@dataclass(frozen=True)
class Subscription:
    """A topic filter a processor listens on; ``shared`` spreads it over all instances.

    ``lane``: a binding that can serve each lane on a connection of its own, with its own
    budget of messages in flight, so a flood on one lane (equipment replies while the engine is
    busy) does not hold up another (MES calls, ``MES_LANE``). ``""``: the binding's main lane.

    ``reply_to``: where replies to its messages (and error replies to malformed ones) may go.
    A binding whose requests name their reply address (MQTT v5 Response Topic) sends a reply
    only to an address under one of these prefixes, and drops it otherwise (counted, logged
    once per sender): whoever may publish on the topic must not make the gateway publish, with
    its own permissions, on another peer's topics. ``()``: never reply (equipment's replies and
    events answer nothing); ``None``: anywhere (a processor that says nothing).
    """

    topic: str
    shared: bool = True
    qos: int = 1
    lane: str = ""
    reply_to: tuple[str, ...] | None = None


def reply_allowed(subscriptions: Iterable[Subscription], topic: str, reply_topic: str) -> bool:
    """Whether a reply to a message on ``topic`` may go to ``reply_topic``: under a prefix of
    every subscription matching ``topic`` that restricts its replies (``Subscription.reply_to``).
    """
    restricted = False
    prefixes: set[str] = set()
    for subscription in subscriptions:
        if subscription.reply_to is None or not topic_matches(subscription.topic, topic):
            continue
        restricted = True
        prefixes.update(subscription.reply_to)
    if not restricted:
        return True
    if "+" in reply_topic or "#" in reply_topic:
        return False
    return any(reply_topic == prefix or reply_topic.startswith(prefix + "/") for prefix in prefixes)


MES_LANE = "mes"  # job management's calls from the MES: answered while equipment floods in


class Redelivery(Enum):
    """What the dispatcher does about an event that may come again (same ``source`` + ``id``:
    a broker's redelivery, a sender's retry)."""

    REPLAY = "replay"
    """Claim the event in the store before handling it: a second delivery gets the replies
    of the first, the handler runs once. Costs two store calls and a marker kept for
    ``redis.dedupe_ttl_seconds`` (a day) per event: for commands with effects (the MES's)."""

    IDEMPOTENT = "idempotent"
    """Handling the event twice does no harm (a heartbeat, a query, an equipment reply the
    engine checks against the attempt it answers): no claim, nothing kept. Repeated messages
    (a heartbeat a second per device) must be this, or the markers fill the store."""


@dataclass(frozen=True)
class Processor:
    """Handles the events of ``event_types`` (all types when ``None``: a catch-all, which only
    takes the events no processor of their type on the same topic takes) on its subscriptions."""

    name: str
    subscriptions: Sequence[Subscription]
    handle: Handler
    event_types: frozenset[str] | None = None
    binding: str = MQTT_BINDING
    # The ``gateway.role`` values it serves in (``*``: every role; role ``all`` runs all).
    roles: frozenset[str] = frozenset({"gateway"})
    # What a second delivery of an event does: replayed from the store (the default), or
    # handled again when the handler is idempotent by itself (``Redelivery``).
    redelivery: Redelivery = Redelivery.REPLAY
    # Event types handled idempotently whatever ``redelivery`` says (a processor of commands
    # that also answers queries, which read and change nothing).
    idempotent_types: frozenset[str] = frozenset()
    # Events handled idempotently whatever ``redelivery`` says, told apart by more than their
    # type (a processor of equipment messages whose replies, with a ``correlationid``, the
    # engine checks against the try they answer, and whose events it does not).
    idempotent_when: Callable[[CloudEvent], bool] | None = None
    # Checked before anything is stored for an event (its de-duplication claim): raises
    # ``ValidationError`` or ``NotPermitted`` to refuse it, so input that must make nothing
    # (a scope equipment names that does not exist) leaves no key behind.
    admit: Callable[[CloudEvent], Awaitable[None]] | None = None

    def accepts(self, event_type: str) -> bool:
        return self.event_types is None or event_type in self.event_types

    def redelivery_of(self, event_type: str) -> Redelivery:
        """How a second delivery of an event of ``event_type`` is handled."""
        if event_type in self.idempotent_types:
            return Redelivery.IDEMPOTENT
        return self.redelivery

    def redelivery_for(self, event: CloudEvent) -> Redelivery:
        """How a second delivery of ``event`` is handled (its type, then ``idempotent_when``)."""
        if self.idempotent_when is not None and self.idempotent_when(event):
            return Redelivery.IDEMPOTENT
        return self.redelivery_of(event.type)


class Binding(Protocol):
    """A transport. ``run`` serves the processors registered for it until the gateway stops."""

    name: str

    @property
    def ready(self) -> bool:
        """Connected and serving (readiness probes ask)."""
        ...

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        """Connect, subscribe, call ``task_status.started()``, then serve.

        When ``gateway.closing`` is set (after the services stopped), stop taking new messages,
        let in-flight handlers finish and their replies go out, disconnect cleanly and return.
        """
        ...

    async def publish(
        self,
        topic: str,
        event: CloudEvent,
        *,
        retain: bool = False,
        qos: int = 1,
        response_topic: str | None = None,
    ) -> None:
        """Send one event to ``topic`` (``response_topic``: where its replies should go)."""
        ...

    async def request(self, topic: str, event: CloudEvent, *, timeout: float) -> CloudEvent:
        """Send a command and wait for its reply on this instance's reply address."""
        ...


class Service(Protocol):
    """A long-running task a plugin contributes (a publisher, an engine, a scanner).

    ``roles``: the ``gateway.role`` values it runs in (``*``: every role); all services run
    with the role ``all``. Services start after the bindings, except those that set an
    attribute ``before_bindings = True`` (``EarlyService``): health endpoints, which must
    answer while a broker is still being reached.
    """

    name: str
    roles: frozenset[str]

    async def run(self, gateway: Gateway, *, task_status: TaskStatus[None]) -> None:
        """Start, call ``task_status.started()``, work until ``gateway.stopping`` is set."""
        ...


@runtime_checkable
class EarlyService(Protocol):
    """A ``Service`` that may start before the bindings (optional member of ``Service``)."""

    before_bindings: bool


def starts_before_bindings(service: Service) -> bool:
    """Whether ``service`` asks to start before the bindings (``EarlyService``)."""
    return isinstance(service, EarlyService) and service.before_bindings


def topic_matches(topic_filter: str, topic: str) -> bool:
    """MQTT topic filter matching (``+`` one level, ``#`` the rest)."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False  # MQTT 4.7.2-1: wildcards never match $-topics such as $SYS
    filter_levels = topic_filter.split("/")
    topic_levels = topic.split("/")
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True
        if index >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[index]:
            return False
    return len(filter_levels) == len(topic_levels)


class Observer(Protocol):
    def __call__(self, *, binding: str, topic: str, code: str, reason: str) -> Any: ...


class Dispatcher:
    """Routes one incoming event to its processor and returns the replies to send back."""

    def __init__(
        self,
        processors: Sequence[Processor],
        *,
        source: str,
        dedupe: Deduplicator | None,
        on_failure: Observer,
        metrics: Metrics | None = None,
        resilience: Resilience | None = None,
    ) -> None:
        self._processors = list(processors)
        self._handlers: dict[tuple[str, str, str], Processor | None] = {}  # see ``handler``
        self._resilience = resilience
        self.source = source
        self._dedupe = dedupe
        self._on_failure = on_failure
        metrics = metrics or Metrics()
        self._handled = metrics.counter(
            "messages_total", "Messages handled, by binding and outcome", ["binding", "outcome"]
        )
        self._failed = metrics.counter(
            "messages_failed_total",
            "Messages rejected, by binding and error code",
            ["binding", "code"],
        )
        self._seconds = metrics.histogram(
            "message_seconds",
            "Time from a message's dispatch to its replies (de-duplication included), by "
            "binding and processor",
            ["binding", "processor"],
        )
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._rejections = LogOnce(log)  # by binding, topic and code
        self._failures = LogOnce(log, level=logging.ERROR)  # by processor and error type

    def processors_for(self, binding: str) -> list[Processor]:
        return [processor for processor in self._processors if processor.binding == binding]

    def matching(self, binding: str, topic: str) -> list[Processor]:
        return [
            processor
            for processor in self.processors_for(binding)
            if any(topic_matches(sub.topic, topic) for sub in processor.subscriptions)
        ]

    def reject(self, *, binding: str, topic: str, code: str, error: Exception | str) -> None:
        """Log and count a message that could not be processed."""
        reason = str(error)
        self._failed.labels(binding, code).inc()
        # The same bad input again and again from one topic (one sender) is said once a minute.
        self._rejections.report(
            f"{binding} {topic} {code}",
            "rejected message on %s %s: %s: %s",
            binding,
            topic,
            code,
            reason,
        )
        self._on_failure(binding=binding, topic=topic, code=code, reason=reason)

    async def dispatch(self, event: CloudEvent, *, binding: str, topic: str) -> list[CloudEvent]:
        """Handle ``event`` (already validated) that arrived on ``topic``; return replies.

        Raises the failure when handling it failed transiently (``is_transient``): the caller
        must not acknowledge the message, and should dispatch it again later.
        """
        self._enter()
        try:
            context = log_context(
                scope=event.subject, correlationid=event.correlationid or event.id, topic=topic
            )
            arrival = _arrival.set(topic)
            try:
                with context:
                    replies = await self._dispatch(event, binding=binding, topic=topic)
            finally:
                _arrival.reset(arrival)
            outcome = next((r.errorcode for r in replies if r.errorcode), "ok")
            self._handled.labels(binding, outcome).inc()
            return replies
        finally:
            self._leave()

    def handler(self, binding: str, topic: str, event_type: str) -> Processor | None:
        """The processor for an event of ``event_type`` on ``topic``: one that names the type
        before one that takes every type, so a catch-all never shadows a processor of
        particular types, whatever order the plugins registered them in.

        Decided once per binding, topic and type (the processors never change): matching
        every subscription's filter again cost each message more than its dispatch."""
        key = (binding, topic, event_type)
        try:
            return self._handlers[key]
        except KeyError:
            pass
        accepting = [p for p in self.matching(binding, topic) if p.accepts(event_type)]
        found = min(accepting, key=lambda processor: processor.event_types is None, default=None)
        if len(self._handlers) >= HANDLERS_KEPT:  # topics and types come from outside
            self._handlers.clear()
        self._handlers[key] = found
        return found

    async def _dispatch(self, event: CloudEvent, *, binding: str, topic: str) -> list[CloudEvent]:
        processor = self.handler(binding, topic, event.type)
        if processor is None:
            message = f"no processor handles type {event.type!r} on {topic!r}"
            self.reject(binding=binding, topic=topic, code=UNKNOWN_TYPE, error=message)
            return [event.error_reply(source=self.source, code=UNKNOWN_TYPE, message=message)]
        started = time.perf_counter()
        if processor.admit is not None:
            try:
                await processor.admit(event)
            except (ValidationError, NotPermitted) as error:
                code = NOT_PERMITTED if isinstance(error, NotPermitted) else INVALID_REQUEST
                self.reject(binding=binding, topic=topic, code=code, error=error)
                return [event.error_reply(source=self.source, code=code, message=str(error))]
        replay = processor.redelivery_for(event) is Redelivery.REPLAY
        dedupe = self._dedupe if replay else None
        if dedupe is not None:
            claim = await self._claim(dedupe, event)
            if claim.duplicate:
                log.info(
                    "duplicate event %s from %s: replaying %d replies",
                    event.id,
                    event.source,
                    len(claim.replies),
                )
                return list(claim.replies)
        try:
            replies = list(await processor.handle(event))
        except ValidationError as error:
            self.reject(binding=binding, topic=topic, code=INVALID_REQUEST, error=error)
            replies = [
                event.error_reply(source=self.source, code=INVALID_REQUEST, message=str(error))
            ]
        except NotPermitted as error:
            self.reject(binding=binding, topic=topic, code=NOT_PERMITTED, error=error)
            replies = [
                event.error_reply(source=self.source, code=NOT_PERMITTED, message=str(error))
            ]
        except Exception as error:
            if dedupe is not None:
                # Not processed: a redelivery (or the sender's retry) must get a fresh attempt.
                await self._release(dedupe, event)
            if is_transient(error):
                log.info(
                    "processor %s could not handle event %s yet (%s); it is tried again",
                    processor.name,
                    event.id,
                    describe(error),
                )
                raise
            self._failures.report(
                f"{processor.name} {type(error).__name__}",
                "processor %s failed on event %s (%s)",
                processor.name,
                event.id,
                event.type,
                exc_info=True,
            )
            self.reject(binding=binding, topic=topic, code=PROCESSING_FAILED, error=error)
            message = f"{type(error).__name__}: {error}"
            return [event.error_reply(source=self.source, code=PROCESSING_FAILED, message=message)]
        if dedupe is not None:
            await self._complete(dedupe, event, replies)
        seconds = time.perf_counter() - started
        self._seconds.labels(binding, processor.name).observe(seconds)
        log.debug("processor %s handled %s in %.1f ms", processor.name, event.type, seconds * 1000)
        return replies

    async def _complete(
        self, dedupe: Deduplicator, event: CloudEvent, replies: Sequence[CloudEvent]
    ) -> None:
        """Mark ``event`` done; its effect is stored, so a store outage here is waited out
        rather than running the handler a second time."""
        if self._resilience is None:
            await dedupe.complete(event, replies)
            return
        await self._resilience.retry("dedupe", lambda: dedupe.complete(event, replies), logger=log)

    async def _release(self, dedupe: Deduplicator, event: CloudEvent) -> None:
        """Give the claim back, so the next try (or a redelivery) processes the event at once
        rather than after the claim's lease; a store outage here is waited out."""
        if self._resilience is None:
            await dedupe.release(event)
            return
        await self._resilience.retry("dedupe", lambda: dedupe.release(event), logger=log)

    @staticmethod
    async def _claim(dedupe: Deduplicator, event: CloudEvent) -> Claim:
        """Claim ``event``, waiting while another handler holds it.

        The holder either completes (we replay its replies) or fails / dies, and then its
        lease ends and we process the event ourselves: a redelivery is never dropped.
        """
        claim = await dedupe.claim(event)
        delay = 0.05
        if claim.busy:
            log.info("event %s from %s is being handled elsewhere; waiting", event.id, event.source)
        while claim.busy:
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)
            claim = await dedupe.claim(event)
        return claim

    def _enter(self) -> None:
        if self._in_flight == 0:
            self._idle = anyio.Event()
        self._in_flight += 1

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def wait_idle(self) -> None:
        """Return once no handler is running (used by graceful shutdown)."""
        while self._in_flight:
            await self._idle.wait()
