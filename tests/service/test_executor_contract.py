"""Our two executors pass the executor contract (ease_jupyter.testing.executor_contract);
a process executor made with ``start_workers=False`` spawns its workers only when asked."""

from __future__ import annotations

import time

import pytest

from ease_jupyter.service.executors import ProcessExecutor, ThreadExecutor
from ease_jupyter.store import open_store
from ease_jupyter.testing.executor_contract import *  # noqa: F401,F403 - the suite's tests
from ease_jupyter.testing.executor_contract import ContractRunner


@pytest.fixture
def stores(tmp_path):
    store, blobs = open_store(None, tmp_path)  # SQLite: worker processes open it too
    yield store, blobs
    store.close()


@pytest.fixture
def process_executor_factory(tmp_path, stores):
    def make(runner, workers=1, publish=None):
        return ProcessExecutor(runner, None, tmp_path, workers, publish=publish)
    return make


@pytest.fixture(params=["thread", "process"])
def executor_factory(request, stores, process_executor_factory):
    if request.param == "process":
        return process_executor_factory

    def make(runner, workers=1, publish=None):
        return ThreadExecutor(runner, *stores, workers, publish=publish)
    return make


def test_a_process_executor_made_idle_starts_its_workers_at_warm_and_only_once(tmp_path, stores):
    executor = ProcessExecutor(ContractRunner(), None, tmp_path, 2, start_workers=False)
    try:
        time.sleep(0.5)
        assert executor.worker_pids() == []  # nothing asked for them yet
        executor.warm()
        deadline = time.monotonic() + 30
        while len(executor.worker_pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = executor.worker_pids()
        executor.warm()  # they run: nothing more starts
        time.sleep(0.5)
        assert len(pids) == 2 and executor.worker_pids() == pids
    finally:
        executor.shutdown()


def test_a_worker_that_cannot_start_fails_that_job_alone_and_the_dispatcher_goes_on(tmp_path, stores, monkeypatch):
    from ease_jupyter.service.executors import WorkerDied
    from ease_jupyter.store import JobStatus

    store, _ = stores
    user = store.create_user("ada", None)
    task = store.create_task(user.id, "t", "input: [2] output: [3]")
    from ease_jupyter.testing.store_contract import feed

    version = feed(store, task.id, 2, seed="x")
    jobs = [store.create_job(task.id, version.id, "m", {"score": 0.7}) for _ in range(2)]
    executor = ProcessExecutor(ContractRunner(), None, tmp_path, 1, start_workers=False)
    real = executor._start_worker
    calls = []

    def out_of_processes_once():
        calls.append(1)
        if len(calls) == 1:
            raise OSError(11, "Resource temporarily unavailable")
        return real()

    monkeypatch.setattr(executor, "_start_worker", out_of_processes_once)
    try:
        with pytest.raises(WorkerDied, match="no worker process could be started"):
            executor.submit(jobs[0].id).result(30)
        executor.submit(jobs[1].id).result(60)  # the dispatcher lives on, and the next start works
        assert store.get_job(jobs[1].id).status is JobStatus.SUCCEEDED
        assert store.get_job(jobs[0].id).status is JobStatus.QUEUED  # never started: the loop retries it
    finally:
        executor.shutdown()
