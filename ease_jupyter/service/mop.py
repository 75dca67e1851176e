"""Torch candidates in the service: one pick = one MOP workload (Cerebro §4.2).

A selector arm for a torch candidate is the candidate itself (key: its name,
e.g. ``lenet``). Picking it creates one store job whose spec is a
``jobspec.TorchWorkload`` (config ``{"lrs": [...], "epochs": E}``); the
executor trains the candidate's
learning-rate grid (ease.ml pvldb §3.1: the rates of its configs) as the
trials of one successive-halving procedure
(:func:`~ease_jupyter.execution.automl.pick_procedure`, Cerebro §4.2: the
configs that rank poorly at a rung stop early; ``E`` is the most epochs, and
the job's tag ``easeml.mop.stopped_early`` maps each stopped config to the
epochs it trained) with :class:`~ease_jupyter.execution.mop.MOPRunner` on
the service's engine.

Several picks (of one or several users) train at once: each job slot hands
its workload to the one :class:`~ease_jupyter.execution.mop.pool_driver.PoolDriver`
of the engine and waits for it, and the driver draws the units of all
active workloads (Cerebro's MOP across tasks), sharing the workers equally
among the jobs' owners. The job's accuracy (the GP observation) is the best
surviving config's best validation accuracy, and its artifact is that
config's best-scoring checkpoint.

Metrics (per epoch, ``epoch`` = epochs completed, 1 after the first):
``val_accuracy[lr=X]``, ``val_loss[lr=X]``, ``train_loss[lr=X]`` for every
config, plus ``val_accuracy`` and ``train_loss`` of the epoch's best config.
Each is published as a ``{"type": "metrics", ...}`` event as it happens.
An event that fails to go out is logged and training goes on; a metric,
progress record or checkpoint that cannot be stored fails the job with that
error (``_job_record``), as does a user model past its limit.

Profiling (ACAI §4.2.2). A job with a profiling plan (``easeml.profile.plan``,
the first job of a family the profiler has no record of) first trains its
first config for one epoch on each planned subsample
(``profile_runs.profile_torch``; a user's factory as MOP units of one
partition on the job's engine, within her job's limit,
``profile_runs.profile_in_units``) and records the runs
(``easeml.profile.runs``) before its workload; the workload's own seconds
are ``easeml.profile.full_seconds`` and the job's cost is their sum with the
runs'. A job that has its runs recorded, or is resumed, does not profile
(again).

Restart recovery (Cerebro §5.6: model states are checkpointed between
training units, so only unfinished units run again). The job's tag
``easeml.mop.progress`` is a JSON record rewritten after every finished
train unit and after every epoch:

* ``epoch``: the epochs every config has completed; ``ckpts``, ``scores``
  and ``best`` (trial -> [score, checkpoint digest, epoch]) describe them as
  before: checkpoints at the end of ``epoch``, per-epoch scores, best
  checkpoints;
* ``units``: trial -> its train units of epoch ``epoch + 1`` so far: the
  partitions it ``visited`` in order, the train-loss sums (``loss_sum``,
  ``examples``, ``seconds``) and the blob digest ``ckpt`` of its weights
  after its last unit (empty at an epoch boundary);
* ``partitions``: the job's partition count (it keeps it across restarts);
  ``trained_units``: train units recorded over the job's life (a unit
  recorded before a crash is never trained again, so a finished job has
  exactly configs x partitions x epochs); ``seconds``: compute so far.

A job re-queued after a restart (or a lost worker) gives the runner this
record as a :class:`~ease_jupyter.execution.mop.runner.ResumeState`: the
runner replays the procedure's decisions from the scores, loads the
checkpoints, takes the recorded units of the unfinished epoch as done and
trains only the rest (only validation, if every train unit had finished).
``easeml.mop.resumed_from`` says after how many complete epochs it resumed
(as before); ``easeml.mop.resumed_units`` is JSON ``{"epoch": E, "units": N,
"visited": {trial: [partitions]}}``: the N train units of epoch E + 1 it did
not train again. Units are seeded by (trial, epoch, partition), so a resumed
unit trains exactly as it would have without the interruption. Per-epoch
metrics are stored once (a metric already stored is not added again).
Each unit's checkpoint is a new content-addressed blob; old ones are left
in the blob store.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator

import numpy as np

from ..datasets import load
from ..errors import ClusterUnavailableError
from ..execution.automl import pick_procedure, pick_survivors
from ..execution.mop.placement import AUTO_REPLICATION
from ..execution.mop.pool_driver import PoolDriver
from ..execution.mop.runner import EpochMetrics, MOPRunner, StopRun, UnitRecord
from ..execution.units import Hooks
from ..jobspec import TorchWorkload, metric_name, parse_job, point_label
from ..selection.profile_plan import plan_from_json
from ..store import BlobStore, Job, JobStatus, JobUpdate, Store
from ..user_sandbox import from_user_code
from .candidates import candidate_of
from . import user_models
from .models import BEST_TRIAL_TAG
from .mop_progress import JobProgress
from .profile_runs import profile_in_units, profile_torch
from .profiling import TAG_FULL_SECONDS, TAG_PLAN, TAG_RESOURCES, TAG_RUNS, job_resources, profiling_runs

log = logging.getLogger(__name__)

PROGRESS_TAG = "easeml.mop.progress"
RESUMED_TAG = "easeml.mop.resumed_from"
RESUMED_UNITS_TAG = "easeml.mop.resumed_units"
REDUCED_BATCH_TAG = "easeml.mop.reduced_batch_size"  # config -> batch size after an out-of-memory retry
STOPPED_TAG = "easeml.mop.stopped_early"  # config -> epochs it trained before successive halving stopped it


def _existing_metrics(store: Store, job_id: int) -> set[tuple[int, str]]:
    return {(m.epoch, m.name) for m in store.list_metrics(job_id)}


def run_torch_job(store: Store, blobs: BlobStore, engine: Any, job_id: int, *,
                  publish: Callable[[int, dict], None] | None = None, seed: int = 0,
                  partitions: int | None = None, quota: Any = None, precision: str = "fp32",
                  blob_url: str | None = None) -> Job:
    """Train a queued torch job (a pick) as one MOP workload on the engine's
    shared driver, beside the other jobs running there, and wait for it;
    resume from its last finished MOP unit if it ran before. queued -> running -> succeeded | failed.
    The callbacks below run on the driver's thread, between units.
    With a ``quota.Quota``, the job fails (``QuotaExceededError``) when its
    owner is at her quota before training, or its model would take her over
    it: checked once every config trained a unit (``_ModelSizes``), and again
    for the model it keeps.
    ``precision`` is the units' arithmetic (``Hooks.precision``); with a
    ``blob_url``, partitions and checkpoints travel through that fsspec URL."""
    publish = publish or (lambda owner, event: None)
    job = store.get_job(job_id)
    if job.status is not JobStatus.QUEUED:
        return job
    job = store.update_job(job_id, JobStatus.RUNNING)
    task = store.get_task(job.task_id)
    started = time.monotonic()
    earlier = 0.0  # what earlier attempts ran and left to resume from: a failure pays it, as a success does
    try:
        if quota is not None:
            quota.check_model(store, blobs, task, job, 1)
        spec = parse_job(job.model, job.config)
        if not isinstance(spec, TorchWorkload):
            raise TypeError(f"job {job_id} is a {spec.engine.value} job, not a torch workload")
        cand = candidate_of(task, spec, blobs)  # a user model's is loaded here (user_models.py)
        own = _own_model(spec)
        epochs = spec.epochs
        trial_params = {s.id: dict(s.params) for s in pick_procedure(cand.name, spec.points(), max_epochs=epochs).start()}
        trial_lr = {t: float(p["lr"]) for t, p in trial_params.items()}
        trial_label = {t: point_label(p) for t, p in trial_params.items()}  # lr=0.01 (and a user grid's options)
        tags = store.tags("job", job_id)
        resumed = PROGRESS_TAG in tags
        progress = JobProgress.from_json(tags[PROGRESS_TAG]) if resumed else JobProgress()
        if progress.partitions is None:  # a job keeps the partitions it started with: its units refer to them
            # the admin's fixed count, else the auto-provisioner's for this pick, else one per worker
            progress.partitions = partitions if partitions is not None or TAG_RESOURCES not in tags \
                else job_resources(tags).partitions
        cost = progress.seconds
        earlier = cost + (sum(r["seconds"] for r in profiling_runs(tags)) if TAG_RUNS in tags else 0.0)
        resume = None
        if resumed:
            resume = progress.resume_state(blobs)
            store.set_tag("job", job_id, RESUMED_TAG, str(progress.epoch))
            store.set_tag("job", job_id, RESUMED_UNITS_TAG, json.dumps({
                "epoch": progress.epoch, "units": resume.units_done,
                "visited": {t: list(p.visited) for t, p in sorted(resume.trials.items()) if p.visited}}))
            log.info("job %d resumes after epoch %d and %d units of the next", job_id, progress.epoch,
                     resume.units_done)
        if progress.epoch < epochs:
            data = load(store, blobs, store.get_dataset_version(job.dataset_version_id))
            X = np.array(data.X, dtype=np.float32)
            y = np.asarray(data.y)
            if TAG_PLAN in tags and not resumed and TAG_RUNS not in tags:  # profiled once, never on a resume
                profiling_started = time.monotonic()
                first_trial, first_params = next(iter(trial_params.items()))
                plan = plan_from_json(tags[TAG_PLAN])
                if own is None:
                    runs = profile_torch(cand, first_trial, first_params, X, y, data.split_keys, plan,
                                         seed=seed, hooks=Hooks(precision=precision))
                else:  # her forward runs only in units, within her limit, as her training's
                    def profiling_epoch(train: tuple[Any, Any], validation: tuple[Any, Any]) -> None:
                        runner = MOPRunner(engine, pick_procedure(cand.name, [first_params], max_epochs=1), [cand],
                                           *train, validation=validation, seed=seed, n_partitions=1,
                                           hooks=Hooks(precision=precision), blob_url=blob_url,
                                           **own.runner_options(profiling=True))
                        try:
                            PoolDriver.shared(engine, seed=seed).run(runner, owner=str(task.owner_id))
                        finally:
                            own.charge(runner)

                    runs = profile_in_units(plan, X, y, data.split_keys, profiling_epoch, seed=seed,
                                            limit_spent=own.spent_all, name=cand.name)
                store.set_tag("job", job_id, TAG_RUNS, json.dumps(runs))
                started += time.monotonic() - profiling_started  # the workload's own seconds leave them out
            seen = _existing_metrics(store, job_id)
            sizes = None if quota is None else _ModelSizes(
                functools.partial(quota.check_model, store, blobs, task, job), len(trial_params))
            pending: dict[str, EpochMetrics] = {}
            runner_box: list[MOPRunner] = []

            def save_progress() -> None:
                progress.seconds = cost + time.monotonic() - started
                progress.partitions = runner_box[0].partitions
                store.set_tag("job", job_id, PROGRESS_TAG, progress.to_json())

            def add(epoch: int, name: str, value: float) -> None:
                if (epoch, name) not in seen and value is not None and math.isfinite(value):
                    store.add_metric(job_id, epoch, name, float(value))
                    seen.add((epoch, name))

            def on_unit(rec: UnitRecord) -> None:
                with _job_record():
                    if own is not None:
                        own.check(runner_box[0].time_used)  # a user model past its job's limit fails the workload here
                    # Cerebro §5.6: checkpoint between units, so that only unfinished units run again.
                    if rec.kind != "train":
                        return
                    runner = runner_box[0]
                    checkpoint = runner.checkpoint(rec.trial)
                    if sizes is not None:  # a model she could not keep stops training here
                        sizes.check(rec.trial, len(checkpoint))
                    progress.record_unit(rec.trial, runner.trial_progress(rec.trial), blobs.put_bytes(checkpoint))
                    save_progress()

            def on_metrics(m: EpochMetrics) -> None:
                label = trial_label[m.trial]
                with _job_record():
                    add(m.epoch, metric_name("val_accuracy", label), m.score)
                    add(m.epoch, metric_name("val_loss", label), m.val_loss)
                    add(m.epoch, metric_name("train_loss", label), m.train_loss)
                    progress.record_epoch(m.trial, m.epoch, m.score,
                                          blobs.put_bytes(runner_box[0].checkpoint(m.trial)))
                    pending[m.trial] = m
                    if progress.complete(runner_box[0].live_trials, m.epoch):  # configs stopped early have no score
                        top = max(pending.values(), key=lambda e: -1.0 if math.isnan(e.score) else e.score)
                        add(m.epoch, "val_accuracy", top.score)
                        add(m.epoch, "train_loss", top.train_loss)
                        pending.clear()
                        save_progress()
                # The event is for watchers only: if it fails, the runner logs that and training goes on.
                publish(task.owner_id, {"type": "metrics", "task_id": task.id, "job_id": job_id, "model": job.model,
                                        "trial": m.trial, "lr": trial_lr[m.trial], "epoch": m.epoch,
                                        "val_accuracy": m.score, "val_loss": m.val_loss, "train_loss": m.train_loss})

            runner = MOPRunner(engine, pick_procedure(cand.name, spec.points(), max_epochs=epochs), [cand], X, y,
                               example_ids=data.split_keys, seed=seed, n_partitions=progress.partitions,
                               replication=AUTO_REPLICATION, hooks=Hooks(precision=precision), blob_url=blob_url,
                               on_metrics=on_metrics, on_unit=on_unit, resume=resume,
                               **({} if own is None else own.runner_options()))
            runner_box.append(runner)
            try:
                PoolDriver.shared(engine, seed=seed).run(runner, owner=str(task.owner_id))
            finally:
                if runner.reduced_batch_sizes:  # out-of-memory retries (the job's record says so)
                    store.set_tag("job", job_id, REDUCED_BATCH_TAG, json.dumps(
                        {trial_label[t]: b for t, b in sorted(runner.reduced_batch_sizes.items())}))
        # The pick's result is its best surviving config's: one stopped early lost at a rung to a survivor.
        survivors = pick_survivors({t: len(progress.scores.get(t, ())) for t in trial_lr}, epochs)
        stopped = {trial_label[t]: len(progress.scores.get(t, ())) for t in trial_lr if t not in survivors}
        if stopped:
            store.set_tag("job", job_id, STOPPED_TAG, json.dumps(stopped))
        ranked = [(v[0], t, v[1]) for t, v in progress.best.items() if not math.isnan(v[0]) and t in survivors]
        if not ranked:
            raise RuntimeError("no config produced a finite validation score")
        score, trial, digest = max(ranked, key=lambda r: (r[0], -list(trial_lr).index(r[1])))
        if quota is not None:
            quota.check_model(store, blobs, task, job, blobs.size(digest) or 0)
        store.set_tag("job", job_id, BEST_TRIAL_TAG, json.dumps({"trial": trial, "lr": trial_lr[trial],
                                                                 "params": trial_params[trial]}))
        seconds = cost + time.monotonic() - started
        if TAG_PLAN in tags:  # the profiling runs are paid for: the job's cost counts them
            store.set_tag("job", job_id, TAG_FULL_SECONDS, repr(float(seconds)))
            seconds += sum(r["seconds"] for r in profiling_runs(store.tags("job", job_id)))
        return store.update_job(job_id, JobStatus.SUCCEEDED,
                                JobUpdate(accuracy=float(score), cost_seconds=seconds, artifact_blob=digest))
    except Exception as error:  # noqa: BLE001 - recorded on the job
        if isinstance(error, ClusterUnavailableError):  # not the model's: retried later (failures.py)
            log.warning("torch job %d: %s", job_id, error)
        elif _users_model(job) or from_user_code(error):
            # its text may hold her prints and traceback: hers, in the job's error, not in the log others read
            log.warning("torch job %d of a user's model failed (%s)", job_id, type(error).__name__)
        else:
            log.exception("torch job %d failed", job_id)
        return user_models.fail_any_job(store, job, error, earlier_seconds=earlier)


def _users_model(job: Any) -> bool:
    try:
        return parse_job(job.model, job.config).is_user_model
    except Exception:  # noqa: BLE001 - then not known to be hers
        return False


@contextlib.contextmanager
def _job_record() -> Iterator[None]:
    """Around what a torch job's listeners do for the job itself: the check
    of a user model's limit, the progress record (a restart resumes from
    it, and the job's result is read from it) and the metrics. An error
    there ends the workload with that very error (``StopRun``; the runner
    would log and pass over any other), so the job fails as it should: a
    user model past its limit with ``UserModelTimeout``, a store that cannot
    be written as a storage failure. A job that trained on without its
    record would end wrong, not merely less visible."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - handed to the runner as the workload's error
        raise StopRun(error) from None


class _ModelSizes:
    """The quota's check of a job's model before it is trained in full.

    The job's model is one of its configs' checkpoints, as large as any
    other checkpoint of that config. Once every config has a checkpoint
    (after its first train unit), ``check`` asks the quota about the
    smallest: if even that one could not be kept, the job fails there
    (``quota.ModelOverQuotaError``), not after the whole workload trained."""

    def __init__(self, check_model: Callable[[int], None], n_configs: int):
        self._check_model, self._n_configs = check_model, n_configs
        self._sizes: dict[str, int] | None = {}  # config -> its checkpoint's bytes; None once checked

    def check(self, trial: str, size: int) -> None:
        if self._sizes is None:
            return
        self._sizes.setdefault(trial, size)
        if len(self._sizes) >= self._n_configs:
            smallest, self._sizes = min(self._sizes.values()), None
            self._check_model(smallest)


@dataclass
class _OwnModel:
    """What changes for a job of a user's own model: its limit is a budget
    of running time, shared by her profiling runs and her workload
    (``MOPRunner.time_budget``: the seconds her units run on workers, not
    the time they wait for one behind other owners' units). It is checked
    after every unit (``check``, from the job's ``on_unit``: past it, the
    workload ends there with ``UserModelTimeout``) and bounds every unit (a
    unit still running when it is spent, e.g. in a ``forward`` that never
    returns, is given up on and its worker replaced by the engine, and the
    job fails with ``UserModelTimeout``); a unit that raised is not retried
    (her code fails the same way again)."""

    name: str
    limit: float
    used: float = 0.0  # seconds charged by her job's finished runs (profiling)

    def charge(self, runner: MOPRunner) -> None:
        """Add a finished run's running time to what her job has used."""
        self.used += runner.time_used

    def spent_all(self) -> bool:
        return self.used >= self.limit

    def check(self, running: float) -> None:
        """Fail her job once it has run more than her limit, with ``running``
        seconds of the current run's units on top of what earlier runs used."""
        if self.used + running > self.limit:
            self.spent()

    def spent(self) -> None:
        raise user_models.UserModelTimeout(f"{self.name}: the job ran past its limit of {self.limit:g} s")

    def timed_out(self, during: str = "") -> None:
        raise user_models.UserModelTimeout(
            f"{self.name}: a training unit{during} (her forward, loss or backward) was still running at the "
            f"job's limit of {self.limit:g} s, expected it to return; it was given up on and its worker replaced")

    def runner_options(self, *, profiling: bool = False) -> dict[str, Any]:
        """The runner's options for her workload, or for one of her job's
        profiling runs (``profiling``: the same guard, its error says so):
        the budget her job has left."""
        on_deadline = functools.partial(self.timed_out, " of a profiling run") if profiling else self.timed_out
        return {"max_unit_retries": 0, "unit_timeout": self.limit + 60.0,
                "time_budget": max(self.limit - self.used, 0.0), "on_deadline": on_deadline,
                "on_budget_spent": self.spent}


def _own_model(spec: TorchWorkload) -> _OwnModel | None:
    return None if spec.code is None else _OwnModel(spec.model, float(spec.limit))


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def measure_torch_pool(store: Store, blobs: BlobStore, runner: "TorchJobs") -> Any:
    """The device speeds of the pool torch picks train on
    (``device_speed.PoolSpeeds``), or None for a pool without GPU workers,
    where torch and scikit-learn run on the same kind of device and one
    speed prices both. Runs where the torch jobs run (``executor.call``),
    on an engine of its own, so that it takes no events from the jobs'."""
    from ..execution.device_speed import measure_pool

    engine = runner.make_engine()
    try:
        if not engine.gpu_workers():
            return None
        return measure_pool(engine, timeout=PROBE_SECONDS)
    finally:
        engine.close()


PROBE_SECONDS = 120.0


@dataclass(frozen=True)
class TorchJobs:
    """The job runner of torch picks (``executors.JobRunner``): its job slots
    share one engine (``make_engine()``: a local engine of ``engine_workers``
    workers, or a client of a Dask cluster), whose driver interleaves their
    MOP workloads."""

    shares_engine: ClassVar[bool] = True  # the executors read it
    engine: str = "local"
    engine_workers: int = 1
    seed: int = 0
    partitions: int | None = None
    quota: Any = None
    precision: str = "fp32"
    blob_url: str | None = None

    def make_engine(self) -> Any:
        from ..execution.engine import make_engine

        kwargs: dict[str, Any] = {"n_workers": self.engine_workers} if self.engine in ("local", "dask") else {}
        if self.engine == "local" and _has_cuda():  # one GPU box: its local workers train there
            from ..execution.engine import GPU

            kwargs["worker_resources"] = [{GPU: 1}] * self.engine_workers
        return make_engine(self.engine, **kwargs)

    def run(self, store: Store, blobs: BlobStore, engine: Any, job_id: int,
            publish: Callable[[int, dict], None]) -> Job:
        return run_torch_job(store, blobs, engine, job_id, publish=publish, seed=self.seed,
                             partitions=self.partitions, quota=self.quota, precision=self.precision,
                             blob_url=self.blob_url)
