"""A thread executor's shutdown does not wait without limit for a job stuck
on a cluster that does not answer: the job is left RUNNING in the store,
the next start re-queues it, and the process can end."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from ease_jupyter import datasets
from ease_jupyter.service.executors import JobAbandoned, ThreadExecutor
from ease_jupyter.service.loop import ControlLoop
from ease_jupyter.store import JobStatus, open_store
from ease_jupyter.zoo import Engine


class _Stuck:
    """A job runner whose job hangs (a grid waiting on a dead cluster's tasks)."""

    shares_engine = False

    def __init__(self) -> None:
        self.release = threading.Event()
        self.closed: list[object] = []

    def make_engine(self):
        return self

    def close(self) -> None:
        self.closed.append(self)

    def run(self, store, blobs, engine, job_id, publish):
        store.update_job(job_id, JobStatus.RUNNING)
        self.release.wait(60)
        return store.update_job(job_id, JobStatus.SUCCEEDED)  # it ends after all


def test_shutdown_leaves_a_stuck_job_running_for_the_next_start():
    store, blobs = open_store("memory://")
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [2] output: [2]")
    version = datasets.feed(store, blobs, task, np.zeros((4, 2), "float32"), np.array([0, 1, 0, 1]))
    job = store.create_job(task.id, version.id, "logreg", {})
    runner = _Stuck()
    executor = ThreadExecutor(runner, store, blobs, 1, shutdown_seconds=0.5)
    future = executor.submit(job.id)
    assert _until(lambda: store.get_job(job.id).status is JobStatus.RUNNING)
    stopping = threading.Thread(target=executor.shutdown, daemon=True)
    started = time.monotonic()
    stopping.start()
    stopping.join(10)
    try:
        assert not stopping.is_alive() and time.monotonic() - started < 5
        assert store.get_job(job.id).status is JobStatus.RUNNING
        assert runner.closed == []  # its engine is not closed under the running job
        # the next start re-queues it
        ControlLoop(store, blobs, executors={Engine.SKLEARN: ThreadExecutor(runner, store, blobs, 1)}).recover()
        assert store.get_job(job.id).status is JobStatus.QUEUED
        # the stuck job ends now: it writes nothing over the re-queued job, and reports no result
        runner.release.set()
        with pytest.raises(JobAbandoned):
            future.result(10)
        assert store.get_job(job.id).status is JobStatus.QUEUED
    finally:
        runner.release.set()  # before the store closes: the job thread must not write to a closed store
        store.close()


class _StuckQuiet(_Stuck):
    """Its job ends without a store call after the wait (a result it read before)."""

    def run(self, store, blobs, engine, job_id, publish):
        job = store.update_job(job_id, JobStatus.RUNNING)
        self.release.wait(60)
        return job


def test_a_stuck_job_that_ends_after_shutdown_reports_no_result():
    store, blobs = open_store("memory://")
    user = store.create_user("alice", "h" * 64)
    task = store.create_task(user.id, "t", "input: [2] output: [2]")
    version = datasets.feed(store, blobs, task, np.zeros((4, 2), "float32"), np.array([0, 1, 0, 1]))
    job = store.create_job(task.id, version.id, "logreg", {})
    runner = _StuckQuiet()
    executor = ThreadExecutor(runner, store, blobs, 1, shutdown_seconds=0.2)
    future = executor.submit(job.id)
    try:
        assert _until(lambda: store.get_job(job.id).status is JobStatus.RUNNING)
        executor.shutdown()
        runner.release.set()
        with pytest.raises(JobAbandoned):  # its waiter (the control loop) is not told it ended
            future.result(10)
    finally:
        runner.release.set()
        store.close()


def test_the_process_ends_while_a_job_thread_is_stuck():
    script = textwrap.dedent("""
        import threading
        from ease_jupyter.service.executors import JobAbandoned, ThreadExecutor

        class Stuck:
            shares_engine = False
            def make_engine(self):
                return None
            def run(self, store, blobs, engine, job_id, publish):
                threading.Event().wait()

        executor = ThreadExecutor(Stuck(), None, None, 1, shutdown_seconds=0.2)
        executor.submit(1)
        executor.shutdown()
        print("stopped", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "stopped" in done.stdout, done.stderr


def _until(predicate, timeout: float = 10) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False
