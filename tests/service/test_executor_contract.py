"""Our two executors pass the executor contract (ease_jupyter.testing.executor_contract)."""

from __future__ import annotations

import pytest

from ease_jupyter.service.executors import ProcessExecutor, ThreadExecutor
from ease_jupyter.store import open_store
from ease_jupyter.testing.executor_contract import *  # noqa: F401,F403 - the suite's tests


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
