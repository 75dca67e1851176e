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
