"""The trained models a task has: the best one, its bytes, its outputs.

One place serves every engine's model (``jobspec.parse_job`` says which):
a scikit-learn job's artifact is the pickled estimator of its best grid
point; a torch job's is the best config's best checkpoint (``mop.py``), with
the config named by ``BEST_TRIAL_TAG``. A model whose artifact ``easeml
fsck`` found unreadable carries ``UNUSABLE_TAG``: ``best``/``infer`` skip
it. Before that, ``best`` and ``infer`` both answer ``StoreCorruptError``
for it, so that the two never disagree about which model is the best.
"""

from __future__ import annotations

import functools
import json
import pickle
import threading
import weakref
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ..datasets import program_of
from ..errors import NotFoundError
from ..execution.units import Hooks, UnitSpec, load_model
from ..jobspec import TorchWorkload, parse_job
from ..store import BlobStore, DatasetVersion, Job, JobStatus, Metric, Store, Task
from ..zoo import Engine
from . import task_schema
from .candidates import candidate_of
from .profiling import ProfileBook
from .validation import validation_size

# Per blob store, the model digests whose content was read whole and found sound (``check_model``).
_sound: "weakref.WeakKeyDictionary[BlobStore, set[str]]" = weakref.WeakKeyDictionary()
_sound_lock = threading.Lock()
CHECK_MAX_BYTES = 64 * 1024 * 1024  # a larger model is only checked for presence on a read

UNUSABLE_TAG = "easeml.unusable"  # why a finished job's model cannot be used (set by `easeml fsck --repair`)
BEST_TRIAL_TAG = "easeml.mop.best_trial"  # a torch job's best config: {"trial": id, "lr": rate}


def best_job(store: Store, task: Task) -> Job | None:
    """The highest-scoring finished job on the newest version that has one.

    Results on older versions are stale once new data arrives, but they stay
    the best available until the new version has a trained model.
    """
    return pick_best(store.list_jobs(task.id, status=JobStatus.SUCCEEDED), store.find_by_tag("job", UNUSABLE_TAG))


def pick_best(succeeded: Iterable[Job], unusable: Iterable[int]) -> Job | None:
    """``best_job`` among a task's succeeded jobs, the unusable ones left out."""
    unusable = set(unusable)
    succeeded = [j for j in succeeded if j.accuracy is not None and j.id not in unusable]
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


def check_model(blobs: BlobStore, task: Task, job: Job) -> None:
    """``StoreCorruptError`` naming the task and job, as ``infer`` would
    answer, unless the job's model can be read: there, and (up to
    ``CHECK_MAX_BYTES``) its content the one its digest names. The content
    is read once per digest and process (a digest's content never changes);
    a blob deleted since is caught by its size."""
    digest = job.artifact_blob
    if digest is None:
        return
    size = blobs.size(digest)
    if size is None:
        read_model(blobs, task, job)  # raises StoreCorruptError
    if size is not None and size > CHECK_MAX_BYTES:
        return  # not read whole on a request: infer, export and easeml fsck read it
    with _sound_lock:
        if digest in _sound.get(blobs, ()):
            return
    read_model(blobs, task, job)  # the blob store re-hashes what it reads
    with _sound_lock:
        _sound.setdefault(blobs, set()).add(digest)


def best(store: Store, task: Task, blobs: BlobStore | None = None) -> dict[str, Any]:
    """The best model's summary. With ``blobs``, its artifact must be
    readable (``check_model``: ``StoreCorruptError`` otherwise, as ``infer``
    would answer)."""
    job = best_job(store, task)
    if job is None:
        raise NotFoundError(f"task {task.name!r} has no trained model yet")
    if blobs is not None:
        check_model(blobs, task, job)
    version = store.get_dataset_version(job.dataset_version_id)
    return best_json(job, version, store.list_metrics(job.id), task_schema.class_names(store, task),
                     ProfileBook(store).prediction_of(job.id),
                     None if blobs is None else validation_size(store, blobs, version), store.tags("job", job.id))


def best_json(job: Job, version: DatasetVersion, metrics: Iterable[Metric], class_names: list[Any] | None,
              prediction: dict[str, Any], validation: int | None,
              tags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``best``'s summary from what was read (the leaderboard reads it for
    all tasks at once); ``tags``: the job's, whose record names the config
    it stored (without them, the best per-config score names it)."""
    from .model_card import best_config

    return {
        "model": job.model,
        "config": dict(job.config),
        # the config of the pick's grid whose model the job stored (``C=1``, ``lr=0.01``)
        "best_config": best_config(tags or {}, metrics),
        "accuracy": job.accuracy,
        "dataset_version": version.number,
        # how many held-out examples ``accuracy`` was measured on
        "validation_size": validation,
        "job_id": job.id,
        "class_names": class_names,  # what the class indices stand for
        "cost_seconds": job.cost_seconds,
        # what the profiler (or, before it had data, the FLOPs proxy) predicted before it ran
        "predicted_seconds": prediction["predicted_seconds"],
    }


def load_estimator(blobs: BlobStore, task: Task, job: Job) -> Any:
    """A scikit-learn job's fitted estimator (written by the executor into our own blob store)."""
    return pickle.loads(read_model(blobs, task, job))


def torch_net(store: Store, blobs: BlobStore, task: Task, job: Job) -> Any:
    """A torch job's best checkpoint as an ``nn.Module`` on the CPU, in eval mode."""
    spec = parse_job(job.model, job.config)
    assert isinstance(spec, TorchWorkload), spec
    cand = candidate_of(task, spec, blobs)  # a user model's: built from its code (user_models.py)
    info = json.loads(store.tags("job", job.id).get(BEST_TRIAL_TAG, "{}"))
    unit = UnitSpec.of(info.get("trial", "t0"), cand.name, torch_best_params(store, job, spec), cand.build)
    return load_model(read_model(blobs, task, job), unit, Hooks())


def torch_best_params(store: Store, job: Job, spec: TorchWorkload) -> dict[str, Any]:
    """The options of a torch job's best config (a user model's grid has options besides the rate)."""
    info = json.loads(store.tags("job", job.id).get(BEST_TRIAL_TAG, "{}"))
    return info.get("params") or {"lr": float(info.get("lr", spec.lrs[0]))}


def torch_outputs(store: Store, blobs: BlobStore, task: Task, job: Job, X: Any, *,
                  batch: int = 4096) -> np.ndarray:
    """The raw outputs of a torch job's best checkpoint, in eval mode and in
    batches: logits (N, D) for classification, outputs for regression. A
    user's own net runs in a child killed at her model's time limit (``own_model_calls``)."""
    import torch

    if parse_job(job.model, job.config).is_user_model:
        from .own_model_calls import own_net_outputs

        return own_net_outputs(store, blobs, task, job, X)
    net = torch_net(store, blobs, task, job)
    X = np.require(X, dtype=np.float32, requirements=["C", "W"])  # torch wants a writable buffer
    net.eval()
    parts = []
    with torch.no_grad():
        for start in range(0, len(X), batch):
            parts.append(net(torch.as_tensor(X[start:start + batch])).cpu().numpy())
    return np.concatenate(parts) if parts else np.zeros((0,), dtype=np.float32)


def torch_outputs_of(store: Store, blobs: BlobStore, task_id: int, job_id: int, X: np.ndarray) -> np.ndarray:
    """``torch_outputs`` by ids: what an executor's ``call`` runs where the torch jobs run."""
    return torch_outputs(store, blobs, store.get_task(task_id), store.get_job(job_id), X)


TorchOutputs = Callable[[Task, Job, np.ndarray], np.ndarray]  # (task, job, X) -> raw outputs


def estimator_predictions(store: Store, blobs: BlobStore, task: Task, job: Job, X: Any) -> np.ndarray:
    """A scikit-learn job's fitted estimator's predictions on checked inputs."""
    return np.asarray(load_estimator(blobs, task, job).predict(task_schema.estimator_inputs(store, task, X)))


def predict(store: Store, blobs: BlobStore, task: Task, job: Job, X: np.ndarray,
            outputs: TorchOutputs | None = None, own_predictions: TorchOutputs | None = None) -> np.ndarray:
    """A finished job's predictions on checked inputs: class indices for
    classification. A torch job's outputs come from ``outputs`` (the service
    runs them on its torch executor), else from ``torch_outputs`` here. A
    user's own scikit-learn model predicts through ``own_predictions`` (the
    service runs her code where the jobs run, not in its own process) when given."""
    spec = parse_job(job.model, job.config)
    if spec.engine is Engine.TORCH:
        out = (outputs or functools.partial(torch_outputs, store, blobs))(task, job, X)
        return out.argmax(axis=1) if program_of(task).num_classes is not None else out
    if spec.is_user_model:  # her code: in a child killed at her model's time limit (``own_model_calls``)
        from .own_model_calls import own_predictions as here

        return np.asarray((own_predictions or functools.partial(here, store, blobs))(task, job, X))
    return estimator_predictions(store, blobs, task, job, X)


def infer(store: Store, blobs: BlobStore, task: Task, X: Any, outputs: TorchOutputs | None = None,
          own_predictions: TorchOutputs | None = None) -> np.ndarray:
    """Predict with the best model so far; class indices for classification."""
    job = best_job(store, task)
    if job is None or job.artifact_blob is None:
        raise NotFoundError(f"task {task.name!r} has no trained model yet")
    return predict(store, blobs, task, job, task_schema.checked_inputs(store, task, X), outputs, own_predictions)
