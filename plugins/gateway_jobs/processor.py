"""The MES's commands: OPC 40001-3 method calls and station configuration, as CloudEvents.

Subscribed on ``{prefix}/+/commands`` (shared across instances); the scope is the CloudEvent
``subject``. A call carries the method's input arguments, the reply its output arguments with
the same CloudEvent type: ``{ReturnStatus}``, plus ``JobResponse`` / ``JobResponses`` for the
two queries. When the status is not NO_ERROR the reply's ``errormessage`` attribute says which
check failed and why. A payload of the wrong shape or types raises ``ValidationError``: the
dispatcher answers ``invalid-request`` naming the field, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.cloudevents import CloudEvent, mqtt_safe_text
from gateway.errors import ValidationError
from gateway.jobmethods import JobMethod, MethodResult
from gateway.logs import log_context
from gateway.store import check_scope
from gateway.topics import ANY, MesTopics
from gateway.transport import MES_LANE, MQTT_BINDING, Processor, Subscription
from gateway_jobs.breakpoints import (
    BREAKPOINT_METHOD,
    BREAKPOINT_TYPE,
    breakpoint_arguments,
    set_breakpoint,
)
from gateway_jobs.config import (
    ACKNOWLEDGEMENT,
    CONFIG_KINDS,
    PUT,
    acknowledgement_request,
    config_type,
)
from gateway_jobs.control import JobsControl
from gateway_jobs.editing import EDIT_METHOD, EDIT_TYPE, edit_arguments, edit_steps, traced
from gateway_jobs.events import Cause, method_type
from gateway_jobs.jobs import JobManager
from gateway_jobs.methods import JobsMethods
from gateway_jobs.model import MethodReply, Outcome, ReturnStatus, to_json
from gateway_jobs.repository import marked
from gateway_jobs.roles import MES_ROLES

METHOD_TYPES = {method_type(method): method for method in JobMethod if not method.is_query}
QUERY_TYPES = {method_type(method): method for method in JobMethod if method.is_query}
_CALL_TYPES = METHOD_TYPES | QUERY_TYPES
CONFIG_TYPES = {config_type(kind): kind for kind in CONFIG_KINDS}
_MAX_MESSAGE = 4096  # CloudEvent attribute limit of the host


class JobsProcessor:
    """Turns one command event into a call of the job methods (or the configuration) and one
    reply; the job methods are the ones every other northbound protocol calls too."""

    def __init__(
        self,
        manager: JobManager,
        methods: JobsMethods,
        *,
        source: str,
        count: Callable[[str, str], None] = lambda method, status: None,
    ) -> None:
        self.manager = manager
        self.methods = methods
        self.source = source
        self.count = count  # (config kind, ReturnStatus name): for metrics

    def processor(self, topic_prefix: str, reply_to: tuple[str, ...] | None = None) -> Processor:
        """The processor of the MES's commands; ``reply_to``: where replies may go."""
        return Processor(
            name="jobs",
            subscriptions=[
                Subscription(
                    MesTopics(topic_prefix).commands(ANY), lane=MES_LANE, reply_to=reply_to
                )
            ],
            handle=self.handle,
            event_types=frozenset({*_CALL_TYPES, *CONFIG_TYPES, BREAKPOINT_TYPE, EDIT_TYPE}),
            binding=MQTT_BINDING,
            roles=MES_ROLES,
            # A query read again is answered afresh: no marker (with the whole Job Response
            # in it) kept a day for each of the MES's reads.
            idempotent_types=frozenset(QUERY_TYPES),
        )

    async def handle(self, event: CloudEvent) -> list[CloudEvent]:
        with log_context(job=_job_order_id(event.data)):  # every line about it names the job
            return await self._handle(event)

    async def _handle(self, event: CloudEvent) -> list[CloudEvent]:
        if event.subject is None:
            raise ValidationError("subject", "is required: it names the station scope")
        scope = check_scope(event.subject)
        if event.type in METHOD_TYPES:
            return await self._method(scope, event)
        if event.type in QUERY_TYPES:
            result = await self._call(scope, event)
            return [self._reply(event, result.output, result.message)]
        if event.type == BREAKPOINT_TYPE:
            return [await self._breakpoint(scope, event)]
        if event.type == EDIT_TYPE:
            return [await self._edit(scope, event)]
        kind = CONFIG_TYPES[event.type]
        if kind == ACKNOWLEDGEMENT:
            outcome = await self._acknowledge(scope, event)
        else:
            outcome = await self.manager.configure(scope, kind, event.method or PUT, event.data)
        self.count(f"config.{kind}", outcome.status.name)
        return [self._reply(event, MethodReply(outcome.status), outcome.message)]

    async def _call(self, scope: str, event: CloudEvent) -> MethodResult:
        return await self.methods.call(
            scope,
            _CALL_TYPES[event.type],
            event.data,
            correlationid=event.correlationid or event.id,
            causationid=event.id,
            requested_by=f"MES {event.source}",
        )

    async def _method(self, scope: str, event: CloudEvent) -> list[CloudEvent]:
        """A method call. Its success reply is made first, so that the change it makes commits
        the de-duplication marker holding that reply (``repository.marked``): one commit for
        both. A refused call commits nothing, and the transport marks it done as usual."""
        success = self._reply(event, to_json(MethodReply(ReturnStatus.NO_ERROR)))
        dedupe = self.manager.repository.store.dedupe
        with marked(scope, dedupe.done(event, [success])) as pending:
            result = await self._call(scope, event)
        if pending.written and result.output == success.data and not result.message:
            dedupe.committed(pending.marker)
            return [success]
        return [self._reply(event, result.output, result.message)]

    async def _breakpoint(self, scope: str, event: CloudEvent) -> CloudEvent:
        step, job, work_master, enabled = breakpoint_arguments(event.data)
        outcome = await set_breakpoint(
            self.manager, scope, step, job_order_id=job, work_master_id=work_master, enabled=enabled
        )
        self.manager.method_called(
            scope, job, BREAKPOINT_METHOD, outcome, requested_by=f"MES {event.source}"
        )
        return self._reply(event, MethodReply(outcome.status), outcome.message)

    async def _acknowledge(self, scope: str, event: CloudEvent) -> Outcome:
        """``config.acknowledgement``: release equipment an unsafe failure blocked."""
        request = acknowledgement_request(event.data)
        by = request.acknowledged_by or f"MES {event.source}"
        await JobsControl(self.manager).acknowledge(scope, request.equipment, by)
        return Outcome(ReturnStatus.NO_ERROR)

    async def _edit(self, scope: str, event: CloudEvent) -> CloudEvent:
        job, edit, expected = edit_arguments(event.data)
        cause = Cause(correlationid=event.correlationid or event.id, causationid=event.id)
        outcome = await edit_steps(self.manager, scope, job, edit, expected=expected, cause=cause)
        self.manager.method_called(
            scope, job, EDIT_METHOD, traced(edit, outcome), requested_by=f"MES {event.source}"
        )
        if outcome.ok:  # the message is the new recipe version
            return self._reply(event, {"ReturnStatus": 1, "RecipeVersion": outcome.message})
        return self._reply(event, MethodReply(outcome.status), outcome.message)

    def _reply(self, event: CloudEvent, output: Any, message: str | None = None) -> CloudEvent:
        reply = event.reply(source=self.source, data=to_json(output))
        if message:
            reply = reply.replace(errormessage=mqtt_safe_text(message)[:_MAX_MESSAGE])
        return reply


def _job_order_id(data: Any) -> str | None:
    """The job a command is about, when its payload names one (for log lines only)."""
    if not isinstance(data, dict):
        return None
    order = data.get("JobOrder") or data.get("job_order")
    named = order.get("JobOrderID") if isinstance(order, dict) else data.get("JobOrderID")
    return named if isinstance(named, str) else None
