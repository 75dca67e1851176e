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
