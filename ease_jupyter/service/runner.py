"""scikit-learn picks: one candidate model with its hyperparameter grid
(ease.ml pvldb §3: a picked model always trains with its hyperparameters
tuned). ``run_sklearn_job`` evaluates the grid with Seneca's grid
evaluation (``execution.grid.grid_search``, Seneca §II-III) on an
execution engine: every combination is an independent task, fitted
concurrently on a Dask cluster, or in turn on a one-worker local engine.

``SklearnJobs`` is the job runner an executor (``executors.py``) runs these
jobs with: each job slot has its own engine (an engine's event stream has
one reader); with a Dask scheduler address every slot is a client of the
same cluster.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ..datasets import load, program_of
from ..execution.grid import GridResult, grid_search
from ..execution.holdout import validation_mask
from ..jobspec import metric_name, parse_job, point_label
from ..selection.profile_plan import plan_from_json
from ..store import BlobStore, Job, JobStatus, JobUpdate, Store
from ..zoo import Candidate, Engine
from .candidates import candidate_of
from .profile_runs import profile_sklearn
from .profiling import TAG_FULL_SECONDS, TAG_PLAN, TAG_RESOURCES, TAG_RUNS, job_resources
from .threads import blas_threads, limit_threads
from . import user_models
from .task_schema import table_job

GRID_BEST_TAG = "easeml.grid.best"
GRID_COST_TAG = "easeml.grid.memory"


def one_blas_thread() -> Any:
    """A limit of one BLAS/OpenMP thread, cheap to enter (``threads.blas_threads``)."""
    return blas_threads(1)


def evaluate_grid(candidate: Candidate, grid: Mapping[str, Any], data: Any, classification: bool, engine: Any,
                  threads: int = 1, fan_out: int | None = None) -> GridResult:
    """Seneca's grid evaluation of one pick on ``engine``, on the task's
    fixed train/held-out split (``holdout.validation_mask``), its fits
    limited to ``threads`` BLAS/OpenMP threads and to ``fan_out`` workers
    (the job's resources; None: all)."""
    held_out = validation_mask(data.split_keys)  # by row content: the split every job of the task uses
    split = (data.X[~held_out], data.y[~held_out], data.X[held_out], data.y[held_out])
    # Memory sizing (Seneca Alg. 1) pays off when tasks share a worker; a
    # one-worker engine runs them in turn and would only pay for the probe.
    memory = "auto" if len(engine.workers()) > 1 else None
    with blas_threads(threads):
        return grid_search(limit_threads(candidate, threads), grid, data.X, data.y, split=split, classification=classification,
                           engine=engine, memory=memory, fan_out=fan_out)


def run_sklearn_job(store: Store, blobs: BlobStore, job_id: int, engine: Any, quota: Any = None) -> Job:
    """Train a queued scikit-learn pick: queued -> running -> succeeded | failed.

    The job's spec is a ``jobspec.SklearnGrid`` (or a ``SingleConfig``, a
    one-point grid); every combination is fitted on the task's training
    examples and scored on its held-out ones (``holdout.validation_mask``). The job's accuracy (the GP
    observation) is the best combination's score, its artifact that fitted
    model, its cost the grid's wall time; each combination's scores are
    metrics named ``val_score[C=0.1]`` etc., the best's plain ``val_score``.
    With a ``quota.Quota``, a model that would take its owner over her quota
    is not stored and the job fails with ``QuotaExceededError`` (as it does,
    before training, when she is at her quota already).

    The grid runs at the threads of the job's resources (its
    ``easeml.profile.resources`` tag, the provisioner's choice; else one).
    A job with a profiling plan (``easeml.profile.plan``, the first job of
    a family the profiler has no record of) first does its profiling runs
    (``profile_runs.profile_sklearn``); their seconds are stored with the
    job (``easeml.profile.runs``, and the grid's own as
    ``easeml.profile.full_seconds``) and counted in its cost.
    """
    job = store.get_job(job_id)
    if job.status is not JobStatus.QUEUED:
        return job
    job = store.update_job(job_id, JobStatus.RUNNING)
    try:
        task = store.get_task(job.task_id)
        spec = parse_job(job.model, job.config)
        if spec.engine is not Engine.SKLEARN:
            raise TypeError(f"job {job_id} is a {spec.engine.value} job, not a scikit-learn grid")
        candidate = candidate_of(task, spec, blobs)  # a user model's is loaded here (user_models.py)
        grid = spec.options
        if quota is not None:
            quota.check_model(store, blobs, task, job, 1)
        data = load(store, blobs, store.get_dataset_version(job.dataset_version_id))
        candidate, data = table_job(store, task, candidate, data)  # a table task's preprocessing pipeline
        classification = program_of(task).num_classes is not None
        tags = store.tags("job", job_id)
        planned = plan_from_json(tags[TAG_PLAN]) if TAG_PLAN in tags else ()
        profiled = profile_sklearn(candidate, spec.points()[0], data, classification, engine, planned)
        resources = job_resources(tags)
        result = evaluate_grid(candidate, grid, data, classification, engine, resources.threads,
                               resources.workers if TAG_RESOURCES in tags else None)
        model = (user_models.artifact(result.best_model) if spec.is_user_model
                 else pickle.dumps(result.best_model, protocol=pickle.HIGHEST_PROTOCOL))
        if quota is not None:
            quota.check_model(store, blobs, task, job, len(model))
        artifact = blobs.put_bytes(model)
    except Exception as error:  # noqa: BLE001 - recorded on the job; one bad pick must not stop the rest
        return user_models.fail_any_job(store, job, error)
    for point in result.points:
        label = point_label(point.params)
        for name, value in (("val_score", point.score), ("train_score", point.train_score),
                            ("fit_seconds", point.fit_seconds)):
            if value == value:  # NaN: the combination failed (its error is in the tag below)
                store.add_metric(job_id, 0, metric_name(name, label), float(value))
    best = next(p for p in result.points if p.params == result.best_params and p.score == result.best_score)
    store.add_metric(job_id, 0, "val_score", best.score)
    store.add_metric(job_id, 0, "train_score", best.train_score)
    store.add_metric(job_id, 0, "fit_seconds", best.fit_seconds)
    errors = {point_label(p.params): p.error for p in result.points if p.error}
    store.set_tag("job", job_id, GRID_BEST_TAG, json.dumps({"params": result.best_params, "errors": errors}))
    if result.cost is not None:
        store.set_tag("job", job_id, GRID_COST_TAG, json.dumps({
            "reserved_bytes": result.cost.reserved_bytes, "fixed_bytes": result.cost.fixed_bytes,
            "gb_seconds": result.cost.gb_seconds, "fixed_gb_seconds": result.cost.fixed_gb_seconds}))
    if planned:  # the profiling runs are paid for: the job's cost counts them
        store.set_tag("job", job_id, TAG_RUNS, json.dumps(profiled))
        store.set_tag("job", job_id, TAG_FULL_SECONDS, repr(float(result.seconds)))
    return store.update_job(
        job_id, JobStatus.SUCCEEDED,
        JobUpdate(accuracy=result.best_score, cost_seconds=result.seconds + sum(r["seconds"] for r in profiled),
                  artifact_blob=artifact),
    )


def grid_engine(spec: str) -> Any:
    """One job slot's engine: a one-worker local engine, or a client of the
    Dask cluster at ``spec``."""
    from ..execution.engine import make_engine

    if spec == "local":
        return make_engine("local", n_workers=1, torch_threads=None)
    return make_engine(spec)


@dataclass(frozen=True)
class SklearnJobs:
    """The job runner of scikit-learn picks (``executors.JobRunner``): each
    job slot evaluates grids on its own ``grid_engine(engine)``."""

    engine: str = "local"
    quota: Any = None
    shares_engine: ClassVar[bool] = False  # a grid's combinations fan out on its slot's own engine

    def make_engine(self) -> Any:
        return grid_engine(self.engine)

    def run(self, store: Store, blobs: BlobStore, engine: Any, job_id: int, publish: Any) -> Job:
        return run_sklearn_job(store, blobs, job_id, engine, self.quota)
