"""Executors: where a queued job's training runs.

The control loop hands a job id to the executor registered for the job's
candidate engine. A scikit-learn pick is one candidate model with its
hyperparameter grid (ease.ml pvldb §3: a picked model always trains with
its hyperparameters tuned); ``run_sklearn_job`` evaluates the grid with
Seneca's grid evaluation (``execution.grid.grid_search``, Seneca §II-III)
on an execution engine: every combination is an independent task, fitted
concurrently on a Dask cluster, or in turn on a one-worker local engine.

Each job slot has its own engine (an engine's event stream has one
reader): ``SklearnProcessExecutor`` (the default) runs ``workers`` spawned
processes, so a fit never holds the service's GIL; ``SklearnExecutor`` runs
``workers`` threads in the service (``memory://`` stores, quick tests).
With a Dask scheduler address every slot is a client of the same cluster.
Torch candidates run as MOP workloads on ``mop.TorchExecutor``, passed as
``ControlLoop(executors={Engine.TORCH: ...})``; any ``JobExecutor`` fits there.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Mapping, Protocol

from threadpoolctl import ThreadpoolController

from ..datasets import load, program_of
from ..errors import EaseMLError
from ..execution.grid import GridResult, grid_search
from ..execution.holdout import validation_mask
from ..store import BlobStore, Job, JobStatus, JobUpdate, Store, open_store
from ..training import fail_job, sklearn_candidates
from ..zoo import Candidate

GRID_BEST_TAG = "easeml.grid.best"
GRID_COST_TAG = "easeml.grid.memory"


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


def candidate_grid(candidate: Candidate) -> dict[str, list[Any]]:
    """The candidate's configs as Seneca's option lists (their Cartesian
    product is the configs again: the zoo tunes one option per model)."""
    grid: dict[str, list[Any]] = {}
    for config in candidate.configs:
        for option, value in config.options.items():
            values = grid.setdefault(option, [])
            if value not in values:
                values.append(value)
    return grid


def grid_label(params: Mapping[str, Any]) -> str:
    """``C=0.1`` or ``max_features=sqrt``: names a grid point in metric names."""
    return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(params.items()))


def evaluate_grid(candidate: Candidate, grid: Mapping[str, Any], data: Any, classification: bool, engine: Any) -> GridResult:
    """Seneca's grid evaluation of one pick on ``engine``, on the task's
    fixed train/held-out split (``holdout.validation_mask``)."""
    held_out = validation_mask(data.example_ids)  # the split every job of the task uses
    split = (data.X[~held_out], data.y[~held_out], data.X[held_out], data.y[held_out])
    # Memory sizing (Seneca Alg. 1) pays off when tasks share a worker; a
    # one-worker engine runs them in turn and would only pay for the probe.
    memory = "auto" if len(engine.workers()) > 1 else None
    with one_blas_thread():
        return grid_search(candidate, grid, data.X, data.y, split=split, classification=classification,
                           engine=engine, memory=memory)


def run_sklearn_job(store: Store, blobs: BlobStore, job_id: int, engine: Any, quota: Any = None) -> Job:
    """Train a queued scikit-learn pick: queued -> running -> succeeded | failed.

    The job's config is ``{"grid": {option: [values]}}``; every combination is
    fitted on the task's training examples and scored on its held-out ones
    (the split ``training.train_config`` uses). The job's accuracy (the GP
    observation) is the best combination's score, its artifact that fitted
    model, its cost the grid's wall time; each combination's scores are
    metrics named ``val_score[C=0.1]`` etc., the best's plain ``val_score``.
    With a ``quota.Quota``, a model that would take its owner over her quota
    is not stored and the job fails with ``QuotaExceededError`` (as it does,
    before training, when she is at her quota already).
    """
    job = store.get_job(job_id)
    if job.status is not JobStatus.QUEUED:
        return job
    job = store.update_job(job_id, JobStatus.RUNNING)
    try:
        task = store.get_task(job.task_id)
        candidate = next((c for c in sklearn_candidates(task) if c.name == job.model), None)
        if candidate is None:
            raise EaseMLError(f"model: found {job.model!r}, expected a scikit-learn candidate of task {task.name!r}")
        config = dict(job.config)
        # a job stored before picks trained grids holds one config: a one-point grid
        grid = config["grid"] if "grid" in config else {k: [v] for k, v in config.items()}
        if not isinstance(grid, Mapping) or not grid:
            raise EaseMLError(f"config: found {config!r}, expected {{'grid': {{option: [values]}}}}")
        if quota is not None:
            quota.check_model(store, blobs, task, job, 1)
        data = load(store, blobs, store.get_dataset_version(job.dataset_version_id))
        result = evaluate_grid(candidate, grid, data, program_of(task).num_classes is not None, engine)
        model = pickle.dumps(result.best_model, protocol=pickle.HIGHEST_PROTOCOL)
        if quota is not None:
            quota.check_model(store, blobs, task, job, len(model))
        artifact = blobs.put_bytes(model)
    except Exception as error:  # noqa: BLE001 - recorded on the job; one bad pick must not stop the rest
        return fail_job(store, job_id, error)
    for point in result.points:
        label = grid_label(point.params)
        for name, value in (("val_score", point.score), ("train_score", point.train_score),
                            ("fit_seconds", point.fit_seconds)):
            if value == value:  # NaN: the combination failed (its error is in the tag below)
                store.add_metric(job_id, 0, f"{name}[{label}]", float(value))
    best = next(p for p in result.points if p.params == result.best_params and p.score == result.best_score)
    store.add_metric(job_id, 0, "val_score", best.score)
    store.add_metric(job_id, 0, "train_score", best.train_score)
    store.add_metric(job_id, 0, "fit_seconds", best.fit_seconds)
    errors = {grid_label(p.params): p.error for p in result.points if p.error}
    store.set_tag("job", job_id, GRID_BEST_TAG, json.dumps({"params": result.best_params, "errors": errors}))
    if result.cost is not None:
        store.set_tag("job", job_id, GRID_COST_TAG, json.dumps({
            "reserved_bytes": result.cost.reserved_bytes, "fixed_bytes": result.cost.fixed_bytes,
            "gb_seconds": result.cost.gb_seconds, "fixed_gb_seconds": result.cost.fixed_gb_seconds}))
    return store.update_job(
        job_id, JobStatus.SUCCEEDED,
        JobUpdate(accuracy=result.best_score, cost_seconds=result.seconds, artifact_blob=artifact),
    )


def grid_engine(spec: str) -> Any:
    """One job slot's engine: a one-worker local engine, or a client of the
    Dask cluster at ``spec``."""
    from ..execution.engine import make_engine

    if spec == "local":
        return make_engine("local", n_workers=1, torch_threads=None)
    return make_engine(spec)


class SklearnExecutor:
    """``workers`` threads in the service, each with its own engine
    (``grid_engine(engine)``, made on the thread's first job)."""

    def __init__(self, store: Store, blobs: BlobStore, workers: int = 1, *, engine: str = "local",
                 quota: Any = None):
        self.store, self.blobs, self.workers = store, blobs, int(workers)
        self.quota = quota
        self.engine_spec = engine
        self._local = threading.local()
        self._engines: list[Any] = []
        self._engines_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="easeml-worker")

    def _engine(self) -> Any:
        engine = getattr(self._local, "engine", None)
        if engine is None:
            engine = self._local.engine = grid_engine(self.engine_spec)
            with self._engines_lock:
                self._engines.append(engine)
        return engine

    def _run(self, job_id: int) -> Job:
        return run_sklearn_job(self.store, self.blobs, job_id, self._engine(), self.quota)

    def submit(self, job_id: int) -> "Future[Job]":
        return self._pool.submit(self._run, job_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._engines_lock:
            engines, self._engines = self._engines, []
        for engine in engines:
            engine.close()


_worker: dict[str, Any] = {}


def exit_with_parent(parent_pid: int, every: float = 0.5) -> None:
    """In a worker process: exit as soon as the service that started it is
    gone (SIGKILLed). Otherwise an orphaned worker would finish its job and
    write to the store while the restarted service re-runs the same job."""

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


def _init_worker(db_url: str | None, data_dir: str, engine: str, parent_pid: int, nice: int = 0,
                 quota: Any = None) -> None:
    _worker.update(stores=open_store(db_url, data_dir), spec=engine, engine=None, quota=quota)
    init_worker_process(parent_pid, nice)


def _run_in_worker(job_id: int) -> int:
    assert _worker, "worker not initialised"
    if _worker["engine"] is None:
        _worker["engine"] = grid_engine(_worker["spec"])
    return run_sklearn_job(*_worker["stores"], job_id, _worker["engine"], _worker["quota"]).id


class RespawningPool:
    """A pool of ``workers`` spawned processes that starts afresh when a
    worker died (killed, out of memory). The dead worker's jobs come back
    still RUNNING and the control loop re-queues them; the next ``submit``
    finds the pool broken and replaces it."""

    def __init__(self, workers: int, initializer: Any, initargs: tuple, context: Any = None):
        self._make = lambda: ProcessPoolExecutor(
            max_workers=workers, mp_context=context or multiprocessing.get_context("spawn"),
            initializer=initializer, initargs=initargs)
        self._pool = self._make()

    def submit(self, fn: Any, *args: Any) -> Future:
        try:
            return self._pool.submit(fn, *args)
        except (BrokenProcessPool, RuntimeError):
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._make()
            return self._pool.submit(fn, *args)

    def worker_pids(self) -> list[int]:
        return list(getattr(self._pool, "_processes", None) or {})

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class SklearnProcessExecutor:
    """``workers`` spawned processes (a ``RespawningPool``), each with its own
    connection to the store and its own engine (``grid_engine(engine)``)."""

    def __init__(self, db_url: str | None, data_dir: str | Path, workers: int = 1, *, nice: int = 0,
                 engine: str = "local", quota: Any = None):
        self.workers = int(workers)
        self._pool = RespawningPool(self.workers, _init_worker,
                                    (db_url, str(data_dir), engine, os.getpid(), int(nice), quota))

    def submit(self, job_id: int) -> "Future[int]":
        return self._pool.submit(_run_in_worker, job_id)

    def worker_pids(self) -> list[int]:
        return self._pool.worker_pids()

    def shutdown(self) -> None:
        self._pool.shutdown()
