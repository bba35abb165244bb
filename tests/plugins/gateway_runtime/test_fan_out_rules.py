"""Fan-out as a pure function of state and stimulus: the runtime's wrapper of a format's
executor (the sequence format drives it), each stimulus then what a commit does."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import (
    ActionRun,
    Effects,
    Executor,
    ExecutorOptions,
    RecipeError,
    Report,
    Timer,
    TimerKind,
)
from gateway_runtime import dump_execution, load_execution, take_done
from gateway_runtime.compensation import compensating
from gateway_runtime.fanout import FannedProgram, fanning, member_spec
from gateway_runtime.snapshots import Snapshot
from gateway_sequence.format import SequenceFormat
from gateway_sequence.model import load_sequence

T0 = 1000.0
MEMBERS = ["nr1", "nr2", "nr3"]


def recipe(policy: Any = "all", **tighten: Any) -> dict[str, Any]:
    fan_out = {"members": MEMBERS, "policy": policy}
    return {
        "steps": [
            {"name": "tighten", "type_id": "t.v1", "timeout_seconds": 5, "fan_out": fan_out}
            | tighten,
            {"name": "release", "type_id": "r.v1", "timeout_seconds": 5},
        ]
    }


class Job:
    def __init__(self, data: dict[str, Any]) -> None:
        program = FannedProgram(SequenceFormat().compile(data), {"tighten": MEMBERS})
        self.program = program
        self.executor: Executor = fanning(program.executor({}, ExecutorOptions()), program)
        self.execution, self.effects = self.executor.start("cell1", "J1", T0)
        self.sent = list(self.effects.sends)
        self.history: dict[str, ActionRun] = {}
        self._commit()

    def _commit(self) -> None:
        self.history.update(take_done(self.execution))
        self.execution = load_execution(dump_execution(self.execution))

    def run(self, name: str) -> ActionRun:
        return self.execution.actions.get(name) or self.history[name]

    def _record(self, effects: Effects) -> Effects:
        self.effects = effects
        self._commit()
        self.sent.extend(effects.sends)
        return effects

    def reply(self, name: str, data: Any = None, error: str | None = None) -> Effects:
        run = self.run(name)
        return self._record(
            self.executor.on_reply(self.execution, name, run.attempt, data, error, T0)
        )

    def timeout(self, name: str) -> Effects:
        run = self.run(name)
        assert run.deadline is not None
        timer = Timer(run.deadline, TimerKind.TIMEOUT, name, run.attempt)
        return self._record(self.executor.on_timer(self.execution, timer, run.deadline))


def test_the_action_goes_to_each_member_with_its_own_try() -> None:
    job = Job(recipe())
    assert job.sent == ["tighten@nr1", "tighten@nr2", "tighten@nr3"]
    spec = member_spec(job.program, "tighten@nr2")
    assert spec is not None
    assert (spec.equipment, spec.type_id) == ("nr2", "t.v1")
    assert member_spec(job.program, "tighten@elsewhere") is None


def test_all_succeeding_replies_the_action_with_one_entry_per_member() -> None:
    job = Job(recipe())
    for member in MEMBERS:
        job.reply(f"tighten@{member}", {"torque": 85})
    assert job.effects.sends == ["release"]
    assert job.execution.results["tighten"] == {m: {"torque": 85} for m in MEMBERS}


def test_all_fails_as_soon_as_it_can_no_longer_be_met() -> None:
    job = Job(recipe())
    effects = job.reply("tighten@nr2", error="torque not reached")
    assert effects.report is Report.ABORT
    assert (
        job.execution.error == "step tighten: 0 of 3 succeeded, 3 needed (nr2: torque not reached)"
    )
    # The members still out end with it: no format sees a run it does not know.
    assert not any(run.active for run in job.execution.actions.values())
    assert job.reply("tighten@nr1", {"torque": 85}) == Effects()  # late: changes nothing


def test_at_least_n_waits_for_every_member_then_succeeds_with_the_errors_kept() -> None:
    job = Job(recipe(policy=2))
    assert job.reply("tighten@nr2", error="torque not reached").sends == []
    assert job.reply("tighten@nr1", {"torque": 85}).sends == []  # nr3 may still make it
    assert job.reply("tighten@nr3", {"torque": 86}).sends == ["release"]
    tightened = job.execution.results["tighten"]
    assert tightened["nr2"] == {"error": "torque not reached", "data": None}


def test_a_member_that_does_not_answer_in_time_has_failed() -> None:
    job = Job(recipe(policy=2))
    job.reply("tighten@nr2", error="torque not reached")
    job.reply("tighten@nr1", {"torque": 85})
    effects = job.timeout("tighten@nr3")
    assert effects.report is Report.ABORT
    assert job.execution.error == (
        "step tighten: 1 of 3 succeeded, 2 needed (nr2: torque not reached; "
        "nr3: no reply within 5 s)"
    )


def test_max_attempts_runs_the_whole_fan_out_again() -> None:
    job = Job(recipe(policy="any", max_attempts=2))
    for member in MEMBERS:
        job.reply(f"tighten@{member}", error="jammed")
    assert sorted(job.effects.sends) == [f"tighten@{m}" for m in MEMBERS]
    assert all(job.run(f"tighten@{m}").attempt == 2 for m in MEMBERS)
    job.reply("tighten@nr1", {"torque": 85})
    job.reply("tighten@nr2", error="jammed")
    assert job.reply("tighten@nr3", error="jammed").sends == ["release"]


def test_recovery_sends_the_members_still_out_again() -> None:
    job = Job(recipe())
    job.reply("tighten@nr1", {"torque": 85})
    effects = job._record(job.executor.on_resume(job.execution, T0))
    assert sorted(effects.sends) == ["tighten@nr2", "tighten@nr3"]
    assert job.run("tighten@nr2").attempt == 1  # the same try


@pytest.mark.parametrize(
    ("fan_out", "problem"),
    [
        ({"members": []}, "recipe.steps[0].fan_out.members: must be 'declared'"),
        ({"members": ["a:b"]}, "recipe.steps[0].fan_out.members: equipment 'a:b': no ':'"),
        ({"policy": "most"}, "recipe.steps[0].fan_out.policy: must be 'all', 'any'"),
        ({"members": ["a"], "policy": 2}, "recipe.steps[0].fan_out.policy: at least 2 of 1"),
        ({"colour": 1}, "recipe.steps[0].fan_out: unknown field 'colour'"),
    ],
)
def test_a_bad_fan_out_is_named_at_its_path(fan_out: dict[str, Any], problem: str) -> None:
    with pytest.raises(RecipeError) as caught:
        load_sequence({"steps": [{"name": "a", "type_id": "t", "fan_out": fan_out}]})
    assert any(found.startswith(problem) for found in caught.value.problems), caught.value.problems


def test_a_fan_out_names_no_equipment() -> None:
    step = {"name": "a", "type_id": "t", "equipment": "x", "fan_out": {}}
    with pytest.raises(RecipeError) as caught:
        load_sequence({"steps": [step]})
    assert caught.value.problems[0].startswith(
        "recipe.steps[0].fan_out: a fan-out step names no equipment"
    )


SLOTS = ["s1", "s2", "s3"]


def pipeline(policy: Any = "any") -> dict[str, Any]:
    return {
        "steps": [
            {
                "name": "per_slot",
                "fan_out": {"members": SLOTS, "policy": policy},
                "steps": [
                    {"name": "insert", "type_id": "i.v1", "timeout_seconds": 5},
                    {"name": "test", "type_id": "t.v1", "timeout_seconds": 5, "max_attempts": 2},
                ],
            },
            {"name": "report", "type_id": "r.v1", "timeout_seconds": 5},
        ]
    }


class PipelineJob(Job):
    def __init__(self, data: dict[str, Any]) -> None:
        program = FannedProgram(SequenceFormat().compile(data), {"per_slot": SLOTS})
        self.program = program
        self.executor = fanning(program.executor({}, ExecutorOptions()), program)
        self.execution, self.effects = self.executor.start("cell1", "J1", T0)
        self.sent = list(self.effects.sends)
        self.history = {}
        self._commit()


def test_each_member_runs_its_pipeline_on_its_own() -> None:
    job = PipelineJob(pipeline())
    assert job.sent == ["insert@s1", "insert@s2", "insert@s3"]
    assert job.reply("insert@s2", {"ok": 1}).sends == ["test@s2"]  # s2 moves on alone
    spec = member_spec(job.program, "test@s2")
    assert spec is not None
    assert (spec.equipment, spec.type_id, spec.max_attempts) == ("s2", "t.v1", 2)
    assert job.reply("test@s2", error="flaky").sends == ["test@s2"]  # that step's own retry
    job.reply("test@s2", {"pass": True})
    # s1 fails its first step: only its pipeline stops.
    assert job.reply("insert@s1", error="no part").sends == []
    job.reply("insert@s3", {"ok": 1})
    job.reply("test@s3", error="fail")
    effects = job.reply("test@s3", error="fail again")
    assert effects.sends == ["report"]  # "any": s2 made it
    result = job.execution.results["per_slot"]
    assert result["s2"] == {"insert": {"ok": 1}, "test": {"pass": True}}
    assert result["s1"] == {"error": "insert: no part", "data": None, "results": {}}
    assert result["s3"]["error"] == "test: fail again"
    assert result["s3"]["results"] == {"insert": {"ok": 1}}


def test_a_pipeline_policy_not_met_fails_the_block() -> None:
    job = PipelineJob(pipeline(policy="all"))
    effects = job.reply("insert@s3", error="no part")
    assert effects.report is Report.ABORT
    assert job.execution.error == "step per_slot: 0 of 3 succeeded, 3 needed (s3: insert: no part)"


def test_a_pipeline_step_names_no_equipment() -> None:
    data = pipeline()
    data["steps"][0]["steps"][0]["equipment"] = "x"
    with pytest.raises(RecipeError) as caught:
        load_sequence(data)
    assert caught.value.problems == [
        "recipe.steps[0].steps[0].equipment: not for a pipeline's step (the block's own)"
    ]


def test_a_rollback_undoes_each_member_that_succeeded_on_that_member() -> None:
    data = recipe(policy=2)
    data["steps"][0]["compensation"] = {"name": "untighten", "type_id": "u.v1"}
    data["steps"][1]["max_attempts"] = 1
    program = FannedProgram(SequenceFormat().compile(data), {"tighten": MEMBERS})
    job = Job.__new__(Job)
    job.program = program
    job.executor = compensating(fanning(program.executor({}, ExecutorOptions()), program), program)
    job.execution, job.effects = job.executor.start("cell1", "J1", T0)
    job.sent, job.history = list(job.effects.sends), {}
    job._commit()
    job.reply("tighten@nr1", {"torque": 85})
    job.reply("tighten@nr2", error="torque not reached")
    job.reply("tighten@nr3", {"torque": 86})
    effects = job.reply("release", error="jammed")  # the job fails after the fan-out
    assert sorted(effects.sends) == ["untighten@nr1", "untighten@nr3"]  # not nr2: it failed
    spec = Snapshot(program, {}, data, "", members={"tighten": MEMBERS}).spec("untighten@nr3")
    assert spec is not None
    assert (spec.equipment, spec.type_id) == ("nr3", "u.v1")
    job.reply("untighten@nr1", {})
    effects = job.reply("untighten@nr3", {})
    assert effects.report is Report.ABORT
    rollback = job.execution.rollback
    assert rollback is not None
    assert rollback.safe is True
    assert [entry["compensation"] for entry in rollback.ran] == ["untighten@nr1", "untighten@nr3"]


def test_a_pipeline_step_waits_its_backoff_before_its_next_try() -> None:
    data = pipeline()
    data["steps"][0]["steps"][1]["backoff_seconds"] = 4
    job = PipelineJob(data)
    job.reply("insert@s1", {"ok": 1})
    first = job.run("test@s1").attempt
    effects = job.reply("test@s1", error="flaky")
    assert effects.sends == []  # not at once
    (due,) = [timer for timer in effects.timers if timer.kind is TimerKind.DUE]
    assert (due.action, due.due) == ("test@s1", T0 + 4)
    early = job.executor.on_timer(job.execution, due, T0 + 3)
    assert (early.timers, early.sends) == ([due], [])  # fired early: set again
    again = job._record(job.executor.on_timer(job.execution, due, T0 + 4))
    assert again.sends == ["test@s1"]
    assert job.run("test@s1").attempt == first + 1
    late = job._record(job.executor.on_timer(job.execution, due, T0 + 5))
    assert late.sends == []  # that backoff is over: its timer fires in vain
