"""Hook implementations of the job management plugin (registered as ``jobs``).

Job management needs the store (its state lives there); without one the plugin contributes
nothing. Its processor and metadata need the ``mqtt`` binding; without it jobs are still
managed (an interpreter may drive them) but status events are only logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.cli import Command
from gateway.cloudevents import CloudEvent
from gateway.hookspecs import hookimpl
from gateway.jobmethods import JobMethods
from gateway.recipes import JobControl
from gateway.settings import Settings
from gateway.transport import MQTT_BINDING, Processor, Service
from gateway_jobs.commands import (
    config_push_command,
    jobs_command,
    scope_command,
)
from gateway_jobs.control import JobsControl
from gateway_jobs.dispatcher import DispatchService
from gateway_jobs.events import BindingEvents, MetadataService, StatusEventService
from gateway_jobs.jobs import JobManager
from gateway_jobs.methods import JobsMethods
from gateway_jobs.metrics import count_methods, sample_jobs_by_state, sample_queues
from gateway_jobs.processor import JobsProcessor
from gateway_jobs.queuefeed import QueueFeed
from gateway_jobs.results import ResultsDueService
from gateway_jobs.settings import JobsSettings

if TYPE_CHECKING:
    from gateway.phases import JobControlPhase, JobMethodsPhase, ProcessorPhase, ServicePhase

log = logging.getLogger(__name__)

BINDING = MQTT_BINDING


class _LoggedEvents:
    """Status events when no MQTT binding is loaded: logged, not sent."""

    async def publish(self, scope: str, event: CloudEvent) -> None:
        log.info("no %s binding: status event for %s not sent", BINDING, scope)


@hookimpl
def gateway_add_settings(register: Callable[[str, type[Any]], None]) -> None:
    register("jobs", JobsSettings)


@hookimpl
def gateway_make_job_control(gateway: JobControlPhase) -> JobControl | None:
    """Build the gateway's ``JobManager`` (kept in ``gateway.state`` for the later hooks)."""
    if gateway.store is None:
        log.info("no store: job management is off")
        return None
    settings = gateway.settings.get(JobsSettings)
    binding = gateway.bindings.get(BINDING)
    manager = JobManager(
        store=gateway.store,
        interpreters=gateway.recipe_interpreters,
        settings=settings,
        source=gateway.source,
        events=_LoggedEvents()
        if binding is None
        else BindingEvents(binding, settings.topic_prefix),
        observe=gateway.plugins.hook.gateway_job_state_changed,
        observe_method=gateway.plugins.hook.gateway_job_method_called,
        equipment=gateway.equipment,
    )
    if binding is not None:
        feed = QueueFeed(
            binding,
            settings.topic_prefix,
            gateway.source,
            manager.dispatcher.queue,
            interval=settings.queue_feed_ms / 1000,
            limit=settings.queue_feed_jobs,
        )
        manager.dispatcher.feed = gateway.state.add(feed).changed
    # Commands naming no equipment are routed by the types the MES configured.
    gateway.equipment.set_directory(manager.config.types)
    return JobsControl(gateway.state.add(manager))


@hookimpl
def gateway_make_job_methods(gateway: JobMethodsPhase) -> JobMethods | None:
    """The MES's methods over the ``JobManager`` (also kept in ``gateway.state``)."""
    manager = gateway.state.find(JobManager)
    if manager is None:
        return None
    return gateway.state.add(JobsMethods(manager, count=count_methods(gateway.metrics)))


@hookimpl
def gateway_register_processors(
    register: Callable[[Processor], None], settings: Settings, gateway: ProcessorPhase
) -> None:
    manager, methods = gateway.state.find(JobManager), gateway.state.find(JobsMethods)
    if manager is not None and methods is not None and BINDING in gateway.bindings:
        jobs = settings.get(JobsSettings)
        prefix = jobs.topic_prefix
        processor = JobsProcessor(
            manager, methods, source=gateway.source, count=count_methods(gateway.metrics)
        )
        # The command line asks for its replies under jobs.cli_reply_prefix (``commands.py``):
        # under mes/replies by default, allowed anyway if set elsewhere.
        replies = (*jobs.reply_topic_prefixes, jobs.cli_reply_prefix)
        register(processor.processor(prefix, reply_to=replies))


@hookimpl
def gateway_register_services(
    register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
) -> None:
    manager = gateway.state.find(JobManager)
    if manager is None:
        return
    sample_jobs_by_state(gateway.metrics, manager.repository)
    sample_queues(gateway.metrics, manager)
    jobs = settings.get(JobsSettings)
    register(DispatchService(manager.dispatcher, jobs.dispatch_poll_seconds))
    register(ResultsDueService(manager, jobs.dispatch_poll_seconds))
    register(StatusEventService(manager.events))
    feed = gateway.state.find(QueueFeed)
    if feed is not None:
        register(feed)
    if BINDING in gateway.bindings:
        register(MetadataService(settings.get(JobsSettings).topic_prefix, BINDING))


@hookimpl
def gateway_register_commands(register: Callable[[Command], None]) -> None:
    register(jobs_command())
    register(config_push_command())
    register(scope_command())
