"""The ``JobExecutor`` contract (``ease_jupyter.service.executors``), as a
reusable pytest suite.

Every executor must pass the ``test_*`` functions below; those named
``test_process_*`` hold for executors that run jobs in worker processes.
The suite also covers ``call`` (a short function run where the jobs run,
beside them). To run the suite, import it into a test module and provide the fixtures::

    from ease_jupyter.testing.executor_contract import *  # noqa: F401,F403

    @pytest.fixture
    def executor_factory(stores):
        def make(runner, workers=1, publish=None):
            return MyExecutor(runner, ..., workers, publish=publish)
        return make

Fixtures a test module provides:

* ``stores``: ``(store, blobs)``, the store the executor's jobs live in;
* ``executor_factory``: ``make(runner, workers=1, publish=None)``, a new
  executor of ``runner`` (a ``JobRunner``) on that store;
* ``process_executor_factory`` (only for the ``test_process_*`` tests): the
  same, for an executor whose workers are processes with ``worker_pids()``.

The suite trains nothing: its runner (``ContractRunner``) does what each
job's config asks (sleep, publish an event, raise, report a score) and
records where and when it ran as job tags.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np
import pytest

from ..store import BlobStore, Job, JobStatus, JobUpdate, Store

__all__ = [
    "ContractRunner",
    "test_submit_runs_a_job_to_its_end",
    "test_published_events_reach_the_executors_publish",
    "test_jobs_start_in_submission_order_on_one_worker",
    "test_never_more_jobs_at_once_than_workers",
    "test_a_runner_error_fails_only_its_own_future",
    "test_shutdown_cancels_queued_jobs_and_waits_for_running_ones",
    "test_a_call_is_answered_while_a_job_runs",
    "test_a_failing_call_fails_only_its_own_future",
    "test_warm_twice_then_jobs_run_as_before",
    "test_process_workers_are_other_processes",
    "test_process_a_killed_worker_fails_only_its_own_job",
]

WAIT = 120.0  # seconds a contract test waits for a future: a spawned worker imports the package first


@dataclass(frozen=True)
class _Engine:
    def close(self) -> None:
        pass


@dataclass(frozen=True)
class ContractRunner:
    """A ``JobRunner`` that does what a job's config says: ``sleep`` seconds,
    ``event`` (publish ``{"type": "contract", "job_id": id}`` to owner 0),
    ``raise`` (an error of its own, not recorded on the job), ``score`` (the
    accuracy of a success). It tags the job with its ``pid`` and the
    ``start``/``end`` times (``time.time()``)."""

    shares_engine: ClassVar[bool] = False

    def make_engine(self) -> Any:
        return _Engine()

    def run(self, store: Store, blobs: BlobStore, engine: Any, job_id: int,
            publish: Callable[[int, dict], None]) -> Job:
        job = store.update_job(job_id, JobStatus.RUNNING)
        config = dict(job.config)
        store.set_tag("job", job_id, "pid", str(os.getpid()))
        store.set_tag("job", job_id, "start", repr(time.time()))
        time.sleep(float(config.get("sleep", 0.0)))
        if config.get("event"):
            publish(0, {"type": "contract", "job_id": job_id})
        if config.get("raise"):
            raise RuntimeError(f"job {job_id} asked to raise")
        store.set_tag("job", job_id, "end", repr(time.time()))
        return store.update_job(job_id, JobStatus.SUCCEEDED, JobUpdate(accuracy=float(config.get("score", 0.5))))


def _jobs(stores: tuple[Store, BlobStore], *configs: dict) -> list[int]:
    """Queued jobs of a fresh task, one per config."""
    from ..datasets import feed

    store, blobs = stores
    user = store.create_user(f"u{time.monotonic_ns()}", "h" * 64)
    task = store.create_task(user.id, "t", "input: [2] output: [2]")
    version = feed(store, blobs, task, np.zeros((4, 2), dtype=np.float32), np.arange(4) % 2)
    return [store.create_job(task.id, version.id, "contract", config).id for config in configs]


def _run_all(executor: Any, job_ids: list[int]) -> None:
    """Submit every job, wait for all of them, shut the executor down."""
    try:
        for future in [executor.submit(j) for j in job_ids]:
            future.result(WAIT)
    finally:
        executor.shutdown()


def _span(store: Store, job_id: int) -> tuple[float, float]:
    tags = store.tags("job", job_id)
    return float(tags["start"]), float(tags["end"])


def test_submit_runs_a_job_to_its_end(stores, executor_factory):
    store, _ = stores
    (job_id,) = _jobs(stores, {"score": 0.75})
    executor = executor_factory(ContractRunner())
    try:
        executor.submit(job_id).result(WAIT)
    finally:
        executor.shutdown()
    job = store.get_job(job_id)
    assert job.status is JobStatus.SUCCEEDED and job.accuracy == 0.75


def test_published_events_reach_the_executors_publish(stores, executor_factory):
    seen: list[tuple[int, dict]] = []
    got = threading.Event()

    def publish(owner: int, event: dict) -> None:
        seen.append((owner, event))
        got.set()

    job_ids = _jobs(stores, {"event": True}, {"event": True})
    executor = executor_factory(ContractRunner(), publish=publish)
    try:
        for future in [executor.submit(j) for j in job_ids]:
            future.result(WAIT)
        assert got.wait(WAIT)
        deadline = time.monotonic() + WAIT
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # an event may arrive just after its job's result
    finally:
        executor.shutdown()
    assert sorted(e["job_id"] for _, e in seen) == job_ids and {o for o, _ in seen} == {0}


def test_jobs_start_in_submission_order_on_one_worker(stores, executor_factory):
    store, _ = stores
    job_ids = _jobs(stores, *({"sleep": 0.05} for _ in range(4)))
    _run_all(executor_factory(ContractRunner(), 1), job_ids)
    spans = [_span(store, j) for j in job_ids]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans  # FIFO, one at a time


def test_never_more_jobs_at_once_than_workers(stores, executor_factory):
    store, _ = stores
    job_ids = _jobs(stores, *({"sleep": 0.3} for _ in range(5)))
    _run_all(executor_factory(ContractRunner(), 2), job_ids)
    spans = [_span(store, j) for j in job_ids]
    most = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert all(store.get_job(j).status is JobStatus.SUCCEEDED for j in job_ids)
    assert 1 <= most <= 2, spans


def test_a_runner_error_fails_only_its_own_future(stores, executor_factory):
    store, _ = stores
    bad, good = _jobs(stores, {"raise": True}, {"score": 0.25})
    executor = executor_factory(ContractRunner(), 1)
    try:
        failing, passing = executor.submit(bad), executor.submit(good)
        with pytest.raises(Exception, match=f"job {bad} asked to raise"):
            failing.result(WAIT)
        passing.result(WAIT)
    finally:
        executor.shutdown()
    assert store.get_job(good).accuracy == 0.25


def test_shutdown_cancels_queued_jobs_and_waits_for_running_ones(stores, executor_factory):
    store, _ = stores
    running, queued = _jobs(stores, {"sleep": 1.0}, {})
    executor = executor_factory(ContractRunner(), 1)
    first, second = executor.submit(running), executor.submit(queued)
    deadline = time.monotonic() + WAIT
    while "start" not in store.tags("job", running) and time.monotonic() < deadline:
        time.sleep(0.01)
    executor.shutdown()
    assert first.done() and store.get_job(running).status is JobStatus.SUCCEEDED
    with pytest.raises(CancelledError):
        second.result(0)
    assert store.get_job(queued).status is JobStatus.QUEUED


def job_status(store: Store, blobs: BlobStore, job_id: int) -> tuple[int, str]:
    """A contract call: where it ran (pid) and the job's status as its store reads it."""
    return os.getpid(), store.get_job(job_id).status.value


def raise_in_call(store: Store, blobs: BlobStore, message: str) -> None:
    raise ValueError(message)


def test_a_call_is_answered_while_a_job_runs(stores, executor_factory):
    """``call`` runs beside the jobs (where they run), not after them."""
    store, _ = stores
    (job_id,) = _jobs(stores, {"sleep": 3.0})
    executor = executor_factory(ContractRunner(), 1)
    try:
        running = executor.submit(job_id)
        deadline = time.monotonic() + WAIT
        while "start" not in store.tags("job", job_id) and time.monotonic() < deadline:
            time.sleep(0.01)
        pid, status = executor.call(job_status, job_id).result(WAIT)
        assert status == "running" and not running.done()
        assert pid == int(store.tags("job", job_id)["pid"])  # in the process that runs the jobs
        running.result(WAIT)
    finally:
        executor.shutdown()


def test_a_failing_call_fails_only_its_own_future(stores, executor_factory):
    (job_id,) = _jobs(stores, {"score": 0.5})
    executor = executor_factory(ContractRunner(), 1)
    try:
        with pytest.raises(Exception, match="no such model"):
            executor.call(raise_in_call, "no such model").result(WAIT)
        executor.submit(job_id).result(WAIT)
        assert executor.call(job_status, job_id).result(WAIT)[1] == "succeeded"
    finally:
        executor.shutdown()


def test_warm_twice_then_jobs_run_as_before(stores, executor_factory):
    job_ids = _jobs(stores, {"sleep": 0.1}, {"sleep": 0.1})
    executor = executor_factory(ContractRunner(), 2)
    try:
        executor.warm()
        executor.warm()  # a second warm is harmless
        for future in [executor.submit(j) for j in job_ids]:
            future.result(WAIT)
        assert all(stores[0].get_job(j).status is JobStatus.SUCCEEDED for j in job_ids)
    finally:
        executor.shutdown()


def test_process_workers_are_other_processes(stores, process_executor_factory):
    store, _ = stores
    job_ids = _jobs(stores, {"sleep": 0.2}, {"sleep": 0.2})
    executor = process_executor_factory(ContractRunner(), 2)
    try:
        for future in [executor.submit(j) for j in job_ids]:
            future.result(WAIT)
        pids = {int(store.tags("job", j)["pid"]) for j in job_ids}
        assert os.getpid() not in pids and pids <= set(executor.worker_pids())
    finally:
        executor.shutdown()


def test_process_a_killed_worker_fails_only_its_own_job(stores, process_executor_factory):
    """A worker SIGKILLed mid-job: that job's future fails and the job is
    left RUNNING (the control loop re-queues it); its sibling finishes, and
    a new job gets a fresh worker."""
    store, _ = stores
    victim, sibling, later = _jobs(stores, {"sleep": 60.0}, {"sleep": 1.0, "score": 0.5}, {"score": 0.9})
    executor = process_executor_factory(ContractRunner(), 2)
    try:
        doomed, other = executor.submit(victim), executor.submit(sibling)
        deadline = time.monotonic() + WAIT
        while "pid" not in store.tags("job", victim) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(int(store.tags("job", victim)["pid"]), signal.SIGKILL)
        with pytest.raises(Exception, match=f"job {victim}"):
            doomed.result(WAIT)
        other.result(WAIT)
        executor.submit(later).result(WAIT)
    finally:
        executor.shutdown()
    assert store.get_job(victim).status is JobStatus.RUNNING
    assert store.get_job(sibling).status is JobStatus.SUCCEEDED
    assert store.get_job(later).accuracy == 0.9
