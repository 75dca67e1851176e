"""Train a task's candidate configs, record jobs and metrics, serve the best.

These are the functions the scheduler service calls for each pick; the local
end-to-end path (``LocalWorkspace``) calls them directly. Every job moves
through the store's life cycle (ACAI §3.3): queued -> running -> succeeded or
failed, and a success adds the dataset -> model provenance edge.

A job can fail because of its model (a fit that raises: the selector learns
that the model is bad for the task) or because of the storage (a missing
blob, a full disk, the owner's quota, a store that cannot be written: the
model is no worse for it). ``fail_job`` records the second kind's error code
as the job's ``FAILURE_TAG``; the control loop does not report such a job to
the selector (``failure_code``). A model whose artifact ``easeml fsck`` found
unreadable carries ``UNUSABLE_TAG``: ``best``/``infer`` skip it. Before that,
``best`` and ``infer`` both answer ``StoreCorruptError`` for it, so that the
two never disagree about which model is the best.
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any, Callable, Iterable

import numpy as np

from . import job_config
from .datasets import LoadedData, load, program_of
from .errors import DataError, NotFoundError, StorageError
from .execution.holdout import validation_mask
from .execution.sklearn_fit import fit_and_score
from .schema import check_data
from .store import BlobStore, DatasetVersion, Job, JobStatus, JobUpdate, Store, Task
from .store.space import is_disk_full
from .zoo import Candidate, Engine, ModelConfig, candidates

ProgressCallback = Callable[[Job], None]

FAILURE_TAG = "easeml.failure"  # the error code of a job that failed for want of storage
UNUSABLE_TAG = "easeml.unusable"  # why a finished job's model cannot be used (set by `easeml fsck --repair`)


def storage_code(error: BaseException) -> str | None:
    """The error code of a storage failure; None for any other error."""
    if isinstance(error, StorageError):
        return error.code
    return "storage_full" if is_disk_full(error) else None


def fail_job(store: Store, job_id: int, error: BaseException) -> Job:
    """Mark a running job FAILED with ``error``; a storage failure also gets
    its code as ``FAILURE_TAG`` (see the module docstring)."""
    code = storage_code(error)
    if code is not None:
        store.set_tag("job", job_id, FAILURE_TAG, code)
        message = str(error)  # our storage errors name the object and the limit
    else:
        message = "".join(traceback.format_exception_only(type(error), error)).strip()
    return store.update_job(job_id, JobStatus.FAILED, JobUpdate(error=message))


def failure_code(store: Store, job: Job) -> str | None:
    """The storage error code of a failed job (``fail_job``), else None: a
    job that failed for its model, or did not fail."""
    if job.status is not JobStatus.FAILED:
        return None
    return store.tags("job", job.id).get(FAILURE_TAG)


def sklearn_candidates(task: Task) -> list[Candidate]:
    return [c for c in candidates(program_of(task)) if c.engine is Engine.SKLEARN]


def train_config(
    store: Store,
    blobs: BlobStore,
    task: Task,
    data: LoadedData,
    candidate: Candidate,
    config: ModelConfig,
) -> Job:
    """Train one scikit-learn config on ``data`` and record it as a job.

    A failing fit marks the job FAILED with the error and is not raised: one bad
    config must not stop the exploration of the others.
    """
    if candidate.engine is not Engine.SKLEARN:
        raise NotImplementedError(f"{candidate.name}: torch models train through MOP execution")
    job = store.create_job(task.id, data.version.id, candidate.name, config.options)
    store.update_job(job.id, JobStatus.RUNNING)
    classification = program_of(task).num_classes is not None
    held_out = validation_mask(data.example_ids)
    try:
        result = fit_and_score(
            candidate.build(config),
            data.X[~held_out],
            data.y[~held_out],
            data.X[held_out],
            data.y[held_out],
            classification=classification,
        )
    except Exception as error:  # noqa: BLE001 - recorded on the job, see docstring
        return fail_job(store, job.id, error)
    # One fit is one "epoch" for a scikit-learn model.
    store.add_metric(job.id, 0, "val_score", result.score)
    store.add_metric(job.id, 0, "train_score", result.train_score)
    store.add_metric(job.id, 0, "fit_seconds", result.fit_seconds)
    artifact = blobs.put_bytes(pickle.dumps(result.model, protocol=pickle.HIGHEST_PROTOCOL))
    return store.update_job(
        job.id,
        JobStatus.SUCCEEDED,
        JobUpdate(accuracy=result.score, cost_seconds=result.fit_seconds, artifact_blob=artifact),
    )


def train_all(
    store: Store,
    blobs: BlobStore,
    task: Task,
    *,
    version: DatasetVersion | None = None,
    on_job: ProgressCallback | None = None,
    only: Iterable[str] | None = None,
) -> list[Job]:
    """Train every scikit-learn candidate config of ``task`` on ``version``
    (default: the latest), optionally only the candidates named in ``only``."""
    version = version or store.latest_dataset_version(task.id)
    if version is None:
        raise DataError("task", f"task {task.name!r} with no data", "a feed before training")
    data = load(store, blobs, version)
    wanted = set(only) if only is not None else None
    jobs = []
    for candidate in sklearn_candidates(task):
        if wanted is not None and candidate.name not in wanted:
            continue
        for config in candidate.configs:
            job = train_config(store, blobs, task, data, candidate, config)
            jobs.append(job)
            if on_job is not None:
                on_job(job)
    return jobs


def best_job(store: Store, task: Task) -> Job | None:
    """The highest-scoring finished job on the newest version that has one.

    Results on older versions are stale once new data arrives, but they stay
    the best available until the new version has a trained model.
    """
    unusable = set(store.find_by_tag("job", UNUSABLE_TAG))
    succeeded = [j for j in store.list_jobs(task.id, status=JobStatus.SUCCEEDED)
                 if j.accuracy is not None and j.id not in unusable]
    if not succeeded:
        return None
    newest = max(j.dataset_version_id for j in succeeded)
    # Ties go to the earlier job, so the answer does not change under re-runs.
    return max((j for j in succeeded if j.dataset_version_id == newest), key=lambda j: (j.accuracy, -j.id))


def model_name(task: Task, job: Job) -> str:
    """How errors and reports name a trained model: ``task 'iris', job 7 (svc)``."""
    return f"task {task.name!r}, job {job.id} ({job.model})"


def read_model(blobs: BlobStore, task: Task, job: Job) -> bytes:
    """The bytes of a job's model; ``StoreCorruptError`` naming the task and
    job (never a path) when they cannot be read."""
    if job.artifact_blob is None:
        raise NotFoundError(f"task {task.name!r} has no trained model yet")
    return blobs.get_referenced(job.artifact_blob, f"{model_name(task, job)}: its trained model")


def best(store: Store, task: Task, blobs: BlobStore | None = None) -> dict[str, Any]:
    """The best model's summary. With ``blobs``, its artifact must be there
    (``StoreCorruptError`` otherwise, as ``infer`` would answer)."""
    job = best_job(store, task)
    if job is None:
        raise NotFoundError(f"task {task.name!r} has no trained model yet")
    if blobs is not None and job.artifact_blob is not None and not blobs.exists(job.artifact_blob):
        read_model(blobs, task, job)  # raises StoreCorruptError naming the task and job
    version = store.get_dataset_version(job.dataset_version_id)
    per_config = [{m.name: m.value} for m in store.list_metrics(job.id)]
    return {
        "model": job.model,
        "config": dict(job.config),
        # the config of the pick's grid that scored best (``C=1``, ``lr=0.01``)
        "best_config": job_config.best_point(per_config),
        "accuracy": job.accuracy,
        "dataset_version": version.number,
        "job_id": job.id,
        "cost_seconds": job.cost_seconds,
    }


def infer(store: Store, blobs: BlobStore, task: Task, X: Any) -> np.ndarray:
    """Predict with the best model so far; class indices for classification."""
    job = best_job(store, task)
    if job is None or job.artifact_blob is None:
        raise NotFoundError(f"task {task.name!r} has no trained model yet")
    checked = check_data(program_of(task), X)
    # The artifact was written by train_config into our own blob store.
    model = pickle.loads(read_model(blobs, task, job))
    return np.asarray(model.predict(checked.X.reshape(checked.n, -1)))
