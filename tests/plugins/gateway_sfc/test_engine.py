"""SFC semantics, one stimulus at a time, on the pure executor with a fake clock.

The same semantics run multi-instance over Redis in ``test_coordination.py``; here every rule
is shown in isolation: qualifiers, branch kinds, nesting, loops, timeouts, retries, hold,
pause/resume/stop/abort.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gateway.formats import ActionRun, Effects, Execution, Phase, Status, Timer
from gateway.recipes import JobCommand
from gateway_runtime import dump_execution, load_execution, take_done
from gateway_sfc.engine import Executor
from gateway_sfc.validation import load_chart


def push(name: str, step: str, qualifier: str = "N", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "step": step,
        "qualifier": qualifier,
        "interaction": "push_command",
        "type_id": f"com.example.{name}.v1",
        **extra,
    }


def pull(name: str, step: str, qualifier: str = "N", **extra: Any) -> dict[str, Any]:
    return {**push(name, step, qualifier, **extra), "interaction": "pull_event"}


def steps(*names: str) -> list[dict[str, Any]]:
    return [{"name": names[0], "initial": True}, *({"name": name} for name in names[1:])]


def chain(*names: str) -> list[dict[str, Any]]:
    return [{"source": a, "target": b} for a, b in itertools.pairwise(names)]


class Run:
    """One job's chart under test: apply stimuli, look at state and effects."""

    def __init__(
        self,
        recipe: dict[str, Any],
        parameters: dict[str, Any] | None = None,
        liveness_seconds: float = 0.0,
    ) -> None:
        self.now = 1000.0
        self.executor = Executor(
            load_chart(recipe),
            parameters or {},
            recheck_seconds=0.5,
            liveness_seconds=liveness_seconds,
        )
        self.execution, self.effects = self.executor.start("cell", "J1", self.now)
        self.history: dict[str, ActionRun] = take_done(self.execution)
        self.sent: list[str] = list(self.effects.sends)
        self.timers: list[Timer] = list(self.effects.timers)

    def _record(self, effects: Effects) -> Effects:
        # As every commit does: runs that are done leave the state for the history.
        self.history.update(take_done(self.execution))
        self.effects = effects
        self.sent.extend(effects.sends)
        self.timers.extend(effects.timers)
        return effects

    def run(self, action: str) -> ActionRun:
        """The action's run in the state, or in the history once it is done."""
        return self.execution.actions.get(action) or self.history[action]

    def attempt(self, action: str) -> int:
        return self.run(action).attempt

    def reply(self, action: str, data: Any = None, error: str | None = None) -> Effects:
        return self._record(
            self.executor.on_reply(
                self.execution, action, self.attempt(action), data or {"ok": True}, error, self.now
            )
        )

    def event(self, action: str, data: Any = None) -> Effects:
        return self._record(self.executor.on_event(self.execution, action, data, self.now))

    def advance(self, seconds: float, offline: str | None = None) -> None:
        """Let time pass and fire every timer that falls due, in order (``offline``: the
        equipment's offline reason the engine would be told)."""
        self.now += seconds
        while due := sorted((t for t in self.timers if t.due <= self.now), key=lambda t: t.due):
            timer = due[0]
            self.timers.remove(timer)
            self._record(self.executor.on_timer(self.execution, timer, self.now, offline))

    def command(self, command: JobCommand) -> Effects:
        return self._record(self.executor.on_command(self.execution, command, self.now))

    @property
    def active(self) -> set[str]:
        return set(self.execution.nodes)

    def phase(self, action: str) -> Phase:
        return self.run(action).phase

    @property
    def status(self) -> Status:
        return self.execution.status


def test_a_sequence_runs_step_by_step_and_completes() -> None:
    run = Run(
        {
            "steps": steps("Init", "A", "B", "End"),
            "transitions": chain("Init", "A", "B", "End"),
            "actions": [push("a", "A"), push("b", "B")],
        }
    )
    assert run.active == {"A"}  # Init has no actions: it advanced at once
    assert run.sent == ["a"]
    run.reply("a", {"x": 1})
    assert run.active == {"B"}
    assert run.sent == ["a", "b"]
    run.reply("b", {"y": 2})
    assert run.status is Status.FINISHING
    assert run.execution.outcome == "completed"
    assert run.effects.report == "complete"
    assert run.execution.results == {"a": {"x": 1}, "b": {"y": 2}}


def test_steps_without_actions_advance_at_once() -> None:
    run = Run({"steps": steps("A", "B", "C"), "transitions": chain("A", "B", "C")})
    assert run.execution.outcome == "completed"


def test_transition_conditions_decide_where_the_chart_goes() -> None:
    recipe = {
        "steps": steps("Measure", "Good", "Rework"),
        "transitions": [
            {"source": "Measure", "target": "Good", "condition": "measure.torque >= params.min"},
            {"source": "Measure", "target": "Rework", "condition": "always", "priority": 1},
        ],
        "actions": [push("measure", "Measure"), push("rework", "Rework")],
    }
    good = Run(recipe, {"min": 80})
    good.reply("measure", {"torque": 85})
    assert good.execution.outcome == "completed"
    low = Run(recipe, {"min": 80})
    low.reply("measure", {"torque": 70})
    assert low.active == {"Rework"}


def test_a_bare_name_is_a_boolean_result_of_the_source_step() -> None:
    run = Run(
        {
            "steps": steps("Verify", "Done"),
            "transitions": [{"source": "Verify", "target": "Done", "condition": "torque_ok"}],
            "actions": [pull("verify", "Verify")],
        }
    )
    run.event("verify", {"torque_ok": False})
    assert run.active == {"Verify"}  # not enabled: the step stays active
    assert run.status is Status.RUNNING


def test_a_selection_branch_takes_the_highest_priority_enabled_path() -> None:
    recipe = {
        "steps": steps("Start", "Fast", "Careful", "Manual", "End"),
        "branches": [
            {"name": "Route", "type": "selection", "branches": [["Fast"], ["Careful"], ["Manual"]]}
        ],
        "transitions": [
            {"source": "Start", "target": "Route"},
            {
                "source": "Route",
                "target": "Fast",
                "condition": "params.mode == 'fast'",
                "priority": 2,
            },
            {"source": "Route", "target": "Careful", "condition": "true", "priority": 1},
            {"source": "Route", "target": "Manual", "condition": "true", "priority": 3},
            {"source": "Route", "target": "End"},
        ],
        "actions": [push("fast", "Fast"), push("careful", "Careful"), push("manual", "Manual")],
    }
    run = Run(recipe, {"mode": "fast"})
    assert run.active == {"Route", "Careful"}  # priority 1 beats 2 and 3
    run.reply("careful")
    assert run.execution.outcome == "completed"
    assert run.sent == ["careful"]


def test_a_simultaneous_branch_runs_all_paths_and_converges_when_all_finished() -> None:
    run = Run(
        {
            "steps": steps("Init", "Position", "Tighten", "Inspect", "Done"),
            "branches": [
                {
                    "name": "Fit",
                    "type": "simultaneous",
                    "branches": [["Position", "Tighten"], ["Inspect"]],
                }
            ],
            "transitions": [
                {"source": "Init", "target": "Fit"},
                {"source": "Fit", "target": "Done"},
            ],
            "actions": [
                push("position", "Position"),
                push("tighten", "Tighten"),
                pull("qa", "Inspect"),
            ],
        }
    )
    assert run.active == {"Fit", "Position", "Inspect"}
    run.event("qa", {"passed": True})
    assert run.active == {"Fit", "Position"}  # the QA path finished; the fitting path has not
    run.reply("position")
    run.reply("tighten")
    assert run.execution.outcome == "completed"


def test_a_branch_inside_a_branch() -> None:
    run = Run(
        {
            "steps": steps("Init", "A1", "B1", "B2", "C1", "Done"),
            "branches": [
                {"name": "Outer", "type": "simultaneous", "branches": [["A1"], ["Inner", "C1"]]},
                {"name": "Inner", "type": "selection", "branches": [["B1"], ["B2"]]},
            ],
            "transitions": [
                {"source": "Init", "target": "Outer"},
                {"source": "Inner", "target": "B1", "condition": "params.left"},
                {"source": "Inner", "target": "B2", "condition": "not params.left"},
                {"source": "Outer", "target": "Done"},
            ],
            "actions": [push("a1", "A1"), push("b1", "B1"), push("b2", "B2"), push("c1", "C1")],
        },
        {"left": False},
    )
    assert run.active == {"Outer", "A1", "Inner", "B2"}
    run.reply("b2")
    assert run.active == {"Outer", "A1", "C1"}  # Inner converged, its path went on to C1
    run.reply("c1")
    run.reply("a1")
    assert run.execution.outcome == "completed"
    assert sorted(run.sent) == ["a1", "b2", "c1"]


def test_a_loop_re_enters_with_fresh_action_state_until_its_counter_condition() -> None:
    run = Run(
        {
            "steps": steps("Tighten", "Check", "Done"),
            "transitions": [
                {"source": "Tighten", "target": "Check"},
                {"source": "Check", "target": "Done", "condition": "tighten.bolt >= params.bolts"},
                {"source": "Check", "target": "Tighten", "condition": "always", "priority": 1},
            ],
            "actions": [push("tighten", "Tighten")],
        },
        {"bolts": 3},
    )
    for bolt in (1, 2, 3):
        assert run.phase("tighten") is Phase.DISPATCHED
        assert run.attempt("tighten") == bolt  # a new correlation id for every pass
        run.reply("tighten", {"bolt": bolt})
    assert run.execution.outcome == "completed"
    assert run.sent == ["tighten"] * 3


@pytest.mark.parametrize(
    ("qualifier", "step_waits"), [("N", True), ("P", False), ("P1", False), ("S", False)]
)
def test_whether_the_step_waits_for_its_action(qualifier: str, step_waits: bool) -> None:
    run = Run(
        {
            "steps": steps("A", "B"),
            "transitions": chain("A", "B"),
            "actions": [push("act", "A", qualifier), push("next", "B")],
        }
    )
    assert run.sent[0] == "act"
    assert (run.active == {"A"}) is step_waits


def test_p0_fires_when_the_step_is_left() -> None:
    run = Run(
        {
            "steps": steps("A", "B"),
            "transitions": chain("A", "B"),
            "actions": [push("work", "A"), push("unclamp", "A", "P0"), push("next", "B")],
        }
    )
    assert run.sent == ["work"]
    run.reply("work")
    assert run.sent == ["work", "next", "unclamp"] or run.sent == ["work", "unclamp", "next"]


def test_s_outlives_its_step_r_resets_it_and_the_job_waits_for_what_is_still_set() -> None:
    recipe = {
        "steps": steps("Clamp", "Work", "Release", "End"),
        "transitions": chain("Clamp", "Work", "Release", "End"),
        "actions": [
            push("vacuum", "Clamp", "S"),
            push("work", "Work"),
            {
                "name": "vacuum",
                "step": "Release",
                "qualifier": "R",
                "interaction": "push_command",
                "type_id": "x",
            },
        ],
    }
    reset = Run(recipe)
    assert reset.active == {"Work"}  # S does not hold its step
    reset.reply("work")
    assert reset.phase("vacuum") is Phase.CANCELLED  # R at Release reset it
    assert reset.execution.outcome == "completed"

    waits = Run({**recipe, "actions": recipe["actions"][:2]})  # no R: still set at the end
    waits.reply("work")
    assert waits.status is Status.RUNNING
    assert not waits.active
    waits.reply("vacuum", {"on": True})
    assert waits.execution.outcome == "completed"


def test_l_ends_the_action_at_its_time_limit_without_an_error() -> None:
    run = Run(
        {
            "steps": steps("Listen", "Done"),
            "transitions": chain("Listen", "Done"),
            "actions": [pull("samples", "Listen", "L", time_seconds=5)],
        }
    )
    run.advance(4.9)
    assert run.active == {"Listen"}
    run.advance(0.2)
    assert run.phase("samples") is Phase.DONE
    assert run.execution.outcome == "completed"


def test_d_starts_the_action_after_its_delay() -> None:
    run = Run(
        {
            "steps": steps("Settle", "Done"),
            "transitions": chain("Settle", "Done"),
            "actions": [push("measure", "Settle", "D", time_seconds=2)],
        }
    )
    assert run.sent == []
    run.advance(2)
    assert run.sent == ["measure"]
    run.reply("measure")
    assert run.execution.outcome == "completed"


def test_timeout_then_retry_then_success_keeps_one_correlation_per_try() -> None:
    run = Run(
        {
            "steps": steps("Tighten", "Done"),
            "transitions": chain("Tighten", "Done"),
            "actions": [
                push(
                    "tighten",
                    "Tighten",
                    timeout_seconds=5,
                    retry={"max_attempts": 3, "backoff_seconds": 1},
                )
            ],
        }
    )
    run.advance(5)  # first try times out
    assert run.phase("tighten") is Phase.PENDING
    run.advance(1)  # backoff over: second try
    assert run.sent == ["tighten", "tighten"]
    assert run.attempt("tighten") == 2
    run.reply("tighten", {"torque": 85})
    assert run.execution.outcome == "completed"


def test_a_late_reply_to_an_earlier_try_is_ignored() -> None:
    run = Run(
        {
            "steps": steps("Tighten", "Done"),
            "transitions": chain("Tighten", "Done"),
            "actions": [
                push(
                    "tighten",
                    "Tighten",
                    timeout_seconds=5,
                    retry={"max_attempts": 2, "backoff_seconds": 0},
                )
            ],
        }
    )
    run.advance(5)
    run.advance(0)
    assert run.attempt("tighten") == 2
    effects = run.executor.on_reply(run.execution, "tighten", 1, {"late": True}, None, run.now)
    assert not effects.changed
    assert run.phase("tighten") is Phase.DISPATCHED


def test_timeout_after_the_last_try_aborts_with_the_error_and_side_effects() -> None:
    run = Run(
        {
            "steps": steps("Tighten", "Done"),
            "transitions": chain("Tighten", "Done"),
            "actions": [push("tighten", "Tighten", timeout_seconds=5)],
        }
    )
    run.advance(5)
    assert run.execution.outcome == "aborted"
    assert run.effects.report == "abort"
    assert "tighten" in (run.execution.error or "")
    assert "no reply within 5 s" in (run.execution.error or "")
    assert run.execution.side_effects is True


def test_the_data_of_the_last_error_reply_is_kept_as_the_failed_actions_result() -> None:
    run = Run(
        {
            "steps": steps("Tighten", "Done"),
            "transitions": chain("Tighten", "Done"),
            "actions": [push("tighten", "Tighten", retry={"max_attempts": 2})],
        }
    )
    run.reply("tighten", {"torque": 60.1}, error="torque not reached")
    assert "tighten" not in run.execution.results  # a try is left: no failed result to read
    run.advance(1)
    run.reply("tighten", {"torque": 97.4, "unit": "Nm"}, error="torque out of range")
    assert run.execution.outcome == "aborted"
    assert "torque out of range" in (run.execution.error or "")
    assert run.execution.results == {"tighten": {"torque": 97.4, "unit": "Nm"}}


def test_a_pull_event_that_never_comes_fails_without_side_effects() -> None:
    run = Run(
        {
            "steps": steps("Wait", "Done"),
            "transitions": chain("Wait", "Done"),
            "actions": [pull("qa", "Wait", timeout_seconds=3)],
        }
    )
    run.advance(3)
    assert run.execution.outcome == "aborted"
    assert "no event within 3 s" in (run.execution.error or "")
    assert run.execution.side_effects is False


def test_hold_then_resume_retries_the_failed_action() -> None:
    run = Run(
        {
            "steps": steps("Tighten", "Done"),
            "transitions": chain("Tighten", "Done"),
            "actions": [push("tighten", "Tighten")],
            "on_error": "hold",
        }
    )
    run.reply("tighten", error="torque out of range")
    assert run.status is Status.HELD
    assert run.effects.report == "hold"
    run.command(JobCommand.RESUME)
    assert run.sent == ["tighten", "tighten"]
    run.reply("tighten")
    assert run.execution.outcome == "completed"


def parallel(*actions: dict[str, Any]) -> dict[str, Any]:
    """Steps A and B in a simultaneous branch, then Done; ``actions`` belong to A and B."""
    return {
        "steps": steps("Init", "A", "B", "Done"),
        "branches": [{"name": "Fit", "type": "simultaneous", "branches": [["A"], ["B"]]}],
        "transitions": [{"source": "Init", "target": "Fit"}, {"source": "Fit", "target": "Done"}],
        "actions": list(actions),
    }


def test_resume_retries_every_parallel_action_that_failed_while_the_job_held() -> None:
    run = Run(parallel(push("a", "A", on_error="hold"), push("b", "B", on_error="hold")))
    run.reply("a", error="jammed")
    run.reply("b", error="jammed")  # fails while the job holds already
    assert run.status is Status.HELD
    run.command(JobCommand.RESUME)
    assert sorted(run.effects.sends) == ["a", "b"]
    run.reply("b")
    assert run.execution.status is Status.RUNNING  # a has not answered yet
    run.reply("a")
    assert run.execution.outcome == "completed"
    assert run.execution.results == {"a": {"ok": True}, "b": {"ok": True}}


def test_a_parallel_action_whose_time_runs_out_while_the_job_holds_fails() -> None:
    run = Run(parallel(push("a", "A", on_error="hold"), push("b", "B", timeout_seconds=2)))
    run.reply("a", error="jammed")
    assert run.status is Status.HELD
    run.advance(2)  # b's equipment never answers
    assert run.execution.outcome == "aborted"
    assert "no reply within 2 s" in (run.execution.error or "")


def test_pause_stops_advancing_and_resume_continues() -> None:
    run = Run(
        {
            "steps": steps("A", "B", "Done"),
            "transitions": chain("A", "B", "Done"),
            "actions": [push("a", "A"), push("b", "B")],
        }
    )
    run.command(JobCommand.PAUSE)
    run.reply("a")  # the result is kept, but the chart does not move on
    assert run.active == {"A"}
    assert run.sent == ["a"]
    run.command(JobCommand.RESUME)
    assert run.active == {"B"}
    assert run.sent == ["a", "b"]


@pytest.mark.parametrize(
    ("command", "outcome"), [(JobCommand.STOP, "stopped"), (JobCommand.ABORT, "aborted by the MES")]
)
def test_stop_and_abort_end_the_chart_and_record_the_results(
    command: JobCommand, outcome: str
) -> None:
    run = Run(
        {
            "steps": steps("A", "B", "Done"),
            "transitions": chain("A", "B", "Done"),
            "actions": [push("a", "A"), push("b", "B")],
        }
    )
    run.reply("a", {"done": 1})
    run.command(command)
    assert run.execution.outcome == outcome
    assert run.effects.report == "record"
    assert run.phase("b") is Phase.CANCELLED
    assert run.execution.results == {"a": {"done": 1}}


def test_a_transition_on_elapsed_time_is_looked_at_again_later() -> None:
    run = Run(
        {
            "steps": steps("Cure", "Done"),
            "transitions": [{"source": "Cure", "target": "Done", "condition": "step.elapsed >= 2"}],
        }
    )
    assert run.active == {"Cure"}
    run.advance(1)
    assert run.active == {"Cure"}
    run.advance(1.2)
    assert run.execution.outcome == "completed"


def test_a_condition_failing_at_run_time_aborts_naming_the_transition() -> None:
    run = Run(
        {
            "steps": steps("Measure", "Done"),
            "transitions": [
                {"source": "Measure", "target": "Done", "condition": "measure.torque > 'high'"}
            ],
            "actions": [push("measure", "Measure")],
        }
    )
    run.reply("measure", {"torque": 85})
    assert run.execution.outcome == "aborted"
    assert "Measure" in (run.execution.error or "")


def print_recipe(condition: str, **extra: Any) -> dict[str, Any]:
    return {
        "steps": steps("Print", "Done"),
        "transitions": [{"source": "Print", "target": "Done", "condition": condition}],
        "actions": [push("label", "Print")],
        **extra,
    }


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        (
            "label.printd",
            "transition from Print to Done: condition 'label.printd': the result of action "
            "'label' has no field 'printd' (it has: printed)",
        ),
        (
            "printd",
            "transition from Print to Done: condition 'printd': no result of the source step's "
            "actions has the field 'printd' (it has: printed)",
        ),
    ],
)
def test_a_field_the_result_lacks_aborts_naming_the_condition_and_the_field(
    condition: str, message: str
) -> None:
    run = Run(print_recipe(condition))
    run.reply("label", {"printed": True})
    assert run.execution.outcome == "aborted"
    assert run.effects.report == "abort"
    assert run.execution.error == message


def test_a_field_the_result_lacks_holds_with_on_error_hold_and_resume_runs_the_action_again() -> (
    None
):
    run = Run(print_recipe("label.printed", on_error="hold"))
    run.reply("label", {"printd": True})  # equipment with a typo
    assert run.status is Status.HELD
    assert run.effects.report == "hold"
    assert "has no field 'printed'" in (run.execution.error or "")
    assert run.phase("label") is Phase.FAILED
    run.command(JobCommand.RESUME)  # the equipment was fixed
    assert run.sent == ["label", "label"]
    assert run.execution.status is Status.RUNNING
    run.reply("label", {"printed": True})
    assert run.execution.outcome == "completed"
    assert run.execution.results == {"label": {"printed": True}}


def test_a_field_the_result_lacks_holds_when_another_action_of_the_step_answers_last() -> None:
    recipe = print_recipe("label.printed", on_error="hold")
    recipe["actions"].append(push("stamp", "Print"))
    run = Run(recipe)
    run.reply("label", {"printd": True})  # done, and so in the history, when stamp answers
    run.reply("stamp")
    assert run.status is Status.HELD
    assert "has no field 'printed'" in (run.execution.error or "")
    run.command(JobCommand.RESUME)
    assert run.effects.sends == ["label"]
    run.reply("label", {"printed": True})
    assert run.execution.outcome == "completed"


def test_a_bare_field_waits_for_a_source_action_that_still_runs() -> None:
    run = Run(
        {
            "steps": steps("Print", "Done"),
            "transitions": [{"source": "Print", "target": "Done", "condition": "stamped"}],
            "actions": [push("label", "Print"), push("stamp", "Print", qualifier="S")],
        }
    )
    run.reply("label", {"printed": True})  # stamp (stored, not blocking) may still say it
    assert run.active == {"Print"}
    assert run.status is Status.RUNNING
    run.reply("stamp", {"stamped": True})
    assert run.execution.outcome == "completed"


def test_named_conditions_in_a_fan_out_are_evaluated_once_each() -> None:
    named = {f"c_{i}": f"c_{i + 1} and c_{i + 1}" for i in range(12)}
    named["c_12"] = "label.printed"
    run = Run(print_recipe("c_0", conditions=named))
    run.reply("label", {"printed": True})
    assert run.execution.outcome == "completed"


def test_a_loop_that_never_waits_is_stopped() -> None:
    run = Run(
        {
            "steps": steps("A", "B", "End"),
            "transitions": [
                {"source": "A", "target": "B"},
                {"source": "B", "target": "A"},
                {"source": "B", "target": "End", "condition": "false"},
            ],
        }
    )
    assert run.execution.outcome == "aborted"
    assert "without waiting" in (run.execution.error or "")


def test_execution_state_round_trips_through_json() -> None:
    run = Run(
        {
            "steps": steps("A", "B"),
            "transitions": chain("A", "B"),
            "actions": [push("a", "A", timeout_seconds=3)],
        }
    )
    copy: Execution = load_execution(dump_execution(run.execution))
    assert copy == run.execution


def test_execution_state_is_compact_json_headed_by_scope_job_version_and_run() -> None:
    execution = Execution(scope="cell1", job='J "1"', version=7, run="r1")
    execution.actions["a"] = ActionRun(name="a", step="A", phase=Phase.DONE, deadline=2.5)
    execution.results["a"] = {"torque": 85.2, "serial": 2**70}  # beyond orjson's 64 bits
    execution.results["b"] = {"torque": 85.2}
    text = dump_execution(execution)
    assert text.startswith(
        '{"scope":"cell1","job":"J \\"1\\"","version":7,"run":"r1","status":"running",'
    )
    assert load_execution(text) == execution
    del execution.results["a"]
    text = dump_execution(execution)
    assert text.startswith(
        '{"scope":"cell1","job":"J \\"1\\"","version":7,"run":"r1","status":"running",'
    )
    assert '"phase":"done"' in text
    assert " " not in text.replace('J \\"1\\"', "")
    assert load_execution(text) == execution


def test_a_timeout_on_offline_equipment_says_so() -> None:
    run = Run(
        {
            "steps": steps("Tighten", "Done"),
            "transitions": chain("Tighten", "Done"),
            "actions": [push("tighten", "Tighten", timeout_seconds=5, equipment="tightener")],
        }
    )
    run.advance(5, offline="equipment tightener offline: last heartbeat 12.0 s ago")
    assert run.execution.outcome == "aborted"
    assert "equipment tightener offline: last heartbeat 12.0 s ago (no reply within 5 s)" in (
        run.execution.error or ""
    )


def test_an_action_without_timeout_fails_once_its_equipment_is_offline() -> None:
    run = Run(
        {
            "steps": steps("Tighten", "Done"),
            "transitions": chain("Tighten", "Done"),
            "actions": [push("tighten", "Tighten", equipment="tightener")],
        },
        liveness_seconds=60,
    )
    run.advance(60)  # online: keep waiting, look again later
    assert run.phase("tighten") is Phase.DISPATCHED
    run.advance(60, offline="equipment tightener offline: never seen (no heartbeat yet)")
    assert run.execution.outcome == "aborted"
    assert "equipment tightener offline" in (run.execution.error or "")
