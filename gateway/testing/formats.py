"""The contract suite every recipe format runs: subclass ``FormatContract`` in your tests.

::

    from gateway.testing.formats import FormatContract

    class TestMyFormat(FormatContract):
        recipe_format = MyFormat()
        # two command actions that run one after the other, of types "com.example.first.v1"
        # then "com.example.second.v1", each with a timeout, no equipment named, no retries
        two_commands = {...}
        invalid = {...}  # a recipe with at least one problem
        invalid_path = "recipe.steps[0]"  # what the first problem's path starts with

pytest collects the tests below for your format: the compiler names the path of a problem, a
program describes its actions and can be bound to equipment, and the executor keeps the rules
the runtime relies on (pure, time injected: ``now`` arguments): a start dispatches the first
command; only the current try's reply moves on, and applying it twice changes nothing more; a
timeout fails the try; Pause holds back the next command until Resume; Stop and Abort end with
the results so far; a new run of a job id numbers its tries after the earlier runs; a timer
fired early is set again; recovery sends what is out again as the same try; the state survives
its stored form (JSON) at every step. One more test runs a job of ``two_commands`` through a
whole gateway on the runtime, over real Redis and mosquitto (the ``mqtt_url``, ``redis_url``
and ``unique`` fixtures of ``gateway.testing``), as an MES does: the Work Master configured, the
job stored and started, its Job Response asked for until it has ended.
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest

from gateway.cloudevents import CloudEvent
from gateway.executionstate import dump_execution, load_execution
from gateway.formats import (
    ActionSpec,
    Effects,
    Execution,
    Executor,
    ExecutorOptions,
    Program,
    RecipeError,
    RecipeFormat,
    Report,
    Status,
    Timer,
    TimerKind,
)
from gateway.jobstates import TopState
from gateway.recipes import JobCommand
from gateway.testing import running
from gateway.testing.equipment import TestEquipment, station_with
from gateway.testing.mqtt import MqttTestClient, connect_test_client
from gateway.topics import MesTopics

FIRST, SECOND = "com.example.first.v1", "com.example.second.v1"
T0 = 1_000.0  # the injected clock


class FormatContract:
    """What a format must hold to run on the runtime (see the module docstring)."""

    recipe_format: ClassVar[RecipeFormat]
    two_commands: ClassVar[Any]
    invalid: ClassVar[Any]
    invalid_path: ClassVar[str]

    # -- helpers ------------------------------------------------------------------------------

    def program(self) -> Program:
        return self.recipe_format.compile(self.two_commands)

    def executor(self) -> Executor:
        return self.program().executor({"p": 1}, ExecutorOptions())

    def started(self) -> tuple[Executor, Execution, Effects]:
        executor = self.executor()
        execution, effects = executor.start("cell1", "J1", T0)
        return executor, execution, effects

    def action_of(self, type_id: str) -> str:
        return next(a.name for a in self.program().actions.values() if a.type_id == type_id)

    @staticmethod
    def stored(execution: Execution) -> Execution:
        """The state as the runtime writes and reads it back between two stimuli."""
        copy = load_execution(dump_execution(execution))
        assert copy == execution, "the state must survive its JSON form unchanged"
        return copy

    # -- the compiler and the program ---------------------------------------------------------

    def test_a_bad_recipe_names_the_path_of_its_problem(self) -> None:
        with pytest.raises(RecipeError) as raised:
            self.recipe_format.compile(self.invalid)
        assert raised.value.problems, "a RecipeError lists its problems"
        assert raised.value.problems[0].startswith(self.invalid_path), raised.value.problems

    def test_the_program_lists_its_actions_and_binds_them_to_equipment(self) -> None:
        actions = self.program().actions
        assert all(isinstance(spec, ActionSpec) for spec in actions.values())
        assert [spec.type_id for spec in actions.values()] == [FIRST, SECOND]
        first = self.action_of(FIRST)
        bound = self.program().bind({first: "tool-1"}).actions
        assert bound[first].equipment == "tool-1"
        assert self.recipe_format.recognizes(self.two_commands)

    def test_the_program_can_be_drawn(self) -> None:
        program = self.program()
        assert self.recipe_format.render_svg(program).lstrip().startswith("<svg")
        assert self.recipe_format.render_mermaid(program).strip()
        assert self.recipe_format.summary(program).startswith("OK")

    # -- the executor -------------------------------------------------------------------------

    def test_a_start_dispatches_the_first_command_with_its_timeout(self) -> None:
        _, execution, effects = self.started()
        first = self.action_of(FIRST)
        assert effects.changed
        assert effects.sends == [first]
        assert execution.status is Status.RUNNING
        assert execution.actions[first].attempt == 1
        self.stored(execution)

    def test_only_the_current_try_moves_on_and_a_repeat_changes_nothing(self) -> None:
        executor, execution, _ = self.started()
        first, second = self.action_of(FIRST), self.action_of(SECOND)
        stale = executor.on_reply(execution, first, 7, {"v": 0}, None, T0 + 1)
        assert not (stale.changed)
        assert not (stale.sends)
        assert not (stale.report)
        execution = self.stored(execution)
        effects = executor.on_reply(execution, first, 1, {"v": 1}, None, T0 + 1)
        assert effects.sends == [second]
        again = executor.on_reply(execution, first, 1, {"v": 1}, None, T0 + 2)
        assert not (again.changed)
        assert not (again.sends)
        assert not (again.report)
        done = executor.on_reply(execution, second, 1, {"v": 2}, None, T0 + 3)
        assert done.report is Report.COMPLETE
        assert execution.status is Status.FINISHING
        assert execution.outcome == "completed"
        assert execution.results == {first: {"v": 1}, second: {"v": 2}}

    def test_a_timeout_fails_the_try_and_an_answered_try_has_none(self) -> None:
        executor, execution, effects = self.started()
        first = self.action_of(FIRST)
        timeouts = [t for t in effects.timers if t.kind is TimerKind.TIMEOUT]
        assert timeouts, "a command's try has a timeout timer"
        late = Timer(timeouts[0].due, TimerKind.TIMEOUT, first, 1)
        failed = executor.on_timer(execution, late, late.due + 1)
        assert failed.changed
        assert failed.report is Report.ABORT
        assert execution.error
        assert "no reply" in execution.error
        # A timer of a try that was answered changes nothing.
        executor, execution, _ = self.started()
        executor.on_reply(execution, first, 1, None, None, T0 + 1)
        quiet = executor.on_timer(execution, late, late.due + 1)
        assert quiet.report is None
        assert execution.status is Status.RUNNING

    def test_pause_holds_back_the_next_command_until_resume(self) -> None:
        executor, execution, _ = self.started()
        first, second = self.action_of(FIRST), self.action_of(SECOND)
        executor.on_command(execution, JobCommand.PAUSE, T0 + 1)
        assert execution.status is Status.PAUSED
        answered = executor.on_reply(execution, first, 1, "ok", None, T0 + 2)
        assert answered.sends == []  # the command out finishes, nothing new goes
        execution = self.stored(execution)
        resumed = executor.on_command(execution, JobCommand.RESUME, T0 + 3)
        assert resumed.sends == [second]

    @pytest.mark.parametrize("command", [JobCommand.STOP, JobCommand.ABORT])
    def test_stop_and_abort_end_with_the_results_so_far(self, command: JobCommand) -> None:
        executor, execution, _ = self.started()
        first = self.action_of(FIRST)
        executor.on_reply(execution, first, 1, {"v": 1}, None, T0 + 1)
        effects = executor.on_command(execution, command, T0 + 2)
        assert effects.report is Report.RECORD
        assert execution.status is Status.FINISHING
        assert execution.results == {first: {"v": 1}}
        assert not any(run.active for run in execution.actions.values())

    def test_an_error_reply_ends_the_job_saying_why(self) -> None:
        executor, execution, _ = self.started()
        first = self.action_of(FIRST)
        effects = executor.on_reply(execution, first, 1, {"torque": 3}, "E42: stalled", T0 + 1)
        assert effects.report is Report.ABORT
        assert execution.error
        assert "E42: stalled" in execution.error

    def test_a_run_of_a_job_id_numbers_its_tries_after_the_earlier_runs(self) -> None:
        """The same job id stored again: a late reply of the earlier run matches no try."""
        first = self.action_of(FIRST)
        execution, effects = self.executor().start("cell1", "J1", T0, {first: 3})
        assert effects.sends == [first]
        assert execution.actions[first].attempt == 4
        assert execution.attempts[first] == 4

    def test_a_timer_fired_early_is_set_again_and_changes_nothing(self) -> None:
        """Another instance's clock may be ahead: the timer comes back, unchanged."""
        executor, execution, effects = self.started()
        [timeout] = [t for t in effects.timers if t.kind is TimerKind.TIMEOUT]
        before = self.stored(execution)
        early = executor.on_timer(execution, timeout, timeout.due - 1)
        assert early.timers == [timeout]
        assert early.report is None
        assert execution == before

    def test_recovery_sends_the_commands_out_again_as_the_same_tries(self) -> None:
        """After a crash the runtime cannot know what reached the equipment: what is out goes
        again with the same correlation id (the equipment's idempotency contract)."""
        executor, execution, _ = self.started()
        first = self.action_of(FIRST)
        execution = self.stored(execution)
        effects = executor.on_resume(execution, T0 + 1)
        assert effects.sends == [first]
        assert execution.actions[first].attempt == 1

    # -- on the runtime -----------------------------------------------------------------------

    @pytest.mark.anyio
    @pytest.mark.integration
    async def test_a_job_runs_on_the_runtime(
        self, mqtt_url: str, redis_url: str, unique: str
    ) -> None:
        equipment = TestEquipment({FIRST: lambda c: {"n": 1}, SECOND: lambda c: {"n": 2}})
        gateway = station_with(equipment, mqtt_url, redis_url, unique)
        async with running(gateway), connect_test_client(mqtt_url) as client:
            mes = _Mes(client, MesTopics(unique).commands("cell1"))
            work_master = {
                "ID": "WM",
                "DataSchema": self.recipe_format.dataschema,
                "Data": self.two_commands,
            }
            await mes.call(_CONFIG + "workmaster.v1", work_master)
            await mes.call(_METHOD.format("StoreAndStart"), {"JobOrder": _ORDER})
            response = await mes.final_response("J1")
        states = [entry["StateText"]["Text"] for entry in response["JobState"]]
        assert states == ["Ended", "Completed"], response
        results = {entry["ID"]: entry.get("Value") for entry in response.get("JobResponseData", [])}
        assert results[self.action_of(FIRST)] == {"n": 1}
        assert results[self.action_of(SECOND)] == {"n": 2}
        assert [c.type for c in equipment.sent()] == [FIRST, SECOND]


_CONFIG = "com.github.aschamberger.ISA95-JOBCONTROL_V2.config."
_METHOD = "org.opcfoundation.ISA95-JOBCONTROL_V2.{}.v2"
_RESPONSE = "org.opcfoundation.Machinery.Jobs.RequestJobResponseByJobOrderID.v1"
_ORDER = {"JobOrderID": "J1", "WorkMasterID": [{"ID": "WM"}]}


class _Mes:
    """The MES's side of one job, over the gateway's MQTT commands topic of a scope."""

    def __init__(self, client: MqttTestClient, topic: str) -> None:
        self.client, self.topic = client, topic

    async def call(self, event_type: str, data: Any) -> Any:
        """The reply's data; ``AssertionError`` unless the call succeeded (ReturnStatus 1)."""
        event = CloudEvent(type=event_type, source="urn:test:mes", subject="cell1", data=data)
        reply = await self.client.request(self.topic, event, timeout=5)
        assert isinstance(reply.data, dict), reply
        assert reply.data.get("ReturnStatus") == 1, reply.data
        return reply.data

    async def final_response(self, job: str, timeout: float = 15) -> dict[str, Any]:
        """The Job Response once the job has ended (Ended or Aborted)."""
        with anyio.fail_after(timeout):
            while True:
                response: dict[str, Any] = (await self.call(_RESPONSE, {"JobOrderID": job}))[
                    "JobResponse"
                ]
                states = response.get("JobState") or [{}]
                if TopState(states[0].get("StateText", {}).get("Text")).final:
                    return response
                await anyio.sleep(0.05)
