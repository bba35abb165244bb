"""Test support for job management: an MES that speaks only MQTT, and a scripted interpreter.

For this plugin's tests and for integrators who want to exercise the MES interface without the
SFC engine:

- ``JobsMes`` sends method calls and configuration events the way an MES does (CloudEvents
  over MQTT, through ``gateway.testing.mqtt``) and reads the replies' ``ReturnStatus``;
- ``ScriptedInterpreter`` is a real recipe interpreter whose "recipe" says what to do when
  started (run, then complete with results), and which records what it was told;
- ``job_order`` / ``work_master`` build payloads in their OPC UA JSON form;
- ``Station`` builds gateway instances of one station on given brokers (MQTT, Redis), and
  ``local_jobs`` job management on a store without MQTT (status events kept in a list).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import anyio
from anyio.abc import ObjectReceiveStream

from gateway.app import Gateway
from gateway.changes import ChangeRecord
from gateway.cloudevents import CloudEvent
from gateway.codecs.mqtt import MqttMessage, from_mqtt
from gateway.hookspecs import hookimpl
from gateway.jobstates import TopState
from gateway.phases import InterpreterPhase
from gateway.recipes import JobCommand, JobControl, JobOutcome, ProcessValue, RecipeInterpreter
from gateway.routing import EquipmentUse
from gateway.settings import Settings
from gateway.store import Store
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway.topics import MesTopics
from gateway_jobs.breakpoints import BREAKPOINT_TYPE
from gateway_jobs.config import config_type
from gateway_jobs.control import JobsControl
from gateway_jobs.editing import EDIT_TYPE
from gateway_jobs.events import method_type
from gateway_jobs.jobs import JobManager
from gateway_jobs.model import ReturnStatus
from gateway_jobs.settings import JobsSettings

if TYPE_CHECKING:
    from gateway.recipes import RecipeJob

TEST_DATASCHEMA = "urn:station-gateway:test-recipe:v1"


def work_master(
    work_master_id: str = "wm", recipe: Any = None, *, dataschema: str | None = TEST_DATASCHEMA
) -> dict[str, Any]:
    """A Work Master carrying ``recipe`` (default: run when started, then wait)."""
    recipe = {"run": True} if recipe is None else recipe
    document: dict[str, Any] = {"ID": work_master_id, "Data": recipe}
    if dataschema is not None:
        document["DataSchema"] = dataschema
    return document


async def store_and_start(
    mes: JobsMes, recipe: Any, job: str = "J1", *, dataschema: str = TEST_DATASCHEMA
) -> None:
    """Configure Work Master ``WM-<job>`` with ``recipe``, then StoreAndStart job ``job`` with
    it; ``AssertionError`` (with the gateway's answer) unless both succeed."""
    configured = await mes.configure(
        "workmaster", work_master(f"WM-{job}", recipe, dataschema=dataschema)
    )
    assert return_status(configured) == ReturnStatus.NO_ERROR, configured.data
    stored = await mes.store(job_order(job, work_masters=[f"WM-{job}"]), method="StoreAndStart")
    assert return_status(stored) == ReturnStatus.NO_ERROR, stored.data


def job_order(
    job_order_id: str,
    *,
    work_masters: Sequence[str] = ("wm",),
    priority: int | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A job order in OPC UA JSON; ``fields`` adds e.g. ``EquipmentRequirements=[...]``."""
    order: dict[str, Any] = {
        "JobOrderID": job_order_id,
        "WorkMasterID": [{"ID": name} for name in work_masters],
        **fields,
    }
    if priority is not None:
        order["Priority"] = priority
    return order


@dataclass
class ScriptedInterpreter:
    """A recipe interpreter whose recipe is a script: ``{"run": true, "complete": {...}}``.

    On ``start`` it reports Run when the recipe says ``run``, then Complete with the results in
    ``complete`` (ID -> value) when there are any. ``{"invalid": "why"}`` fails validation.
    ``"uses": [{"action": ..., "type_id": ..., "equipment": ..., "command": true}]`` lists what
    it asks of equipment (``gateway.recipes.EquipmentUser``; equipment and command optional).
    """

    control: Callable[[], JobControl]
    dataschema: str = TEST_DATASCHEMA
    started: list[str] = field(default_factory=list)
    work_masters: dict[str, str] = field(default_factory=dict)  # job -> the Work Master it ran
    commands: list[tuple[str, JobCommand]] = field(default_factory=list)

    def validate(self, recipe: Any) -> Sequence[str]:
        if not isinstance(recipe, Mapping):
            return ["recipe: must be an object"]
        if "invalid" in recipe:
            return [f"recipe.invalid: {recipe['invalid']}"]
        return []

    def equipment_uses(self, recipe: Any) -> Sequence[EquipmentUse]:
        uses = recipe.get("uses", []) if isinstance(recipe, Mapping) else []
        return [
            EquipmentUse(
                use["action"], use["type_id"], use.get("equipment"), use.get("command", True)
            )
            for use in uses
        ]

    async def start(self, job: RecipeJob) -> None:
        self.started.append(job.job_order_id)
        self.work_masters[job.job_order_id] = job.work_master["ID"]
        script = job.recipe if isinstance(job.recipe, Mapping) else {}
        control = self.control()
        if script.get("run") and await control.run(job.scope, job.job_order_id):
            results = script.get("complete")
            if isinstance(results, Mapping):
                outcome = JobOutcome(results=[ProcessValue(k, v) for k, v in results.items()])
                await control.complete(job.scope, job.job_order_id, outcome)

    async def command(self, job: RecipeJob, command: JobCommand) -> None:
        self.commands.append((job.job_order_id, command))


@dataclass
class ScriptedInterpreterPlugin:
    """Registers a ``ScriptedInterpreter`` on every gateway built with it (an extra plugin)."""

    interpreters: list[ScriptedInterpreter] = field(default_factory=list)

    @hookimpl
    def gateway_register_recipe_interpreters(
        self,
        register: Callable[[RecipeInterpreter], None],
        settings: Settings,
        gateway: InterpreterPhase,
    ) -> None:
        interpreter = ScriptedInterpreter(lambda: gateway.job_control)
        self.interpreters.append(interpreter)
        register(interpreter)


@dataclass
class JobsMes:
    """The MES side of the job interface of one scope, speaking only MQTT."""

    client: MqttTestClient
    topic_prefix: str
    scope: str
    source: str = "urn:test:mes"

    @property
    def commands_topic(self) -> str:
        return MesTopics(self.topic_prefix).commands(self.scope)

    def event(self, event_type: str, data: Any, **attributes: Any) -> CloudEvent:
        return CloudEvent(
            type=event_type, source=self.source, subject=self.scope, data=data, **attributes
        )

    async def call(
        self, method: str, data: Any, *, timeout: float = 5.0, **attributes: Any
    ) -> CloudEvent:
        """Call a job method (``Store``, ``Start``, ``RequestJobResponseByJobOrderID``...)."""
        event = self.event(method_type(method), data, **attributes)
        return await self.client.request(self.commands_topic, event, timeout=timeout)

    async def store(
        self, order: Mapping[str, Any], method: str = "Store", *, timeout: float = 5.0
    ) -> CloudEvent:
        return await self.call(method, {"JobOrder": dict(order)}, timeout=timeout)

    async def act(self, method: str, job_order_id: str) -> CloudEvent:
        return await self.call(method, {"JobOrderID": job_order_id})

    async def set_breakpoint(
        self,
        step: str,
        *,
        job: str | None = None,
        work_master: str | None = None,
        enabled: bool = True,
    ) -> CloudEvent:
        """SetBreakpoint (the project's extension) on ``step`` of a job or a Work Master."""
        data: dict[str, Any] = {"Step": step, "Enabled": enabled}
        data.update({"JobOrderID": job} if job is not None else {"WorkMasterID": work_master})
        event = self.event(BREAKPOINT_TYPE, data)
        return await self.client.request(self.commands_topic, event)

    async def edit_steps(
        self,
        job: str,
        edit: str,
        step: str | None = None,
        new: Any = None,
        *,
        expected: str | None = None,
    ) -> CloudEvent:
        """EditSteps (the project's extension): ``edit`` is add, insert, replace, delete or
        reset; ``step`` the step it is about, ``new`` the new step."""
        data: dict[str, Any] = {"JobOrderID": job, "Edit": edit}
        for key, value in (("Step", step), ("NewStep", new), ("RecipeVersion", expected)):
            if value is not None:
                data[key] = value
        return await self.client.request(self.commands_topic, self.event(EDIT_TYPE, data))

    async def configure(self, kind: str, data: Any, *, method: str = "PUT") -> CloudEvent:
        event = self.event(config_type(kind), data, method=method)
        return await self.client.request(self.commands_topic, event)

    async def job_response(self, job_order_id: str) -> CloudEvent:
        return await self.call("RequestJobResponseByJobOrderID", {"JobOrderID": job_order_id})

    async def queue(
        self, until: Callable[[dict[str, Any]], bool] = lambda _: True, *, timeout: float = 5.0
    ) -> dict[str, Any]:
        """The scope's retained queue document once ``until`` holds for it: it follows the
        dispatch passes within ``[jobs] queue_feed_ms``, so the one retained may be older."""
        async with self.client.watch(MesTopics(self.topic_prefix).queue(self.scope)) as stream:
            with anyio.fail_after(timeout):
                while True:
                    document: dict[str, Any] = from_mqtt(await stream.receive()).data
                    if until(document):
                        return document

    @asynccontextmanager
    async def events(self) -> AsyncIterator[ObjectReceiveStream[MqttMessage]]:
        """The scope's status events, as they arrive."""
        async with self.client.watch(MesTopics(self.topic_prefix).events(self.scope)) as stream:
            yield stream


async def change_records(store: Store, scope: str) -> list[ChangeRecord]:
    """The scope's change-stream records, oldest first."""
    entries = await store.client.xrange(store.keys.changes(scope))
    return [
        ChangeRecord.parse(entry_id, fields)
        for entry_id, fields in cast(list[tuple[str, dict[str, str]]], entries)
    ]


async def final_response(mes: JobsMes, job: str = "J1", timeout: float = 15) -> dict[str, Any]:
    """The Job Response once the job has ended (Ended or Aborted), asked for over MQTT until
    then; ``TimeoutError`` after ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        while True:
            response: dict[str, Any] = (await mes.job_response(job)).data["JobResponse"]
            texts = state_texts(response)
            if texts and TopState(texts[0]).final:
                return response
            await anyio.sleep(0.05)


async def complete_and_clear(mes: JobsMes, job: str, work_master_id: str) -> None:
    """StoreAndStart ``job`` on a configured Work Master, wait until it has completed, Clear
    it; ``AssertionError`` unless each succeeds."""
    order = job_order(job, work_masters=[work_master_id])
    stored = await mes.store(order, method="StoreAndStart")
    assert return_status(stored) == ReturnStatus.NO_ERROR, stored.data
    assert state_texts(await final_response(mes, job))[:2] == ["Ended", "Completed"]
    cleared = await mes.act("Clear", job)
    assert return_status(cleared) == ReturnStatus.NO_ERROR, cleared.data


def state_texts(response: Mapping[str, Any]) -> list[str]:
    """A Job Response's state, top level first: ``["Ended", "Completed"]``."""
    return [state["StateText"]["Text"] for state in response.get("JobState", [])]


def response_data(response: Mapping[str, Any]) -> dict[str, Any]:
    """A Job Response's ``JobResponseData`` by ``ID``: the action results, ``Error``..."""
    return {entry["ID"]: entry.get("Value") for entry in response.get("JobResponseData", [])}


def return_status(reply: CloudEvent) -> int:
    """The ``ReturnStatus`` of a reply (``KeyError`` for an error reply, which has none)."""
    status = reply.data["ReturnStatus"]
    assert isinstance(status, int)
    return status


@dataclass
class Station:
    """Gateway instances of one station (shared key prefix, topic prefix and share group).

    The recipe plugins are blocked: jobs run the ``ScriptedInterpreter`` that ``plugin`` registers;
    ``equipment``: an equipment driver plugin (e.g. ``TestEquipment``), if any.
    """

    mqtt_url: str
    redis_url: str
    name: str  # unique per test: key prefix, topic prefix, share group
    plugin: ScriptedInterpreterPlugin = field(default_factory=ScriptedInterpreterPlugin)
    equipment: object | None = None

    @property
    def topic_prefix(self) -> str:
        return self.name

    def gateway(self, instance: str = "a", **jobs: str) -> Gateway:
        """An instance; ``jobs`` sets [jobs] settings (``max_job_orders="2"``)."""
        environ = {
            "GATEWAY_PLUGINS_BLOCK": "sfc,sequence",
            "GATEWAY_MQTT_URL": self.mqtt_url,
            "GATEWAY_MQTT_SHARE_GROUP": self.name,
            "GATEWAY_MQTT_RECONNECT_MAX_SECONDS": "1",
            "GATEWAY_REDIS_URL": self.redis_url,
            "GATEWAY_REDIS_KEY_PREFIX": self.name,
            "GATEWAY_GATEWAY_INSTANCE_ID": f"{self.name}-{instance}",
            "GATEWAY_GATEWAY_SHUTDOWN_GRACE_SECONDS": "5",
            "GATEWAY_JOBS_TOPIC_PREFIX": self.topic_prefix,
            **{f"GATEWAY_JOBS_{key.upper()}": value for key, value in jobs.items()},
        }
        plugins: dict[str, object] = {"recipes": self.plugin}
        if self.equipment is not None:
            plugins["equipment"] = self.equipment
        return Gateway.from_environment(None, environ, extra_plugins=plugins)

    def mes(self, scope: str = "cell1") -> AbstractAsyncContextManager[JobsMes]:
        """An MES client for ``scope``."""
        return connect_mes(self.mqtt_url, self.topic_prefix, scope)


@asynccontextmanager
async def connect_mes(url: str, prefix: str, scope: str = "cell1") -> AsyncIterator[JobsMes]:
    """An MES client of the jobs under topic ``prefix``, for ``scope``, on the broker at ``url``."""
    async with connect_test_client(url) as client:
        yield JobsMes(client, prefix, scope)


@dataclass
class CollectedEvents:
    """Status events kept in a list instead of published."""

    events: list[tuple[str, CloudEvent]] = field(default_factory=list)

    async def publish(self, scope: str, event: CloudEvent) -> None:
        self.events.append((scope, event))


@dataclass
class LocalJobs:
    """Job management on a store, without MQTT: manager, control, interpreter, what it said."""

    manager: JobManager
    control: JobsControl
    interpreter: ScriptedInterpreter
    events: CollectedEvents
    observed: list[dict[str, Any]]  # gateway_job_state_changed calls
    methods: list[dict[str, Any]] = field(default_factory=list)  # gateway_job_method_called


def local_jobs(store: Store, **settings: Any) -> LocalJobs:
    """``LocalJobs`` on an entered ``store``; ``settings`` are ``JobsSettings`` fields."""
    controls: list[JobsControl] = []
    interpreter = ScriptedInterpreter(lambda: controls[0])
    events = CollectedEvents()
    observed: list[dict[str, Any]] = []
    methods: list[dict[str, Any]] = []
    manager = JobManager(
        store=store,
        interpreters={TEST_DATASCHEMA: interpreter},
        settings=JobsSettings(**settings),
        source="urn:test:gateway",
        events=events,
        observe=lambda **change: observed.append(change),
        observe_method=lambda **call: methods.append(call),
    )
    controls.append(JobsControl(manager))
    return LocalJobs(manager, controls[0], interpreter, events, observed, methods)
