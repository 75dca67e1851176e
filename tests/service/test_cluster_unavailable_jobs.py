"""A job that fails because the cluster could not run it (no worker, a
worker lost with its data) is an infrastructure failure, as a storage
failure is: it carries ``FAILURE_TAG`` and its code, and the loop does not
tell the selector (no quality-0 observation) but holds the tenant and picks
the arm again later."""

from __future__ import annotations

import dask
import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.errors import ClusterUnavailableError
from ease_jupyter.service.executors import ThreadExecutor
from ease_jupyter.service.failures import error_code, fail_job, failure_code
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.service.runner import SklearnJobs
from ease_jupyter.store import JobStatus, open_store
from ease_jupyter.zoo import Engine

from .conftest import until

distributed = pytest.importorskip("distributed")


def test_a_cluster_failure_is_kept_from_the_selector_like_a_storage_failure():
    store, blobs = open_store("memory://")
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [2] output: [2]")
    version = datasets.feed(store, blobs, task, np.zeros((4, 2), "float32"), np.array([0, 1, 0, 1]))
    job = store.update_job(store.create_job(task.id, version.id, "m", {}).id, JobStatus.RUNNING)
    failed = fail_job(store, job.id, ClusterUnavailableError("a worker of the cluster was lost; retried later"))
    assert failed.status is JobStatus.FAILED
    assert failure_code(store, failed) == error_code(store, failed) == "cluster_unavailable"
    assert failed.error == "a worker of the cluster was lost; retried later"


def test_a_scheduler_without_workers_fails_no_model(iris):
    """A scheduler that came back before its workers: the grid's data finds
    no worker ("No valid workers found"), the job fails as
    ``cluster_unavailable``, and the selector learns nothing of the model."""
    cluster = distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp://", dashboard_address=None)
    store, blobs = open_store("memory://")
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [4] output: [3]")
    datasets.feed(store, blobs, task, *iris)
    executor = ThreadExecutor(SklearnJobs(engine=cluster.scheduler_address), store, blobs, 1)
    loop = ControlLoop(store, blobs, executors={Engine.SKLEARN: executor}, tick_seconds=0.02)
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):  # the scatter's wait for a worker
        loop.start()
        try:
            assert until(lambda: any(j.status is JobStatus.FAILED for j in store.list_jobs(task.id)), 60)
            assert until(lambda: loop.n_running() == 0, 60)
            loop.step()
            jobs = store.list_jobs(task.id)
            failed = [j for j in jobs if j.status is JobStatus.FAILED]
            assert len(jobs) == len(failed) == 1  # held back: no second pick fails the same way
            assert failure_code(store, failed[0]) == "cluster_unavailable"
            assert "tcp://" not in failed[0].error and "TimeoutError" not in failed[0].error
            tenant = f"{task.id}/{store.latest_dataset_version(task.id).id}"
            with loop._lock:
                stats = loop.selector.stats(tenant)
            assert stats["n_obs"] == 0 and stats["pending"] == [] and stats["eligible"]
        finally:
            loop.stop()
            cluster.close()
            store.close()
