"""The profiling runs of a family's first job (ACAI §4.2.2): a few subsample
sizes at one thread and at the job's threads."""

from __future__ import annotations

import pytest

from ease_jupyter.errors import DataError
from ease_jupyter.selection.profile_plan import (
    MAX_ROWS,
    MIN_ROWS,
    ProfileRun,
    plan_from_json,
    plan_runs,
    plan_to_json,
)


def test_two_sizes_at_one_thread_and_at_the_jobs_threads():
    runs = plan_runs(1600, 4)
    assert runs == (ProfileRun(200, 1), ProfileRun(200, 4), ProfileRun(400, 1), ProfileRun(400, 4))


def test_a_one_thread_job_is_profiled_at_one_thread_only():
    assert plan_runs(1600, 1) == (ProfileRun(200, 1), ProfileRun(400, 1))


def test_sizes_are_clipped_deduplicated_and_below_the_tasks():
    assert {r.n for r in plan_runs(10**7, 2)} == {MAX_ROWS}
    assert {r.n for r in plan_runs(100, 2)} == {MIN_ROWS}  # n/8 and n/4 both below the minimum
    assert plan_runs(MIN_ROWS, 2) == ()  # a subsample would be the whole task
    assert plan_runs(0) == ()


def test_at_most_max_runs():
    assert len(plan_runs(1600, 4, fractions=(0.1, 0.2, 0.3), max_runs=4)) == 4


@pytest.mark.parametrize("n, threads", [(-1, 1), (10, 0), (10, True), (1.5, 1)])
def test_bad_arguments_name_the_field(n, threads):
    with pytest.raises(DataError):
        plan_runs(n, threads)


def test_a_plan_reads_back_and_an_unreadable_one_is_empty():
    runs = plan_runs(1600, 2)
    assert plan_from_json(plan_to_json("logreg", runs)) == runs
    assert plan_from_json("{") == () and plan_from_json('{"runs": [{"n": 0, "threads": 1}]}') == ()
