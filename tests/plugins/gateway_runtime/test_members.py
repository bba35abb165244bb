"""The outbox's and the timers' member names: the text ``json.dumps`` writes, which members kept
in Redis by an earlier version are matched against."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway_runtime.executions import TRY_TIMERS, outbox_member, timer_member

names = st.text(min_size=1)
attempts = st.integers(min_value=0, max_value=2**40)


@given(job=names, action=names, attempt=attempts)
def test_an_outbox_member_is_the_json_of_its_try(job: str, action: str, attempt: int) -> None:
    assert outbox_member(job, action, attempt) == json.dumps([job, action, attempt])


@given(job=names, kind=st.sampled_from(TRY_TIMERS), action=names, attempt=attempts)
def test_a_timer_member_is_the_sorted_json_of_its_timer(
    job: str, kind: str, action: str, attempt: int
) -> None:
    expected = json.dumps(
        {"job": job, "kind": kind, "action": action, "attempt": attempt}, sort_keys=True
    )
    assert timer_member(job, kind, action, attempt) == expected
