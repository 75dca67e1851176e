"""A runner that shares its engine (``shares_engine = True``, as the torch
jobs do: one MOP driver per engine interleaves them) runs its ``workers`` jobs
at once on ONE engine: the thread executor's threads share it, and the
process executor runs them as threads of one worker process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from ease_jupyter.service.executors import ProcessExecutor, ThreadExecutor
from ease_jupyter.store import open_store
from ease_jupyter.testing.executor_contract import WAIT, ContractRunner, _jobs


@dataclass(frozen=True)
class SharingRunner(ContractRunner):
    shares_engine: ClassVar[bool] = True


@pytest.fixture
def stores(tmp_path):
    store, blobs = open_store(None, tmp_path)
    yield store, blobs
    store.close()


def _spans(store, job_ids):
    tags = [store.tags("job", j) for j in job_ids]
    return [(float(t["start"]), float(t["end"]), t["pid"]) for t in tags]


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_jobs_of_a_sharing_runner_run_at_once_on_one_engine(stores, tmp_path, kind):
    store, blobs = stores
    job_ids = _jobs(stores, *[{"sleep": 1.0}] * 3)
    if kind == "thread":
        executor = ThreadExecutor(SharingRunner(), store, blobs, 3)
    else:
        executor = ProcessExecutor(SharingRunner(), None, tmp_path, 3)
    try:
        for future in [executor.submit(j) for j in job_ids]:
            future.result(WAIT)
        if kind == "thread":
            assert len(executor.engines()) == 1  # one engine for the three job slots
        else:
            assert len(executor.worker_pids()) == 1  # one process (one engine) for the three
    finally:
        executor.shutdown()
    spans = _spans(store, job_ids)
    assert all(a[0] < b[1] and b[0] < a[1] for a in spans for b in spans if a is not b)  # all three overlapped
    assert len({pid for *_, pid in spans}) == 1
