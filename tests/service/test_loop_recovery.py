"""ControlLoop recovery without HTTP: a restored selector is reconciled with
the jobs in the store (results that landed after the last save are reported,
pending picks with no job behind them are released)."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np

from ease_jupyter import datasets
from ease_jupyter.schema import program_from_shapes
from ease_jupyter.schema import format_program
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.store import InMemoryStore, JobStatus, JobUpdate, MemoryBlobStore
from ease_jupyter.zoo import Engine


class Stuck:
    """An executor whose jobs never finish (a worker that hangs)."""

    workers = 2

    def __init__(self):
        self.submitted: list[int] = []

    def submit(self, job_id: int) -> Future:
        self.submitted.append(job_id)
        return Future()

    def shutdown(self) -> None:
        pass


def fed_task():
    """An in-memory store with one user's task fed 30 random examples."""
    store, blobs = InMemoryStore(), MemoryBlobStore()
    user = store.create_user("ada", "h" * 64)
    task = store.create_task(user.id, "t", format_program(program_from_shapes([4], [3])))
    rng = np.random.default_rng(0)
    datasets.feed(store, blobs, task, rng.normal(size=(30, 4)).astype("float32"), rng.integers(0, 3, 30))
    return store, blobs, task


def test_reconcile_after_restart():
    store, blobs, task = fed_task()

    first = ControlLoop(store, blobs, executors={Engine.SKLEARN: Stuck()}, max_running_per_user=2)
    first.recover()
    first.step()
    running = [j for j in store.list_jobs() if j.status is JobStatus.QUEUED or j.id in first.state.running]
    assert len(running) == 2 and len(first.selector.pending()) == 2
    # the service dies: one job finished after the last save, the other was running
    done, lost = sorted(first.state.running)
    store.update_job(done, JobStatus.RUNNING)
    store.update_job(done, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.7, cost_seconds=0.1))
    store.update_job(lost, JobStatus.RUNNING)

    executor = Stuck()
    second = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=2)
    second.recover()
    assert store.get_job(lost).status is JobStatus.QUEUED  # re-queued
    tenant = second.selector.users[0]
    assert second.selector.stats(tenant)["n_obs"] == 1  # the late result was reported
    second.step()
    assert executor.submitted[0] == lost  # the re-queued job runs first
    assert len(executor.submitted) == 2 and len(second.selector.pending()) == 2


class Crashing:
    """An executor whose worker dies after marking the job running, once per job."""

    workers = 1

    def __init__(self, store):
        self.store, self.calls = store, []

    def submit(self, job_id: int) -> Future:
        self.calls.append(job_id)
        future: Future = Future()
        job = self.store.get_job(job_id)
        if job.status is JobStatus.QUEUED:
            self.store.update_job(job_id, JobStatus.RUNNING)
        if self.calls.count(job_id) == 1:
            future.set_exception(RuntimeError("worker killed"))
        else:
            future.set_result(self.store.update_job(job_id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.5, cost_seconds=0.01)))
        return future

    def shutdown(self) -> None:
        pass


def test_a_job_lost_by_its_worker_is_requeued_and_rerun():
    store, blobs, task = fed_task()
    executor = Crashing(store)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor})
    loop.recover()
    for _ in range(6):
        loop.step()
    first = executor.calls[0]
    assert executor.calls[:2] == [first, first]  # re-run before anything new
    job = store.get_job(first)
    assert job.status is JobStatus.SUCCEEDED and job.attempts == 2
    assert loop.selector.stats(loop.selector.users[0])["n_obs"] >= 1


def test_resume_replays_finished_results_instead_of_retraining():
    store, blobs, task = fed_task()
    executor = Crashing(store)
    executor.calls = [0] * 0
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor})
    loop.recover()
    for _ in range(4):
        loop.step()
    done = {j.id for j in store.list_jobs(status=JobStatus.SUCCEEDED)}
    assert done
    store.set_task_cancelled(task.id, True)
    loop.notify(task.id)
    loop.step()
    assert loop.selector.users == []
    store.set_task_cancelled(task.id, False)
    loop.notify(task.id)
    loop._sync()
    assert loop.selector.stats(loop.selector.users[0])["n_obs"] == len(done)


def _arms_per_version(store, task_id):
    jobs = [j for j in store.list_jobs(task_id) if j.status is not JobStatus.CANCELLED]
    return [(j.dataset_version_id, j.model, tuple(sorted(j.config.items(), key=str))) for j in jobs]


def test_picks_launched_after_the_last_save_are_not_picked_again_after_a_restart():
    from .conftest import ManualExecutor

    store, blobs, task = fed_task()
    executor = ManualExecutor(store, workers=2)
    first = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=2)
    first.recover()
    first.step()  # two picks, saved (save_every_seconds=0)
    executor.finish_all()
    first.saved.save_every = 1e9  # from here on nothing is saved: the service dies before its next save
    first.step()  # two results, two new picks launched and never saved
    assert len(store.list_jobs(task.id)) == 4

    second_executor = Stuck()
    second_executor.workers = 6  # room for the queued jobs and for new picks beside them
    second = ControlLoop(store, blobs, executors={Engine.SKLEARN: second_executor}, max_running_per_user=4)
    second.recover()
    second.step()
    arms = _arms_per_version(store, task.id)
    assert len(arms) == 6 and len(arms) == len(set(arms)), arms  # no arm of the version trained twice
    assert len(second_executor.submitted) >= 2  # the two unsaved picks were started again, not re-picked


def test_a_restart_without_a_saved_state_holds_the_arms_of_queued_jobs():
    store, blobs, task = fed_task()
    first = ControlLoop(store, blobs, executors={Engine.SKLEARN: Stuck()}, max_running_per_user=2,
                        save_every_seconds=1e9)  # never saved
    first.recover()
    first.step()
    second_executor = Stuck()
    second_executor.workers = 6
    second = ControlLoop(store, blobs, executors={Engine.SKLEARN: second_executor}, max_running_per_user=4)
    second.recover()
    second.step()
    arms = _arms_per_version(store, task.id)
    assert len(arms) == 4 and len(arms) == len(set(arms)), arms


def _one_job_launched(cap: int):
    """A fed task whose loop launched one job on a one-worker manual executor:
    (store, blobs, task, executor, loop, the job's id, its future)."""
    from .conftest import ManualExecutor

    store, blobs, task = fed_task()
    executor = ManualExecutor(store, workers=1)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, max_running_per_user=cap)
    loop.recover()
    loop.step()
    (job_id, future), = executor.running
    return store, blobs, task, executor, loop, job_id, future


def test_a_task_resumed_while_its_job_runs_does_not_pick_that_arm_again():
    store, blobs, task, executor, loop, job_id, future = _one_job_launched(cap=2)
    executor.workers = 2  # from here on a second slot is free beside the running job
    executor.running.clear()
    store.update_job(job_id, JobStatus.RUNNING)  # its worker started it
    store.set_task_cancelled(task.id, True)
    loop.notify(task.id)
    loop.step()  # the tenant goes; its job runs on
    store.set_task_cancelled(task.id, False)
    loop.notify(task.id)
    loop.step()  # the tenant comes back while the job runs
    future.set_result(store.update_job(job_id, JobStatus.SUCCEEDED, JobUpdate(accuracy=0.8, cost_seconds=0.01)))
    loop.step()
    executor.finish_all()
    loop.step()
    arms = _arms_per_version(store, task.id)
    assert len(arms) == len(set(arms)), arms
    tenant = loop.selector.users[0]
    finished = [j for j in store.list_jobs(task.id) if j.status is JobStatus.SUCCEEDED]
    assert loop.selector.stats(tenant)["n_obs"] == len(finished) >= 2  # each result reported once


def test_one_task_that_cannot_be_taken_in_keeps_no_other_from_its_turn(monkeypatch):
    store, blobs, task = fed_task()
    other = store.create_task(task.owner_id, "other", task.program)
    rng = np.random.default_rng(1)
    datasets.feed(store, blobs, other, rng.normal(size=(30, 4)).astype("float32"), rng.integers(0, 3, 30))
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: Stuck()}, max_running_per_user=4)
    real = loop.costs.arm_costs

    def broken_for_the_first(task_, *args, **kwargs):
        if task_.id == task.id:
            raise RuntimeError("pricing broke")
        return real(task_, *args, **kwargs)

    monkeypatch.setattr(loop.costs, "arm_costs", broken_for_the_first)
    loop.recover()
    loop.step()
    assert [t.task_id for t in loop.state.tenants.values()] == [other.id]  # the other task was taken in
    assert not loop.is_idle(task.id)  # and the broken one is not shown idle: it is tried again
    monkeypatch.setattr(loop.costs, "arm_costs", real)
    loop.step()
    assert {t.task_id for t in loop.state.tenants.values()} == {task.id, other.id}


def test_a_lost_job_of_a_replaced_version_is_cancelled_not_left_queued():
    store, blobs, task, executor, loop, job_id, future = _one_job_launched(cap=1)
    store.update_job(job_id, JobStatus.RUNNING)
    rng = np.random.default_rng(2)
    datasets.feed(store, blobs, task, rng.normal(size=(5, 4)).astype("float32"), rng.integers(0, 3, 5))
    loop.notify(task.id)
    loop.step()  # the new version replaces the tenant; the old job still runs
    executor.running.clear()
    future.set_result(store.get_job(job_id))  # its worker died: it comes back still RUNNING
    loop.step()
    assert store.get_job(job_id).status is JobStatus.CANCELLED


def test_a_turn_cut_short_after_its_picks_leaves_them_to_be_saved(monkeypatch):
    import pytest

    store, blobs, task = fed_task()
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: Stuck()}, max_running_per_user=2,
                       save_every_seconds=1e9)
    loop.recover()

    def fails(*args, **kwargs):
        raise RuntimeError("the express slots broke")

    monkeypatch.setattr(loop.admission, "pick_express", fails)
    loop.saved.unsaved = False
    with pytest.raises(RuntimeError):
        loop.step()
    assert store.list_jobs(task.id) and loop.saved.unsaved  # picks launched: the next turn that ends saves them
