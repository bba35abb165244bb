"""Topic matching and the dispatcher between bindings and processors (no store)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from gateway.cloudevents import JSON, CloudEvent
from gateway.errors import CloudEventError, ValidationError
from gateway.store import Claim, DoneMarker
from gateway.transport import (
    ERROR_EVENT_TYPE,
    INVALID_REQUEST,
    PROCESSING_FAILED,
    UNKNOWN_TYPE,
    Dispatcher,
    Processor,
    Redelivery,
    Subscription,
    error_event,
    topic_matches,
)

SOURCE = "urn:station-gateway:test"
BINDING = "inproc"
COMMANDS = "gw/station-1/commands"
START = "com.example.start.v1"
CONFIGURE = "com.example.configure.v1"
EXPLODE = "com.example.explode.v1"


# -- topic filters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic_filter", "topic", "matches"),
    [
        ("a/b", "a/b", True),
        ("a/b", "a/c", False),
        ("a/b", "a/b/c", False),
        ("a/b/c", "a/b", False),
        ("a/b", "a/b/", False),
        ("a/b/", "a/b/", True),
        ("a/b", "A/b", False),
        ("a/+", "a/b", True),
        ("a/+", "a/", True),
        ("a/+", "a", False),
        ("a/+", "a/b/c", False),
        ("+", "a", True),
        ("+", "a/b", False),
        ("+/+", "/x", True),
        ("+/b/+", "a/b/c", True),
        ("a/+/c", "a//c", True),
        ("hello/+/commands", "hello/s1/commands", True),
        ("hello/+/commands", "hello/s1/events", False),
        ("a/#", "a", True),
        ("a/#", "a/b", True),
        ("a/#", "a/b/c", True),
        ("a/#", "b/a", False),
        ("+/#", "a", True),
        ("#", "a/b/c", True),
        ("#", "/", True),
        ("$SYS/#", "$SYS/broker/load", True),
        # MQTT 4.7.2: filters starting with a wildcard never match topics starting with "$".
        ("#", "$SYS/broker/load", False),
        ("+/broker/load", "$SYS/broker/load", False),
    ],
)
def test_topic_matches(topic_filter: str, topic: str, matches: bool) -> None:
    assert topic_matches(topic_filter, topic) is matches


# -- dispatcher ------------------------------------------------------------------------------


def command(event_type: str = START, **changes: Any) -> CloudEvent:
    return CloudEvent(type=event_type, source="urn:mes", subject="station-1", **changes).validate()


async def start(event: CloudEvent) -> Sequence[CloudEvent]:
    return [event.reply(source=SOURCE, data={"started": event.data})]


async def configure(event: CloudEvent) -> Sequence[CloudEvent]:
    raise ValidationError("JobOrderID", "is required")


async def explode(event: CloudEvent) -> Sequence[CloudEvent]:
    raise RuntimeError("the handler broke")


class FailureLog:
    """The ``on_failure`` observer: remembers every call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    def __call__(self, *, binding: str, topic: str, code: str, reason: str) -> None:
        self.calls.append({"binding": binding, "topic": topic, "code": code, "reason": reason})

    @property
    def codes(self) -> list[str]:
        return [call["code"] for call in self.calls]


def processor(
    name: str,
    handle: Any,
    event_types: set[str] | None,
    topics: Sequence[str] = ("gw/+/commands",),
    binding: str = BINDING,
) -> Processor:
    return Processor(
        name=name,
        subscriptions=[Subscription(topic) for topic in topics],
        handle=handle,
        event_types=frozenset(event_types) if event_types is not None else None,
        binding=binding,
    )


@pytest.fixture
def failures() -> FailureLog:
    return FailureLog()


@pytest.fixture
def dispatcher(failures: FailureLog) -> Dispatcher:
    return Dispatcher(
        [
            processor("starter", start, {START}),
            processor("configurator", configure, {CONFIGURE}),
            processor("exploder", explode, {EXPLODE}),
            processor("events", start, None, topics=("gw/+/events",)),
            processor("other-binding", start, {"com.example.other.v1"}, binding="mqtt"),
        ],
        source=SOURCE,
        dedupe=None,
        on_failure=failures,
    )


def assert_error_reply(reply: CloudEvent, request: CloudEvent, code: str) -> None:
    assert reply.validate() is reply
    assert reply.errorcode == code
    assert reply.errormessage
    assert reply.type == request.type
    assert reply.source == SOURCE
    assert reply.subject == request.subject
    assert reply.correlationid == (request.correlationid or request.id)
    assert reply.causationid == request.id
    assert reply.datacontenttype == JSON
    assert reply.data["error"] == code


@pytest.mark.anyio
async def test_an_event_is_routed_by_type(dispatcher: Dispatcher, failures: FailureLog) -> None:
    request = command(data={"JobOrderID": "j1"})
    [reply] = await dispatcher.dispatch(request, binding=BINDING, topic=COMMANDS)
    assert reply.data == {"started": {"JobOrderID": "j1"}}
    assert reply.correlationid == request.id
    assert reply.errorcode is None
    assert failures.calls == []


@pytest.mark.anyio
async def test_a_processor_for_all_types_takes_any_type_on_its_topic(
    dispatcher: Dispatcher,
) -> None:
    request = command("com.example.anything.v1", data=1)
    [reply] = await dispatcher.dispatch(request, binding=BINDING, topic="gw/station-1/events")
    assert reply.data == {"started": 1}


@pytest.mark.anyio
async def test_an_unknown_type_gets_an_unknown_type_error_reply(
    dispatcher: Dispatcher, failures: FailureLog
) -> None:
    request = command("com.example.unheard-of.v1", correlationid="conv-1")
    [reply] = await dispatcher.dispatch(request, binding=BINDING, topic=COMMANDS)
    assert_error_reply(reply, request, UNKNOWN_TYPE)
    assert "com.example.unheard-of.v1" in (reply.errormessage or "")
    assert failures.calls == [
        {"binding": BINDING, "topic": COMMANDS, "code": UNKNOWN_TYPE, "reason": reply.errormessage}
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("binding", "topic"),
    [(BINDING, "gw/station-1/other"), ("mqtt", COMMANDS), ("nowhere", COMMANDS)],
    ids=["topic-nobody-subscribed", "processor-of-another-binding", "unknown-binding"],
)
async def test_an_event_no_processor_subscribed_to_is_an_unknown_type(
    dispatcher: Dispatcher, failures: FailureLog, binding: str, topic: str
) -> None:
    request = command(START)
    [reply] = await dispatcher.dispatch(request, binding=binding, topic=topic)
    assert_error_reply(reply, request, UNKNOWN_TYPE)
    assert failures.codes == [UNKNOWN_TYPE]


@pytest.mark.anyio
async def test_a_validation_error_gets_an_invalid_request_reply(
    dispatcher: Dispatcher, failures: FailureLog
) -> None:
    request = command(CONFIGURE)
    [reply] = await dispatcher.dispatch(request, binding=BINDING, topic=COMMANDS)
    assert_error_reply(reply, request, INVALID_REQUEST)
    assert reply.errormessage == "JobOrderID: is required"
    assert failures.codes == [INVALID_REQUEST]
    assert failures.calls[0]["reason"] == "JobOrderID: is required"


@pytest.mark.anyio
async def test_a_cloud_event_error_from_a_handler_is_an_invalid_request(
    failures: FailureLog,
) -> None:
    async def structure_fails(event: CloudEvent) -> Sequence[CloudEvent]:
        raise CloudEventError("data", "missing JobOrderID")

    dispatcher = Dispatcher(
        [processor("strict", structure_fails, {START})],
        source=SOURCE,
        dedupe=None,
        on_failure=failures,
    )
    [reply] = await dispatcher.dispatch(command(), binding=BINDING, topic=COMMANDS)
    assert reply.errorcode == INVALID_REQUEST
    assert failures.codes == [INVALID_REQUEST]


@pytest.mark.anyio
async def test_a_failing_handler_gets_a_processing_failed_reply_and_the_next_event_is_handled(
    dispatcher: Dispatcher, failures: FailureLog
) -> None:
    broken = command(EXPLODE, correlationid="conv-2")
    [reply] = await dispatcher.dispatch(broken, binding=BINDING, topic=COMMANDS)
    assert_error_reply(reply, broken, PROCESSING_FAILED)
    assert reply.errormessage == "RuntimeError: the handler broke"
    assert failures.calls == [
        {
            "binding": BINDING,
            "topic": COMMANDS,
            "code": PROCESSING_FAILED,
            "reason": "the handler broke",
        }
    ]
    following = command(data="next")
    [next_reply] = await dispatcher.dispatch(following, binding=BINDING, topic=COMMANDS)
    assert next_reply.errorcode is None
    assert next_reply.data == {"started": "next"}
    assert dispatcher.in_flight == 0
    assert len(failures.calls) == 1


@pytest.mark.anyio
async def test_a_handler_returning_nonsense_is_a_processing_failure(failures: FailureLog) -> None:
    async def returns_none(event: CloudEvent) -> Any:
        return None

    dispatcher = Dispatcher(
        [processor("sloppy", returns_none, None)], source=SOURCE, dedupe=None, on_failure=failures
    )
    [reply] = await dispatcher.dispatch(command(), binding=BINDING, topic=COMMANDS)
    assert reply.errorcode == PROCESSING_FAILED
    assert failures.codes == [PROCESSING_FAILED]


@pytest.mark.anyio
async def test_a_handler_may_reply_nothing_or_several_events(failures: FailureLog) -> None:
    async def silent(event: CloudEvent) -> Sequence[CloudEvent]:
        return ()

    async def chatty(event: CloudEvent) -> Sequence[CloudEvent]:
        return [event.reply(source=SOURCE, data=index) for index in range(3)]

    dispatcher = Dispatcher(
        [processor("silent", silent, {START}), processor("chatty", chatty, {CONFIGURE})],
        source=SOURCE,
        dedupe=None,
        on_failure=failures,
    )
    assert await dispatcher.dispatch(command(START), binding=BINDING, topic=COMMANDS) == []
    replies = await dispatcher.dispatch(command(CONFIGURE), binding=BINDING, topic=COMMANDS)
    assert [reply.data for reply in replies] == [0, 1, 2]
    assert failures.calls == []


@pytest.mark.anyio
async def test_the_first_matching_processor_wins(failures: FailureLog) -> None:
    async def first(event: CloudEvent) -> Sequence[CloudEvent]:
        return [event.reply(source=SOURCE, data="first")]

    async def second(event: CloudEvent) -> Sequence[CloudEvent]:
        return [event.reply(source=SOURCE, data="second")]

    dispatcher = Dispatcher(
        [processor("first", first, {START}), processor("second", second, None)],
        source=SOURCE,
        dedupe=None,
        on_failure=failures,
    )
    [reply] = await dispatcher.dispatch(command(START), binding=BINDING, topic=COMMANDS)
    assert reply.data == "first"
    [reply] = await dispatcher.dispatch(command(CONFIGURE), binding=BINDING, topic=COMMANDS)
    assert reply.data == "second"


@pytest.mark.anyio
async def test_a_catch_all_registered_first_leaves_its_types_to_a_processor_naming_them(
    failures: FailureLog,
) -> None:
    """Plugin order does not decide: a processor of every type (a driver's) only takes what
    no processor of the event's type on the same topic takes."""

    async def named(event: CloudEvent) -> Sequence[CloudEvent]:
        return [event.reply(source=SOURCE, data="named")]

    async def catch_all(event: CloudEvent) -> Sequence[CloudEvent]:
        return [event.reply(source=SOURCE, data="catch-all")]

    dispatcher = Dispatcher(
        [processor("catch-all", catch_all, None), processor("named", named, {START})],
        source=SOURCE,
        dedupe=None,
        on_failure=failures,
    )
    [reply] = await dispatcher.dispatch(command(START), binding=BINDING, topic=COMMANDS)
    assert reply.data == "named"
    [reply] = await dispatcher.dispatch(command(CONFIGURE), binding=BINDING, topic=COMMANDS)
    assert reply.data == "catch-all"


class ClaimLog:
    """A ``Deduplicator`` that grants every claim and records the events claimed (the real
    one, on Redis, is tested in the store plugin's and the equipment driver's tests)."""

    def __init__(self) -> None:
        self.claimed: list[str] = []
        self.completed: list[str] = []

    async def claim(self, event: CloudEvent) -> Claim:
        self.claimed.append(event.type)
        return Claim()

    async def complete(self, event: CloudEvent, replies: Sequence[CloudEvent]) -> None:
        self.completed.append(event.type)

    async def release(self, event: CloudEvent) -> None:
        raise AssertionError("nothing fails here")

    def done(self, event: CloudEvent, replies: Sequence[CloudEvent]) -> DoneMarker:
        return DoneMarker(event.id, "done", 60)

    def committed(self, marker: DoneMarker) -> None:
        raise AssertionError("no handler here commits a marker")


@pytest.mark.anyio
async def test_idempotent_processors_and_event_types_are_not_claimed(
    failures: FailureLog,
) -> None:
    """A processor declares how a second delivery is handled, for all its types or for some:
    only what must be replayed costs a claim and a marker."""
    query = "com.example.query.v1"
    beat = "com.example.heartbeat.v1"
    commands = Processor(
        name="commands",
        subscriptions=[Subscription("gw/+/commands")],
        handle=start,
        event_types=frozenset({START, query}),
        idempotent_types=frozenset({query}),
    )
    beats = Processor(
        name="beats",
        subscriptions=[Subscription("gw/+/heartbeat")],
        handle=start,
        redelivery=Redelivery.IDEMPOTENT,
    )
    log = ClaimLog()
    dispatcher = Dispatcher([commands, beats], source=SOURCE, dedupe=log, on_failure=failures)
    await dispatcher.dispatch(command(), binding="mqtt", topic=COMMANDS)
    await dispatcher.dispatch(command(query), binding="mqtt", topic=COMMANDS)
    await dispatcher.dispatch(command(beat), binding="mqtt", topic="gw/station-1/heartbeat")
    assert log.claimed == log.completed == [START]
    assert commands.redelivery_of(query) is Redelivery.IDEMPOTENT
    assert commands.redelivery_of(START) is Redelivery.REPLAY


def test_processors_are_listed_by_binding_and_topic(dispatcher: Dispatcher) -> None:
    assert [p.name for p in dispatcher.processors_for("mqtt")] == ["other-binding"]
    assert [p.name for p in dispatcher.matching(BINDING, COMMANDS)] == [
        "starter",
        "configurator",
        "exploder",
    ]
    assert dispatcher.matching(BINDING, "elsewhere") == []


# -- in-flight work --------------------------------------------------------------------------


class Gate:
    """A handler that blocks until released, so tests can hold work in flight."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.entered = 0
        self.all_entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, event: CloudEvent) -> Sequence[CloudEvent]:
        self.entered += 1
        if self.entered == self.expected:
            self.all_entered.set()
        await self.release.wait()
        return [event.reply(source=SOURCE, data="done")]

    async def wait_entered(self) -> None:
        with anyio.fail_after(5):
            await self.all_entered.wait()


@pytest.mark.anyio
async def test_wait_idle_waits_for_in_flight_handlers(failures: FailureLog) -> None:
    gate = Gate(expected=2)
    dispatcher = Dispatcher(
        [processor("gate", gate, None)], source=SOURCE, dedupe=None, on_failure=failures
    )
    await dispatcher.wait_idle()  # idle from the start
    replies: list[CloudEvent] = []
    idle_reached = anyio.Event()

    async def handle_one() -> None:
        replies.extend(await dispatcher.dispatch(command(), binding=BINDING, topic=COMMANDS))

    async def wait_for_idle() -> None:
        await dispatcher.wait_idle()
        idle_reached.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(handle_one)
        tasks.start_soon(handle_one)
        await gate.wait_entered()
        assert dispatcher.in_flight == 2
        tasks.start_soon(wait_for_idle)
        await anyio.sleep(0.05)
        assert not idle_reached.is_set()
        gate.release.set()
        with anyio.fail_after(5):
            await idle_reached.wait()
        assert dispatcher.in_flight == 0
        assert len(replies) == 2


@pytest.mark.anyio
async def test_a_cancelled_handler_is_no_longer_in_flight(failures: FailureLog) -> None:
    gate = Gate(expected=1)
    dispatcher = Dispatcher(
        [processor("gate", gate, None)], source=SOURCE, dedupe=None, on_failure=failures
    )

    async def handle_one() -> None:
        await dispatcher.dispatch(command(), binding=BINDING, topic=COMMANDS)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(handle_one)
        await gate.wait_entered()
        assert dispatcher.in_flight == 1
        tasks.cancel_scope.cancel()
    assert dispatcher.in_flight == 0
    with anyio.fail_after(1):
        await dispatcher.wait_idle()
    assert failures.calls == []


# -- error events for messages too broken to have a type -------------------------------------


def test_error_event_salvages_what_it_can() -> None:
    reply = error_event(
        source=SOURCE,
        code=INVALID_REQUEST,
        message="bad JSON",
        request_type=START,
        correlationid="conv-5",
        subject="station-1",
    )
    assert reply.validate() is reply
    assert (reply.type, reply.subject, reply.correlationid) == (START, "station-1", "conv-5")
    assert reply.causationid is None
    assert reply.errorcode == INVALID_REQUEST
    assert reply.errormessage == "bad JSON"


@pytest.mark.parametrize(
    ("request_type", "subject"),
    [(None, None), ("", ""), ("t" * 300, "s" * 300), (17, 18)],
    ids=["missing", "empty", "too-long", "not-text"],
)
def test_error_event_falls_back_to_the_error_type(request_type: Any, subject: Any) -> None:
    reply = error_event(
        source=SOURCE,
        code=INVALID_REQUEST,
        message="x",
        request_type=request_type,
        subject=subject,
    )
    assert reply.validate() is reply
    assert reply.type == ERROR_EVENT_TYPE
    assert reply.subject is None
