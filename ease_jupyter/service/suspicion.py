"""Suspicious examples for the refine panel (ease.ml pvldb §3.1, "refine").

For one dataset version, every active example gets two scores, computed in
the service from the models it already trained (nothing is shipped to the
client, and nothing is trained again):

* ``loss``: the per-example loss of the best finished model. Classification:
  the cross-entropy ``-log p(label)`` from ``predict_proba`` (scikit-learn) or
  the softmax of the logits (torch). A model with no probabilities (the RBF
  SVM) gives the 0/1 loss instead; ``loss_kind`` says which. Regression: the
  squared error, averaged over the output dimensions.
* ``disagreement``: over the top ``k`` finished models (by validation
  accuracy, best first), the fraction whose prediction differs from the label.
  Regression: the spread (standard deviation) of their predictions divided by
  the standard deviation of the labels over the version, averaged over the
  output dimensions; 0 with a single model.

Which models. The finished models trained on that version; when the version
has none yet (a fresh refine), those of the newest version that has some,
like ``models.best_job`` (the schema of a task never changes, so they
predict on any version). ``model`` names the one used for ``loss`` and
``models`` all those used for ``disagreement``.

Training and validation examples. Models fit on the training side of the
hash split (``execution.holdout``), so a model that memorises can give a
flipped training example a low loss; ``validation`` marks the examples it
did not fit, whose scores are unbiased.

Everything is vectorised; results are cached per (version, models, k), as
finished jobs never change.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from ..datasets import load, program_of
from ..errors import InvalidStateError
from ..execution.holdout import validation_mask
from ..store import BlobStore, DatasetVersion, Job, JobStatus, Store, Task
from ..jobspec import parse_job
from ..zoo import Engine
from . import models
from .models import TorchOutputs, load_estimator
from .task_schema import names_json, table_schema
from ..zoo.preprocess import to_frame

DEFAULT_TOP_K = 5
MAX_TOP_K = 50
_PROB_FLOOR = 1e-12  # -log(1e-12) ~ 27.6: the loss of a label the model rules out


class NoModelError(InvalidStateError):
    """The task has no finished model to score examples with (409 ``no_model``)."""


def finished_models(store: Store, task: Task, version: DatasetVersion) -> list[Job]:
    """Succeeded jobs with an artifact, best first (accuracy, then age): those
    on ``version``, else those of the newest version that has any."""
    done = [j for j in store.list_jobs(task.id, status=JobStatus.SUCCEEDED)
            if j.accuracy is not None and j.artifact_blob is not None and np.isfinite(j.accuracy)]
    if not done:
        return []
    on_version = [j for j in done if j.dataset_version_id == version.id]
    if not on_version:
        newest = max(j.dataset_version_id for j in done)
        on_version = [j for j in done if j.dataset_version_id == newest]
    return sorted(on_version, key=lambda j: (-j.accuracy, j.id))


class _Outputs:
    """What one model says about X: predictions, and class probabilities
    (None when the model has none)."""

    def __init__(self, predictions: np.ndarray, proba: np.ndarray | None):
        self.predictions, self.proba = predictions, proba


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def estimator_outputs(blobs: BlobStore, task: Task, job: Job, X: Any, classification: bool, n_classes: int | None,
                      want_proba: bool) -> _Outputs:
    """What a scikit-learn job's fitted model says about X."""
    model = load_estimator(blobs, task, job)
    flat = X.reshape(len(X), -1) if isinstance(X, np.ndarray) else X  # a table task's DataFrame as it is
    raw = None
    if classification and want_proba:
        try:  # the zoo's one-thread wrappers define predict_proba even where the estimator has none (SVC)
            raw = np.asarray(model.predict_proba(flat), dtype=np.float64)
        except AttributeError:
            raw = None
    if raw is not None:
        classes = np.asarray(getattr(model, "classes_", np.arange(raw.shape[1]))).astype(np.int64)
        proba = np.zeros((len(X), n_classes), dtype=np.float64)
        proba[:, classes] = raw  # a class missing from the training side keeps probability 0
        return _Outputs(classes[raw.argmax(axis=1)], proba)
    predictions = np.asarray(model.predict(flat))
    if not classification:
        predictions = predictions.reshape(len(X), -1)
    return _Outputs(predictions, None)


class SuspicionScorer:
    """Computes (and caches) suspicion scores; one per service."""

    def __init__(self, store: Store, blobs: BlobStore, *, cache_size: int = 8,
                 torch_outputs: TorchOutputs | None = None, own_outputs: Callable[..., _Outputs] | None = None):
        self.store, self.blobs = store, blobs
        # where a user's own scikit-learn model runs (the service: on its scikit-learn executor)
        self._own_outputs = own_outputs
        # where a torch model's outputs are computed (the service: on its torch executor)
        self._torch_outputs = torch_outputs or functools.partial(models.torch_outputs, store, blobs)
        self._cache: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._size = cache_size
        self._lock = threading.Lock()

    def scores(self, task: Task, version: DatasetVersion, k: int = DEFAULT_TOP_K) -> dict[str, Any]:
        """``index``, ``loss``, ``disagreement``, ``validation`` (numpy arrays
        in example-id order) and ``loss_kind``, ``model``, ``models``, ``k``.

        Raises:
            NoModelError: no model of the task has finished yet.
        """
        models = finished_models(self.store, task, version)
        if not models:
            raise NoModelError(f"task {task.name!r} has no finished model yet to score examples with; "
                               "wait for the first job to finish")
        top = models[:k]
        # Ids alone are not trusted across a deletion (schema 0004 stopped SQLite's reuse): the version's
        # time and the models' content-addressed artifacts pin what was scored.
        key = (version.id, version.created_at, tuple((j.id, j.artifact_blob) for j in top), k)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        result = self._compute(task, version, top)
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return result

    # ------------------------------------------------------------ internals
    def _outputs(self, task: Task, job: Job, X: np.ndarray, classification: bool, n_classes: int | None,
                 want_proba: bool) -> _Outputs:
        spec = parse_job(job.model, job.config)
        if spec.engine is Engine.TORCH:
            out = self._torch_outputs(task, job, X)
            if classification:
                return _Outputs(out.argmax(axis=1), _softmax(out.astype(np.float64)) if want_proba else None)
            return _Outputs(out.reshape(len(X), -1), None)
        if spec.is_user_model:  # her code runs where the jobs run, in a child killed at her model's time limit
            if self._own_outputs is None:
                from .own_model_calls import own_outputs

                return own_outputs(self.blobs, task, job, X, classification, n_classes, want_proba)
            return self._own_outputs(task, job, X, classification, n_classes, want_proba)
        return estimator_outputs(self.blobs, task, job, X, classification, n_classes, want_proba)

    def _compute(self, task: Task, version: DatasetVersion, top: list[Job]) -> dict[str, Any]:
        program = program_of(task)
        n_classes = program.num_classes
        classification = n_classes is not None
        data = load(self.store, self.blobs, version)
        schema = table_schema(self.store, task)
        if schema is None and not isinstance(data.X, np.ndarray):
            raise InvalidStateError("suspicion scores need tensor inputs; this task's inputs are records")
        X, y = (data.X if schema is None else to_frame(schema, data.X)), np.asarray(data.y)
        n = len(X)
        best = self._outputs(task, top[0], X, classification, n_classes, want_proba=True)
        if classification:
            labels = y.reshape(n).astype(np.int64)
            if best.proba is not None:
                p = best.proba[np.arange(n), labels]
                loss = 0.0 - np.log(np.maximum(p, _PROB_FLOOR))  # 0.0 - : no -0.0 for p = 1
                kind = "cross_entropy"
            else:
                loss = (best.predictions.reshape(n) != labels).astype(np.float64)
                kind = "zero_one"
            wrong = [best.predictions.reshape(n) != labels]
            for job in top[1:]:
                out = self._outputs(task, job, X, True, n_classes, want_proba=False)
                wrong.append(out.predictions.reshape(n) != labels)
            disagreement = np.mean(np.vstack(wrong), axis=0)
        else:
            target = y.reshape(n, -1).astype(np.float64)
            preds = [best.predictions.astype(np.float64)]
            for job in top[1:]:
                preds.append(self._outputs(task, job, X, False, None, want_proba=False).predictions.astype(np.float64))
            loss = np.mean((preds[0] - target) ** 2, axis=1)
            kind = "squared_error"
            if len(preds) > 1:
                scale = target.std(axis=0)
                scale = np.where(scale > 0, scale, 1.0)
                disagreement = np.mean(np.stack(preds).std(axis=0) / scale, axis=1)
            else:
                disagreement = np.zeros(n)
        versions = {v.id: v.number for v in self.store.list_dataset_versions(task.id)}
        head = top[0]
        return {
            "version": version.number,
            "index": np.asarray(data.example_ids, dtype=np.int64),
            "loss": loss.astype(np.float64),
            "loss_kind": kind,
            "disagreement": disagreement.astype(np.float64),
            "validation": validation_mask(data.split_keys),
            "k": len(top),
            "model": {"job_id": head.id, "name": head.model, "config": dict(head.config), "accuracy": head.accuracy,
                      "dataset_version": versions.get(head.dataset_version_id)},
            "models": [{"job_id": j.id, "name": j.model, "accuracy": j.accuracy} for j in top],
            **names_json(self.store, task),  # what the labels' class indices stand for
        }


__all__ = ["DEFAULT_TOP_K", "MAX_TOP_K", "NoModelError", "SuspicionScorer", "finished_models"]
