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
  profiler could not predict and the caller's FLOPs proxy did (a user's own
  model, which has no FLOP estimate: ``measured``, its last measured
  seconds on the task, or ``neutral``, the median of the task's other arms)
- ``easeml.profile.resources``: JSON of the :class:`Resources` it was
  predicted for (threads, workers, partitions, device, memory_bytes); a
  refit reads a job's resources from here, else the book's defaults
- ``easeml.profile.log_error``: ``log(actual / predicted)``, once finished
- ``easeml.profile.plan``: JSON of the profiling runs (ACAI §4.2.2,
  ``selection/profile_plan.py``) the first job of a family the profiler has
  no record of trains before its full grid (:meth:`ProfileBook.plan_profiling`);
  ``easeml.profile.family`` names the family on such a job
- ``easeml.profile.runs``: JSON list of the runs done, ``{"n", "threads",
  "seconds"}`` (a torch run's one epoch adds ``"epochs": 1``);
  ``easeml.profile.full_seconds``: the full grid's (or MOP workload's) own seconds
  (the job's ``cost_seconds`` is these plus the runs': profiling is paid for)
- ``easeml.profile.note``: why the pick runs where it does when that is not
  the plain choice (the profiler's prediction failed and the FLOPs proxy
  priced it; no configuration met her budget or deadline)
- ``easeml.profile.cost``: a finished job's cost at the prices it ran under
  (``loop/provision.py``)

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
from ..selection.profile_plan import plan_runs, plan_to_json
from ..selection.profiler import DEVICES, JobFeatures, Prediction, Profiler, log_error
from ..store import Job, JobStatus, Store, Task

TAG_PREDICTED = "easeml.profile.predicted_seconds"
TAG_LOG_SD = "easeml.profile.log_sd"
TAG_SOURCE = "easeml.profile.source"
TAG_RESOURCES = "easeml.profile.resources"
TAG_LOG_ERROR = "easeml.profile.log_error"
TAG_PLAN = "easeml.profile.plan"
TAG_PLANNED_FAMILY = "easeml.profile.family"
TAG_RUNS = "easeml.profile.runs"
TAG_FULL_SECONDS = "easeml.profile.full_seconds"
TAG_NOTE = "easeml.profile.note"  # why a pick runs where it does, when it is not the plain choice
FLOPS_SOURCE = "flops"  # the source recorded where the caller's FLOPs proxy predicted
USER_FAMILY_PREFIX = "user:"  # a user model's family: this, its owner's id and its code's blob digest


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
    is a family of its own, keyed by its owner and the blob of its code
    (``user:<owner id>:<digest>``), so two models of one name share nothing,
    and her model's jobs on all her tasks (features: each task's size) teach
    one runtime law. The owner is part of the key: two users who upload the
    same bytes (a plain ``SVC()`` pickles by reference to the same few
    bytes) are two families, so neither is priced from the other's jobs nor
    can tell from a prediction that another tenant ran that code. The task
    is not: a family is learned across her tasks, as a zoo model's is."""
    return f"{USER_FAMILY_PREFIX}{task.owner_id}:{spec.code}" if spec.is_user_model else spec.model


def legacy_family_of(spec: JobSpec) -> str | None:
    """A user model's family key before the owner was part of it
    (``user:<digest>``), as older jobs' ``easeml.profile.family`` tags name
    it; None for a zoo model, whose key never changed."""
    return f"{USER_FAMILY_PREFIX}{spec.code}" if spec.is_user_model else None


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


def job_resources(tags: Mapping[str, str], default: Resources | None = None) -> Resources:
    """What a job runs on: its ``easeml.profile.resources`` tag, else ``default`` (one thread)."""
    base = default or Resources()
    text = tags.get(TAG_RESOURCES)
    return Resources.from_json(text, base) if text else base


def full_seconds(job: Job, tags: Mapping[str, str]) -> float:
    """The job's own seconds: its ``full_seconds`` tag where it was profiled
    first (its cost then includes the profiling runs), else its cost."""
    try:
        own = float(tags.get(TAG_FULL_SECONDS) or "nan")
    except ValueError:
        own = math.nan
    return own if math.isfinite(own) and own > 0 else float(job.cost_seconds or 0.0)


def profiling_runs(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    """The job's measured profiling runs, ``{"n", "threads", "seconds"}``;
    runs that cannot be read are left out."""
    try:
        found = json.loads(tags.get(TAG_RUNS) or "[]")
    except ValueError:
        return []
    out = []
    for run in found if isinstance(found, list) else []:
        try:
            n, threads, seconds = int(run["n"]), int(run["threads"]), float(run["seconds"])
        except (KeyError, TypeError, ValueError):
            continue
        if n >= 1 and threads >= 1 and math.isfinite(seconds) and seconds > 0:
            out.append({"n": n, "threads": threads, "seconds": seconds})
    return out


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
                           points=spec.n_points, epochs=epochs,
                           partitions=res.partitions if isinstance(spec, TorchWorkload) else 1,
                           threads=res.threads, workers=res.workers, device=res.device,
                           memory_bytes=res.memory_bytes)

    def job_features(self, job: Job, tags: Mapping[str, str] | None = None) -> JobFeatures:
        """A stored job's features, at the resources it recorded (else the defaults)."""
        task = self.store.get_task(job.task_id)
        n = self.store.get_dataset_version(job.dataset_version_id).n_examples
        recorded = (self.store.tags("job", job.id) if tags is None else tags).get(TAG_RESOURCES)
        res = Resources.from_json(recorded, self.default) if recorded else self.default
        return self.features(task, parse_job(job.model, job.config), n, res)

    def records(self) -> list[tuple[JobFeatures, float]]:
        """Every user's finished jobs (SUCCEEDED, with measured seconds) as
        records: the full job at its own seconds (``full_seconds`` where it
        was profiled first, else its cost), and each of its profiling runs
        as a one-point job on the run's subsample at the run's threads (a
        torch run: one epoch on one partition)."""
        out = []
        for job in self.store.list_jobs(status=JobStatus.SUCCEEDED):
            if not job.cost_seconds or job.cost_seconds <= 0:
                continue
            tags = self.store.tags("job", job.id)
            try:
                features = self.job_features(job, tags)
            except (NotFoundError, DataError):  # a deleted task, an unreadable config: no record
                continue
            out.append((features, full_seconds(job, tags)))
            for run in profiling_runs(tags):  # one point (a torch run: one epoch, one partition)
                out.append((dataclasses.replace(features, n=run["n"], points=1, epochs=1, partitions=1,
                                                threads=run["threads"]), run["seconds"]))
        return out

    def plan_profiling(self, job: Job, task: Task, spec: JobSpec, n: int, resources: Resources | None = None) -> bool:
        """Plan profiling runs (ACAI §4.2.2, ``selection.profile_plan``) for
        a launched job whose family the profiler has no record of and no
        earlier job of which was planned (and has not failed): stores the
        plan as the job's ``easeml.profile.plan`` tag; True when it did.
        The zoo's picks are profiled (scikit-learn grids and torch nets:
        their runners do the runs), and a user's own models: her estimator,
        whose every call the runner makes in the job's sandboxed child under
        the job's deadline (``user_models.Guarded``), and her torch factory,
        whose runs train as MOP units under the job's deadline, as her
        training does (``profile_runs.profile_in_units``); a unit trains at
        one thread, so her factory's runs are planned at one."""
        if spec.engine.value not in ("sklearn", "torch"):
            return False
        family = family_of(task, spec)
        if family in self.profiler.counts:  # it has history: the profiler predicts it already
            return False
        if self._planned_before(task, spec, family):
            return False
        in_units = spec.is_user_model and spec.engine.value == "torch"
        runs = plan_runs(int(n), 1 if in_units else (resources or self.default).threads)
        if not runs:
            return False
        self.store.set_tag("job", job.id, TAG_PLAN, plan_to_json(family, runs))
        self.store.set_tag("job", job.id, TAG_PLANNED_FAMILY, family)
        return True

    def _planned_before(self, task: Task, spec: JobSpec, family: str) -> bool:
        """Whether an earlier job of the family was planned and has not
        failed. A user model's jobs planned before the owner was part of its
        key are tagged with the old key (:func:`legacy_family_of`): those of
        this owner's tasks count too, another owner's do not. Only a family's
        first jobs get here (until a refit records it), so the queries are rare."""
        legacy = legacy_family_of(spec)
        for key in (family, legacy) if legacy else (family,):
            for other in self.store.find_by_tag("job", TAG_PLANNED_FAMILY, key):
                try:
                    job = self.store.get_job(other)
                    if key == legacy and self.store.get_task(job.task_id).owner_id != task.owner_id:
                        continue
                except NotFoundError:
                    continue
                if job.status not in (JobStatus.FAILED, JobStatus.CANCELLED):
                    return True
        return False

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
                          resources: Resources | None = None, fallback_source: str = FLOPS_SOURCE) -> None:
        """Store the prediction as the job's tags. Where the profiler made
        none (None, or source None), ``fallback_seconds`` (the FLOPs proxy's;
        a user model's last measured or neutral seconds) is stored with
        source ``fallback_source``; without it, only the source."""
        tags: dict[str, str] = {TAG_RESOURCES: (resources or self.default).to_json()}
        if prediction is not None and prediction.source is not None:
            tags.update({TAG_PREDICTED: repr(prediction.seconds), TAG_LOG_SD: repr(prediction.log_sd),
                         TAG_SOURCE: prediction.source})
        else:
            tags[TAG_SOURCE] = fallback_source
            if fallback_seconds is not None and math.isfinite(fallback_seconds) and fallback_seconds > 0:
                tags[TAG_PREDICTED] = repr(float(fallback_seconds))
        for key, value in tags.items():
            self.store.set_tag("job", job.id, key, value)

    def record_outcome(self, job: Job) -> float | None:
        """Store ``log(actual / predicted)`` of a SUCCEEDED job with measured
        seconds and a recorded prediction; returns it (None: nothing to compare)."""
        if job.status is not JobStatus.SUCCEEDED or not job.cost_seconds or job.cost_seconds <= 0:
            return None
        tags = self.store.tags("job", job.id)
        text = tags.get(TAG_PREDICTED)
        try:
            predicted = float(text) if text else math.nan
        except ValueError:
            return None
        if not (math.isfinite(predicted) and predicted > 0):
            return None
        error = log_error(predicted, full_seconds(job, tags))  # the prediction was for the full job alone
        self.store.set_tag("job", job.id, TAG_LOG_ERROR, repr(error))
        return error

    def prediction_of(self, job_id: int) -> dict[str, Any]:
        """The job's stored prediction and error (:func:`prediction_in`)."""
        return prediction_in(self.store.tags("job", job_id))


def prediction_in(tags: Mapping[str, str]) -> dict[str, Any]:
    """A job's stored prediction and error, from its tags (for the
    leaderboard): keys ``predicted_seconds``, ``log_sd``, ``source``,
    ``log_error``, ``note``, each None where not recorded."""
    def number(key: str) -> float | None:
        try:
            return float(tags[key]) if tags.get(key) else None
        except ValueError:
            return None

    return {"predicted_seconds": number(TAG_PREDICTED), "log_sd": number(TAG_LOG_SD),
            "source": tags.get(TAG_SOURCE) or None, "log_error": number(TAG_LOG_ERROR),
            "note": tags.get(TAG_NOTE) or None}
