"""A task cancelled (from another notebook) while a job of its runs is
announced idle when that job ends, so ``Task.wait`` in the first notebook
wakes then, not at its next re-check: the tenant left at the cancel, and
only the running job kept it busy."""

from __future__ import annotations

from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.zoo import Engine

from .conftest import StartingExecutor
from .test_loop_recovery import fed_task


def test_a_task_cancelled_while_its_job_runs_is_announced_idle_when_the_job_ends():
    store, blobs, task = fed_task()
    events: list[tuple[int, dict]] = []
    executor = StartingExecutor(store, workers=1)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, publish=lambda o, e: events.append((o, e)))
    loop.costs.arm_costs = lambda task, configs, arms, n: {k: 1.0 for k in arms}  # (not under test)
    loop.recover()
    idle = lambda: [e for o, e in events if e.get("type") == "task" and e.get("status") == "idle"]  # noqa: E731
    try:
        loop.step()
        assert executor.running  # her first job runs
        store.set_task_cancelled(task.id, True)  # the other notebook cancels
        loop.notify(task.id)
        loop.step()
        assert idle() == [] and not loop.view.is_idle(task.id)  # the job still runs
        executor.finish_all()
        loop.step()
    finally:
        loop.stop()
    assert idle() == [{"type": "task", "task_id": task.id, "status": "idle"}]
    assert loop.view.is_idle(task.id)
