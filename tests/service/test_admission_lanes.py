"""Slots kept for short jobs (``loop.lanes.ShortLane``): one user's costly picks
do not fill an engine, so a newcomer's pick starts at once."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import DataError
from ease_jupyter.schema import format_program, program_from_shapes
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.loop.lanes import ShortLane
from ease_jupyter.store import InMemoryStore, JobStatus, MemoryBlobStore
from ease_jupyter.zoo import Engine

from .conftest import ManualExecutor

LONG, SHORT = 300.0, 0.5  # hand-made predicted seconds: every arm of the "costly" task, of the "cheap" one


def add_task(store, blobs, owner: str, name: str):
    user = store.create_user(owner, owner[0] * 64)
    task = store.create_task(user.id, name, format_program(program_from_shapes([4], [3])))
    rng = np.random.default_rng(len(name))
    datasets.feed(store, blobs, task, rng.normal(size=(30, 4)).astype("float32"), rng.integers(0, 3, 30))
    return task


def running_of(store, task) -> list:
    return [j for j in store.list_jobs(task.id) if j.status in (JobStatus.QUEUED, JobStatus.RUNNING)]


def newcomer_after_costly(lane: ShortLane, newcomer: str = "cheap"):
    """Eve's costly task arrives on an idle service with two slots; then Fay's ``newcomer`` task."""
    store, blobs = InMemoryStore(), MemoryBlobStore()
    costly = add_task(store, blobs, "eve", "costly")
    executor = ManualExecutor(store, workers=2)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=2)
    loop.admission.lane = lane
    # the profiler and the FLOPs proxy are not under test: every arm costs what the case says
    loop.costs.arm_costs = lambda task, configs, arms, n: {k: LONG if task.name.startswith("costly") else SHORT
                                                                  for k in arms}
    loop.recover()
    loop.step()
    first = running_of(store, costly)
    cheap = add_task(store, blobs, "fay", newcomer)
    loop.notify(cheap.id)
    loop.step()  # no job has finished: whatever starts now starts within the newcomer's own wait
    loop.stop()
    return first, running_of(store, costly), running_of(store, cheap)


def test_a_costly_pick_leaves_the_last_slot_and_a_newcomer_starts_at_once():
    first, costly, cheap = newcomer_after_costly(ShortLane(long_seconds=30.0, reserved=1))
    assert len(first) == 1  # her second costly pick would have taken the last free slot
    assert len(costly) == 1 and len(cheap) == 1  # the newcomer's cheap model runs beside it, now


def test_a_newcomers_first_costly_pick_is_not_held():
    """The reserve is kept against one user's further long jobs: a newcomer whose
    every model is costly (a torch task's may all be) still starts at once."""
    first, costly, newcomers = newcomer_after_costly(ShortLane(long_seconds=30.0, reserved=1), newcomer="costly too")
    assert len(first) == 1 and len(costly) == 1 and len(newcomers) == 1


def test_without_the_lane_the_costly_picks_take_every_slot_and_the_newcomer_waits():
    first, costly, cheap = newcomer_after_costly(ShortLane(long_seconds=math.inf))
    assert len(first) == 2 and len(costly) == 2
    assert cheap == []  # she waits for a costly job to end


@pytest.mark.parametrize("seconds, slots, long_running, admitted", [
    (SHORT, 2, 1, True),  # short picks are never held by the lane
    (LONG, 2, 0, True),
    (LONG, 2, 1, False),  # her second long job would fill the engine: the last slot is kept
    (LONG, 3, 1, True),
    (LONG, 1, 0, True),  # one slot, nothing to keep: it takes any pick
    (LONG, 1, 1, False),
])
def test_the_rule(seconds, slots, long_running, admitted):
    assert ShortLane(long_seconds=30.0, reserved=1).admits(seconds, slots, long_running) is admitted


def test_bad_settings_name_the_field():
    with pytest.raises(DataError, match="long_seconds"):
        ShortLane(long_seconds=0)
    with pytest.raises(DataError, match="reserved"):
        ShortLane(reserved=-1)


def test_the_service_config_checks_its_lane_settings(tmp_path):
    from ease_jupyter.service.config import ServiceConfig

    with pytest.raises(ValueError, match="long_job_seconds"):
        ServiceConfig(data_dir=tmp_path, long_job_seconds=0.0)
    with pytest.raises(ValueError, match="short_slots"):
        ServiceConfig(data_dir=tmp_path, short_slots=-1)
    assert ServiceConfig(data_dir=tmp_path, long_job_seconds=math.inf, short_slots=0).short_slots == 0


def test_the_service_runs_the_lane_it_was_configured_with(tmp_path):
    from .conftest import start

    running = start(tmp_path, long_job_seconds=12.0, short_slots=2)
    try:
        assert running.thread.service.loop.admission.lane == ShortLane(long_seconds=12.0, reserved=2)
    finally:
        running.thread.stop()


def test_after_a_restart_her_requeued_long_job_still_holds_her_long_slot():
    store, blobs = InMemoryStore(), MemoryBlobStore()
    costly = add_task(store, blobs, "eve", "costly")

    def service_loop() -> ControlLoop:
        loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: ManualExecutor(store, workers=2)},
                           max_running_per_user=2)
        loop.admission.lane = ShortLane(long_seconds=30.0, reserved=1)
        loop.costs.arm_costs = lambda task, configs, arms, n: {k: LONG for k in arms}
        return loop

    before = service_loop()
    before.recover()
    before.step()
    before.stop()
    assert len(running_of(store, costly)) == 1
    after = service_loop()  # the service restarts: her running job is queued again and relaunched
    after.recover()
    after.step()
    after.step()
    after.stop()
    assert len(running_of(store, costly)) == 1  # relaunched, it counts: her next long pick is still held


def test_the_lane_is_off_by_default_and_with_no_long_line():
    assert not ShortLane().active  # the service's default: no slot kept, nothing counted
    assert not ShortLane(long_seconds=math.inf, reserved=1).active
    assert ShortLane(long_seconds=30.0, reserved=1).active
