"""The profiler's record in the store: each job's features, prediction and
error (ACAI §3.3.2, §4.2.2; the model is ``selection/profiler.py``).

:class:`ProfileBook` builds a job's
:class:`~ease_jupyter.selection.profiler.JobFeatures` from its task (the
program's input size and classes), its dataset version (examples), its spec
(``jobspec.parse_job``: grid points, torch epochs) and the resources it ran
on; refits the profiler on all users' finished jobs (SUCCEEDED with
``cost_seconds``), as the selector's GP learns quality across users; and
keeps each job's prediction and, once it finished, its error as job tags:

- ``easeml.profile.predicted_seconds``: the predicted seconds
- ``easeml.profile.log_sd``: the std of the prediction's log seconds
- ``easeml.profile.source``: ``family``, ``pooled``, or ``flops`` where the
  profiler could not predict and the caller's FLOPs proxy did
- ``easeml.profile.resources``: JSON of the :class:`Resources` it was
  predicted for (threads, workers, partitions, device, memory_bytes); a
  refit reads a job's resources from here, else the book's defaults
- ``easeml.profile.log_error``: ``log(actual / predicted)``, once finished

The ``easeml.`` prefix is reserved, so only the service writes these.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import DataError, NotFoundError
from ..jobspec import JobSpec, TorchWorkload, parse_job
from ..schema import parse
from ..selection.profiler import DEVICES, JobFeatures, Prediction, Profiler, log_error
from ..store import Job, JobStatus, Store, Task

TAG_PREDICTED = "easeml.profile.predicted_seconds"
TAG_LOG_SD = "easeml.profile.log_sd"
TAG_SOURCE = "easeml.profile.source"
TAG_RESOURCES = "easeml.profile.resources"
TAG_LOG_ERROR = "easeml.profile.log_error"
FLOPS_SOURCE = "flops"  # the source recorded where the caller's FLOPs proxy predicted


@dataclass(frozen=True)
class Resources:
    """What a job runs on: the provisioner's choice, or the service's defaults."""

    threads: int = 1  # threads per fit
    workers: int = 1  # Dask workers a grid fans out to
    partitions: int = 1  # MOP partitions of a torch pick
    device: str = "cpu"  # "cpu" or "gpu"
    memory_bytes: int = 0  # memory reservation (0: none)

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise DataError("device", repr(self.device), " or ".join(map(repr, DEVICES)))
        for name in ("threads", "workers", "partitions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DataError(name, repr(value), "an integer, 1 or more")
        if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int) or self.memory_bytes < 0:
            raise DataError("memory_bytes", repr(self.memory_bytes), "an integer, 0 or more")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, default: Resources) -> Resources:
        """The stored resources; fields missing or unreadable take ``default``'s."""
        try:
            found: Mapping[str, Any] = json.loads(text)
            return dataclasses.replace(default, **{k: v for k, v in found.items()
                                                   if k in {f.name for f in dataclasses.fields(cls)}})
        except (ValueError, TypeError):
            return default


def family_of(task: Task, spec: JobSpec) -> str:
    """The runtime model's family: the zoo model's name; a user's own model
    is its own family per task (two users' models of one name share no code)."""
    return f"user:{task.id}:{spec.model}" if spec.is_user_model else spec.model


def task_size(task: Task) -> tuple[int, int]:
    """(input size, classes) of the task's program: the elements of its input
    tensors (features, or pixels × channels), and its classes (1: not a
    classification)."""
    return _program_size(task.program)


@lru_cache(maxsize=4096)  # a refit reads every finished job's program; programs never change
def _program_size(text: str) -> tuple[int, int]:
    program = parse(text)
    d = sum(t.size for t in program.input.tensors)
    return max(d, 1), program.num_classes or 1


class ProfileBook:
    """The store's finished jobs as the profiler's records, and each job's
    prediction and error as its tags. ``default`` is what a job ran on where
    it recorded no resources (the service's configuration)."""

    def __init__(self, store: Store, profiler: Profiler | None = None, *, default: Resources | None = None):
        self.store = store
        self.profiler = profiler or Profiler()
        self.default = default or Resources()

    def features(self, task: Task, spec: JobSpec, n: int, resources: Resources | None = None) -> JobFeatures:
        """The job's features: the task's size, the spec's work, the resources."""
        res = resources or self.default
        d, k = task_size(task)
        epochs = spec.epochs if isinstance(spec, TorchWorkload) else 1
        return JobFeatures(family_of(task, spec), spec.engine.value, n=int(n), d=d, k=k,
                           points=len(spec.points()), epochs=epochs,
                           partitions=res.partitions if isinstance(spec, TorchWorkload) else 1,
                           threads=res.threads, workers=res.workers, device=res.device,
                           memory_bytes=res.memory_bytes)

    def job_features(self, job: Job) -> JobFeatures:
        """A stored job's features, at the resources it recorded (else the defaults)."""
        task = self.store.get_task(job.task_id)
        n = self.store.get_dataset_version(job.dataset_version_id).n_examples
        recorded = self.store.tags("job", job.id).get(TAG_RESOURCES)
        res = Resources.from_json(recorded, self.default) if recorded else self.default
        return self.features(task, parse_job(job.model, job.config), n, res)

    def records(self) -> list[tuple[JobFeatures, float]]:
        """Every user's finished jobs (SUCCEEDED, with measured seconds) as records."""
        out = []
        for job in self.store.list_jobs(status=JobStatus.SUCCEEDED):
            if not job.cost_seconds or job.cost_seconds <= 0:
                continue
            try:
                out.append((self.job_features(job), float(job.cost_seconds)))
            except (NotFoundError, DataError):  # a deleted task, an unreadable config: no record
                continue
        return out

    def refit(self) -> Profiler:
        """Fit the profiler again on all finished jobs; returns it."""
        return self.profiler.fit(self.records())

    def predict_job(self, task: Task, spec: JobSpec, n: int, resources: Resources | None = None) -> Prediction:
        """The profiler's prediction for the pick at these resources; source
        None when it cannot predict (the caller then uses the FLOPs proxy)."""
        try:
            return self.profiler.predict(self.features(task, spec, n, resources))
        except (DataError, ValueError, ArithmeticError):  # a program or size it cannot read
            return Prediction.none()

    def record_prediction(self, job: Job, prediction: Prediction | None, *, fallback_seconds: float | None = None,
                          resources: Resources | None = None) -> None:
        """Store the prediction as the job's tags. Where the profiler made
        none (None, or source None), ``fallback_seconds`` (the FLOPs proxy's)
        is stored with source ``flops``; without it, only the source."""
        tags: dict[str, str] = {TAG_RESOURCES: (resources or self.default).to_json()}
        if prediction is not None and prediction.source is not None:
            tags.update({TAG_PREDICTED: repr(prediction.seconds), TAG_LOG_SD: repr(prediction.log_sd),
                         TAG_SOURCE: prediction.source})
        else:
            tags[TAG_SOURCE] = FLOPS_SOURCE
            if fallback_seconds is not None and math.isfinite(fallback_seconds) and fallback_seconds > 0:
                tags[TAG_PREDICTED] = repr(float(fallback_seconds))
        for key, value in tags.items():
            self.store.set_tag("job", job.id, key, value)

    def record_outcome(self, job: Job) -> float | None:
        """Store ``log(actual / predicted)`` of a SUCCEEDED job with measured
        seconds and a recorded prediction; returns it (None: nothing to compare)."""
        if job.status is not JobStatus.SUCCEEDED or not job.cost_seconds or job.cost_seconds <= 0:
            return None
        text = self.store.tags("job", job.id).get(TAG_PREDICTED)
        try:
            predicted = float(text) if text else math.nan
        except ValueError:
            return None
        if not (math.isfinite(predicted) and predicted > 0):
            return None
        error = log_error(predicted, float(job.cost_seconds))
        self.store.set_tag("job", job.id, TAG_LOG_ERROR, repr(error))
        return error

    def prediction_of(self, job_id: int) -> dict[str, Any]:
        """The job's stored prediction and error (for the leaderboard): keys
        ``predicted_seconds``, ``log_sd``, ``source``, ``log_error``, each
        None where not recorded."""
        tags = self.store.tags("job", job_id)

        def number(key: str) -> float | None:
            try:
                return float(tags[key]) if tags.get(key) else None
            except ValueError:
                return None

        return {"predicted_seconds": number(TAG_PREDICTED), "log_sd": number(TAG_LOG_SD),
                "source": tags.get(TAG_SOURCE) or None, "log_error": number(TAG_LOG_ERROR)}
