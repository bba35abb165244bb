"""The MES side of the job interface, for ``gateway jobs`` and ``gateway config push``.

It speaks exactly what an MES speaks (CloudEvents over MQTT v5, ``{prefix}/{scope}/commands``
with a Response Topic and Correlation Data, the payloads of ``schemas/jobs/``), so what works
from the command line works from an MES, and the other way round. Replies are plain JSON.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import from_mqtt
from gateway.errors import GatewayError
from gateway.jobstates import TopState
from gateway.mqttclient import CloudEventClient
from gateway.topics import MesTopics
from gateway_jobs.config import CONFIG_KINDS, config_type
from gateway_jobs.events import STATUS_EVENT_TYPE, method_type
from gateway_jobs.model import ReturnStatus
from gateway_jobs.queuefeed import QUEUE_EVENT_TYPE

# States a job can be found in (InitialState and EndState are never stored).
LISTED_STATES = tuple(
    state.value for state in TopState if state not in (TopState.INITIAL, TopState.END)
)

_STATUS_MEANING = {
    ReturnStatus.UNKNOWN_JOB_ORDER_ID: "unknown job order",
    ReturnStatus.INVALID_JOB_ORDER_STATUS: "not allowed in the job's current state",
    ReturnStatus.UNABLE_TO_ACCEPT_JOB_ORDER: "job order not accepted",
    ReturnStatus.INVALID_REQUEST: "the station cannot take this",
}


class CommandRefused(GatewayError):
    """The gateway answered, and said no (error reply or a ReturnStatus other than success)."""


class NoReply(GatewayError):
    """Nothing answered within the timeout."""


def cli_source() -> str:
    """The CloudEvent ``source`` of commands sent by hand: who sent them, from where."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "user"
    return f"urn:station-gateway:cli:{user}@{socket.gethostname()}"


def status_meaning(status: int) -> str:
    """``ReturnStatus`` in words (its bits, when several are set)."""
    if status == ReturnStatus.NO_ERROR:
        return "success"
    words = [text for bit, text in _STATUS_MEANING.items() if status & bit]
    return ", ".join(words) or f"ReturnStatus {status}"


def job_order_payload(document: Any) -> dict[str, Any]:
    """The Store input arguments from a file: ``{"JobOrder": {...}, ...}`` or a bare job order."""
    if not isinstance(document, Mapping):
        raise GatewayError("a job order file holds an object: a JobOrder, or {JobOrder: ...}")
    if "JobOrder" in document or "job_order" in document:
        return dict(document)
    return {"JobOrder": dict(document)}


@dataclass
class JobsClient:
    """Method calls and configuration for one scope, through a connected ``CloudEventClient``."""

    client: CloudEventClient
    topic_prefix: str
    scope: str
    timeout: float = 10.0
    source: str = ""

    @property
    def commands_topic(self) -> str:
        return MesTopics(self.topic_prefix).commands(self.scope)

    @property
    def events_topic(self) -> str:
        return MesTopics(self.topic_prefix).events(self.scope)

    async def request(self, event_type: str, data: Any, **attributes: Any) -> dict[str, Any]:
        """Send one command and return its reply's data; ``CommandRefused`` / ``NoReply``."""
        event = CloudEvent(
            type=event_type,
            source=self.source or cli_source(),
            subject=self.scope,
            data=data,
            **attributes,
        )
        try:
            reply = await self.client.request(self.commands_topic, event, timeout=self.timeout)
        except TimeoutError:
            raise NoReply(self.no_reply()) from None
        if reply.errorcode:
            raise CommandRefused(f"{reply.errorcode}: {reply.errormessage or 'no message'}")
        if not isinstance(reply.data, dict):
            raise CommandRefused(f"unexpected reply: {reply.data!r}")
        status = reply.data.get("ReturnStatus")
        if status != ReturnStatus.NO_ERROR:
            reason = status_meaning(status) if isinstance(status, int) else "no ReturnStatus"
            detail = f": {reply.errormessage}" if reply.errormessage else ""
            raise CommandRefused(f"{reason} (ReturnStatus {status}){detail}")
        return reply.data

    def no_reply(self) -> str:
        """Why a command may have gone unanswered, and how to find out which it was (one line,
        as every failure of the command line)."""
        replies = self.client.reply_topic
        return (
            f"no reply on {self.commands_topic} within {self.timeout:g} s; likely causes: "
            f"(1) no gateway runs with jobs.topic_prefix = {self.topic_prefix!r} on this broker: "
            "check its log and /readyz, and --prefix; "
            f"(2) the broker's ACL dropped the command or the reply (replies were asked on "
            f"{replies}): the gateway's user must be allowed to write there and yours to read "
            "it, and yours to write the commands topic; the gateway logs a refused reply once "
            f"per topic ('refused by the broker on {replies}'), and one it may not send there "
            "('Response Topic ... is not where replies to that topic may go': "
            "jobs.reply_topic_prefixes, jobs.cli_reply_prefix); --reply-prefix changes where "
            "replies come; "
            "(3) a stopped gateway kept its MQTT session in the share group, and the broker "
            "hands it every other command: the gateway's log says 'kept the MQTT session' when "
            "it stopped; remove the session as the README says (Operating it: stale sessions)"
        )

    async def call(self, method: str, data: Any) -> dict[str, Any]:
        """A job method (``Start``, ``RequestJobResponseByJobOrderID``...)."""
        return await self.request(method_type(method), data)

    async def act(self, method: str, job_order_id: str, comment: str | None = None) -> None:
        data: dict[str, Any] = {"JobOrderID": job_order_id}
        if comment:
            data["Comment"] = [{"Locale": "en", "Text": comment}]
        await self.call(method, data)

    async def store(self, payload: Mapping[str, Any], *, start: bool = False) -> None:
        await self.call("StoreAndStart" if start else "Store", dict(payload))

    async def job_response(self, job_order_id: str) -> dict[str, Any]:
        reply = await self.call("RequestJobResponseByJobOrderID", {"JobOrderID": job_order_id})
        response = reply.get("JobResponse")
        if not isinstance(response, dict):
            raise CommandRefused(f"the reply carries no JobResponse: {reply!r}")
        return response

    async def job_responses(self, states: tuple[str, ...] = LISTED_STATES) -> list[dict[str, Any]]:
        """The Job Responses of every job in one of ``states`` (top-level state names)."""
        found: dict[str, list[dict[str, Any]]] = {}

        async def query(state: str) -> None:
            reply = await self.call(
                "RequestJobResponseByJobOrderState",
                {"JobOrderState": [{"StateText": {"Text": state}}]},
            )
            found[state] = [item for item in reply.get("JobResponses") or [] if item]

        try:
            async with anyio.create_task_group() as tasks:
                for state in states:
                    tasks.start_soon(query, state)
        except ExceptionGroup as group:  # every query fails alike (no reply, refused): say once
            raise group.exceptions[0] from None
        return [response for state in states for response in found[state]]

    async def configure(self, kind: str, data: Any, *, delete: bool = False) -> None:
        if kind not in CONFIG_KINDS:
            raise GatewayError(f"unknown configuration kind {kind!r} (one of: {config_kinds()})")
        await self.request(config_type(kind), data, method="DELETE" if delete else "PUT")

    async def queue(self) -> dict[str, Any]:
        """The scope's queue as retained on ``{prefix}/{scope}/queue`` (``queuefeed``)."""
        topic = MesTopics(self.topic_prefix).queue(self.scope)
        try:
            with anyio.fail_after(self.timeout):
                async with self.client.watch(topic) as stream:
                    async for message in stream:
                        event = from_mqtt(message)
                        if event.type == QUEUE_EVENT_TYPE and isinstance(event.data, dict):
                            return event.data
        except TimeoutError:
            pass
        raise NoReply(
            f"nothing retained on {topic} within {self.timeout:g} s: has a gateway with "
            f"jobs.topic_prefix = {self.topic_prefix!r} dispatched this scope yet?"
        )

    @asynccontextmanager
    async def status_events(self) -> AsyncIterator[AsyncIterator[CloudEvent]]:
        """The scope's status events as they arrive (subscribed before the block runs)."""
        async with self.client.watch(self.events_topic) as stream:

            async def events() -> AsyncIterator[CloudEvent]:
                async for message in stream:
                    event = from_mqtt(message)
                    if event.type == STATUS_EVENT_TYPE:
                        yield event

            yield events()


def config_kinds() -> str:
    return ", ".join(CONFIG_KINDS)
