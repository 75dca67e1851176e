"""Executors: where a queued job's training runs.

The control loop hands a job id to the executor registered for the job's
candidate engine. scikit-learn candidates run on a pool of worker processes
(``SklearnProcessExecutor``, the default: real parallelism, and a fit never
holds the service's GIL), or a thread pool in the service process
(``SklearnExecutor``, for ``memory://`` stores and quick tests). Torch
candidates run as MOP workloads on ``mop.TorchExecutor``, passed as
``ControlLoop(executors={Engine.TORCH: ...})``; any ``JobExecutor`` fits there.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time
import traceback
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Protocol

from threadpoolctl import ThreadpoolController

from ..datasets import load, program_of
from ..execution.holdout import validation_mask
from ..execution.sklearn_fit import fit_and_score
from ..store import BlobStore, Job, JobStatus, JobUpdate, Store, open_store
from ..training import sklearn_candidates
from ..zoo import ModelConfig


_controller: ThreadpoolController | None = None
_controller_lock = threading.Lock()


def one_blas_thread() -> Any:
    """``threadpool_limits(1)`` at a fraction of its cost.

    ``threadpoolctl.threadpool_limits`` scans every loaded shared library on
    each call (``dl_iterate_phdr`` with a Python callback per library): 20-200
    ms of GIL-holding work per call on a busy machine. The control loop used
    it on every turn, which starved the service's IOLoop (the read p99 under
    training, docs/service.md "Measured"). One ``ThreadpoolController`` made
    on first use and reused limits in about 0.03 ms. It covers the libraries
    loaded when it was made (numpy's and scipy's BLAS, scikit-learn's OpenMP:
    all imported with the service).
    """
    global _controller
    with _controller_lock:
        if _controller is None:
            _controller = ThreadpoolController()
        return _controller.limit(limits=1)


class JobExecutor(Protocol):
    """Runs one stored job to a finished state (succeeded or failed)."""

    workers: int

    def submit(self, job_id: int) -> "Future[Job]": ...

    def shutdown(self) -> None: ...


def run_sklearn_job(store: Store, blobs: BlobStore, job_id: int) -> Job:
    """Train a queued scikit-learn job: queued -> running -> succeeded | failed.

    The same holdout split and scorer as ``training.train_config``; the job
    already exists (created by the control loop, or re-queued after a restart).
    """
    job = store.get_job(job_id)
    if job.status is not JobStatus.QUEUED:
        return job
    job = store.update_job(job_id, JobStatus.RUNNING)
    try:
        task = store.get_task(job.task_id)
        candidate = next(c for c in sklearn_candidates(task) if c.name == job.model)
        wanted = dict(job.config)
        config = next((c for c in candidate.configs if c.options == wanted), ModelConfig.of(job.model, wanted))
        data = load(store, blobs, store.get_dataset_version(job.dataset_version_id))
        held_out = validation_mask(data.example_ids)
        with one_blas_thread():
            result = fit_and_score(
                candidate.build(config),
                data.X[~held_out], data.y[~held_out], data.X[held_out], data.y[held_out],
                classification=program_of(task).num_classes is not None,
            )
    except Exception as error:  # noqa: BLE001 - recorded on the job; one bad config must not stop the rest
        message = "".join(traceback.format_exception_only(type(error), error)).strip()
        return store.update_job(job_id, JobStatus.FAILED, JobUpdate(error=message))
    store.add_metric(job_id, 0, "val_score", result.score)
    store.add_metric(job_id, 0, "train_score", result.train_score)
    store.add_metric(job_id, 0, "fit_seconds", result.fit_seconds)
    artifact = blobs.put_bytes(pickle.dumps(result.model, protocol=pickle.HIGHEST_PROTOCOL))
    return store.update_job(
        job_id, JobStatus.SUCCEEDED,
        JobUpdate(accuracy=result.score, cost_seconds=result.fit_seconds, artifact_blob=artifact),
    )


class SklearnExecutor:
    """A thread pool of ``workers`` threads running ``run_sklearn_job``."""

    def __init__(self, store: Store, blobs: BlobStore, workers: int = 1):
        self.store, self.blobs, self.workers = store, blobs, int(workers)
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="easeml-worker")

    def submit(self, job_id: int) -> "Future[Job]":
        return self._pool.submit(run_sklearn_job, self.store, self.blobs, job_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


_worker_stores: tuple[Store, BlobStore] | None = None


def exit_with_parent(parent_pid: int, every: float = 0.5) -> None:
    """In a worker process: exit as soon as the service that started it is
    gone (SIGKILLed). Otherwise an orphaned worker would finish its job and
    write to the store while the restarted service re-runs the same job."""
    import os

    def watch() -> None:
        while True:
            time.sleep(every)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="easeml-parent-watch", daemon=True).start()


def init_worker_process(parent_pid: int, nice: int) -> None:
    """Every worker process: lower its priority (see ServiceConfig.worker_nice)
    and exit with the service."""
    if nice:
        try:
            os.nice(nice)
        except OSError:  # not permitted here: run at the service's priority
            pass
    exit_with_parent(parent_pid)


def _init_worker(db_url: str | None, data_dir: str, parent_pid: int, nice: int = 0) -> None:
    global _worker_stores
    _worker_stores = open_store(db_url, data_dir)
    init_worker_process(parent_pid, nice)


def _run_in_worker(job_id: int) -> int:
    assert _worker_stores is not None, "worker not initialised"
    return run_sklearn_job(*_worker_stores, job_id).id


class SklearnProcessExecutor:
    """``workers`` spawned processes, each with its own connection to the
    store. A worker that dies (killed, out of memory) breaks the pool: its
    jobs come back still RUNNING and the loop re-queues them, and the next
    submit starts a fresh pool."""

    def __init__(self, db_url: str | None, data_dir: str | Path, workers: int = 1, *, nice: int = 0):
        self.workers = int(workers)
        self._args = (db_url, str(data_dir), os.getpid(), int(nice))
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker, initargs=self._args)

    def submit(self, job_id: int) -> "Future[int]":
        try:
            return self._pool.submit(_run_in_worker, job_id)
        except (BrokenProcessPool, RuntimeError):
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
            return self._pool.submit(_run_in_worker, job_id)

    def worker_pids(self) -> list[int]:
        return list(getattr(self._pool, "_processes", None) or {})

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
