"""Torch candidates in the service: one pick = one MOP workload (Cerebro §4.2).

A selector arm for a torch candidate is the candidate itself (key: its name,
e.g. ``lenet``). Picking it creates one store job whose config is
``{"lrs": [...], "epochs": E}``; the executor trains the candidate's
learning-rate grid (ease.ml pvldb §3.1: the rates of its configs) as the
trials of one :class:`~ease_jupyter.execution.automl.LearningRateGrid`
procedure with :class:`~ease_jupyter.execution.mop.MOPRunner` on the
service's engine. The job's accuracy (the GP observation) is the best
config's best validation accuracy, and its artifact is that config's
best-scoring checkpoint.

Metrics (per epoch, ``epoch`` = epochs completed, 1 after the first):
``val_accuracy[lr=X]``, ``val_loss[lr=X]``, ``train_loss[lr=X]`` for every
config, plus ``val_accuracy`` and ``train_loss`` of the epoch's best config.
Each is published as a ``{"type": "metrics", ...}`` event as it happens.

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

import json
import logging
import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Mapping

import numpy as np

from ..datasets import load, program_of
from ..execution.automl import LearningRateGrid
from ..execution.mop.runner import EpochMetrics, MOPRunner, ResumeState, TrialProgress, UnitRecord
from ..execution.units import Hooks, UnitSpec, load_model
from ..schema import check_data
from ..store import BlobStore, Job, JobStatus, JobUpdate, Store, Task
from ..training import fail_job, read_model
from ..zoo import Candidate, Engine, candidates

log = logging.getLogger(__name__)

PROGRESS_TAG = "easeml.mop.progress"
RESUMED_TAG = "easeml.mop.resumed_from"
RESUMED_UNITS_TAG = "easeml.mop.resumed_units"
ARTIFACT_TAG = "easeml.artifact"
BEST_TRIAL_TAG = "easeml.mop.best_trial"
DEFAULT_EPOCHS = 3


def torch_candidates(task: Task) -> list[Candidate]:
    try:
        return [c for c in candidates(program_of(task)) if c.engine is Engine.TORCH]
    except Exception:  # noqa: BLE001 - a program with no candidates has none
        return []


def candidate_lrs(cand: Candidate) -> list[float]:
    lrs = [float(c.options["lr"]) for c in cand.configs if "lr" in c.options]
    return lrs or [0.1, 0.01, 0.001]


def torch_arms(task: Task, epochs: int) -> dict[str, tuple[str, dict]]:
    """Arm key (the candidate's name) -> (candidate name, job config)."""
    return {c.name: (c.name, {"lrs": candidate_lrs(c), "epochs": int(epochs)}) for c in torch_candidates(task)}


def _is_torch(task: Task, model: str) -> bool:
    return any(c.name == model for c in torch_candidates(task))


def _lr_name(lr: float) -> str:
    return f"lr={lr:g}"


def _existing_metrics(store: Store, job_id: int) -> set[tuple[int, str]]:
    return {(m.epoch, m.name) for m in store.list_metrics(job_id)}


def _resume_state(progress: Mapping[str, Any], blobs: BlobStore, partitions: int | None) -> ResumeState:
    """The runner's :class:`ResumeState` from a stored progress record: each
    trial's scores, its train units of the unfinished epoch and its latest
    checkpoint (its last unit's, else the one of the last finished epoch)."""
    units = progress.get("units", {})
    ckpts = dict(progress.get("ckpts", {}))
    trials, checkpoints = {}, {}
    for t in set(progress.get("scores", {})) | set(units):
        u = units.get(t, {})
        trials[t] = TrialProgress.from_dict({"scores": progress.get("scores", {}).get(t, ()), **u})
    for t in set(ckpts) | set(units):
        digest = units[t]["ckpt"] if t in units else ckpts[t]
        checkpoints[t] = blobs.get_bytes(digest)
    return ResumeState(int(progress.get("epoch", 0)), trials, checkpoints, partitions=partitions)


def run_torch_job(store: Store, blobs: BlobStore, engine: Any, job_id: int, *,
                  publish: Callable[[int, dict], None] | None = None, seed: int = 0,
                  partitions: int | None = None, quota: Any = None) -> Job:
    """Train a queued torch job (a pick) as one MOP workload; resume from its
    last finished MOP unit if it ran before. queued -> running -> succeeded | failed.
    With a ``quota.Quota``, the job fails (``QuotaExceededError``) when its
    owner is at her quota before training or its model would take her over it."""
    publish = publish or (lambda owner, event: None)
    job = store.get_job(job_id)
    if job.status is not JobStatus.QUEUED:
        return job
    job = store.update_job(job_id, JobStatus.RUNNING)
    task = store.get_task(job.task_id)
    started = time.monotonic()
    try:
        if quota is not None:
            quota.check_model(store, blobs, task, job, 1)
        cand = next(c for c in torch_candidates(task) if c.name == job.model)
        config = dict(job.config)
        lrs = [float(x) for x in config.get("lrs", candidate_lrs(cand))]
        epochs = int(config.get("epochs", DEFAULT_EPOCHS))
        trial_lr = {s.id: float(dict(s.params)["lr"]) for s in LearningRateGrid(cand.name, lrs, epochs=epochs).start()}
        tags = store.tags("job", job_id)
        progress = json.loads(tags[PROGRESS_TAG]) if PROGRESS_TAG in tags else {}
        done = int(progress.get("epoch", 0))
        cost = float(progress.get("seconds", 0.0))
        scores: dict[str, list[float]] = {t: list(v) for t, v in progress.get("scores", {}).items()}
        best: dict[str, list] = dict(progress.get("best", {}))  # trial -> [score, digest, epoch]
        ckpts: dict[str, str] = dict(progress.get("ckpts", {}))
        units: dict[str, dict] = dict(progress.get("units", {}))  # trial -> its units of epoch done + 1
        trained = int(progress.get("trained_units", 0))
        # A job keeps the partitions it started with: its finished units refer to them.
        parts = progress.get("partitions", partitions)
        resume = None
        if progress:
            resume = _resume_state(progress, blobs, parts)
            store.set_tag("job", job_id, RESUMED_TAG, str(done))
            store.set_tag("job", job_id, RESUMED_UNITS_TAG, json.dumps({
                "epoch": done, "units": resume.units_done,
                "visited": {t: list(p.visited) for t, p in sorted(resume.trials.items()) if p.visited}}))
            log.info("job %d resumes after epoch %d and %d units of the next", job_id, done, resume.units_done)
        if done < epochs:
            data = load(store, blobs, store.get_dataset_version(job.dataset_version_id))
            X = np.array(data.X, dtype=np.float32)
            y = np.asarray(data.y)
            seen = _existing_metrics(store, job_id)
            pending: dict[str, EpochMetrics] = {}
            runner_box: list[MOPRunner] = []

            def save_progress() -> None:
                store.set_tag("job", job_id, PROGRESS_TAG, json.dumps({
                    "epoch": done, "ckpts": ckpts, "scores": scores, "best": best,
                    "seconds": cost + time.monotonic() - started, "partitions": runner_box[0].partitions,
                    "units": units, "trained_units": trained}))

            def add(epoch: int, name: str, value: float) -> None:
                if (epoch, name) not in seen and value is not None and math.isfinite(value):
                    store.add_metric(job_id, epoch, name, float(value))
                    seen.add((epoch, name))

            def on_unit(rec: UnitRecord) -> None:
                # Cerebro §5.6: checkpoint between units, so that only unfinished units run again.
                nonlocal trained
                if rec.kind != "train":
                    return
                runner = runner_box[0]
                now = runner.trial_progress(rec.trial)
                units[rec.trial] = {"visited": list(now.visited), "loss_sum": now.loss_sum, "examples": now.examples,
                                    "seconds": now.seconds, "ckpt": blobs.put_bytes(runner.checkpoint(rec.trial))}
                trained += 1
                save_progress()

            def on_metrics(m: EpochMetrics) -> None:
                nonlocal done
                runner = runner_box[0]
                lr = trial_lr[m.trial]
                add(m.epoch, f"val_accuracy[{_lr_name(lr)}]", m.score)
                add(m.epoch, f"val_loss[{_lr_name(lr)}]", m.val_loss)
                add(m.epoch, f"train_loss[{_lr_name(lr)}]", m.train_loss)
                digest = blobs.put_bytes(runner.checkpoint(m.trial))
                ckpts[m.trial] = digest
                scores.setdefault(m.trial, []).append(m.score)
                if not math.isnan(m.score) and (m.trial not in best or m.score > best[m.trial][0]):
                    best[m.trial] = [m.score, digest, m.epoch]
                publish(task.owner_id, {"type": "metrics", "task_id": task.id, "job_id": job_id, "model": job.model,
                                        "trial": m.trial, "lr": lr, "epoch": m.epoch, "val_accuracy": m.score,
                                        "val_loss": m.val_loss, "train_loss": m.train_loss})
                pending[m.trial] = m
                live = [t for t in trial_lr if len(scores.get(t, [])) >= m.epoch]
                if len(live) == len(trial_lr):  # the epoch is complete for every trial
                    top = max(pending.values(), key=lambda e: -1.0 if math.isnan(e.score) else e.score)
                    add(m.epoch, "val_accuracy", top.score)
                    add(m.epoch, "train_loss", top.train_loss)
                    pending.clear()
                    done = m.epoch
                    units.clear()
                    save_progress()

            runner = MOPRunner(engine, LearningRateGrid(cand.name, lrs, epochs=epochs), [cand], X, y,
                               example_ids=data.example_ids, seed=seed, n_partitions=parts,
                               on_metrics=on_metrics, on_unit=on_unit, resume=resume)
            runner_box.append(runner)
            runner.run()
        ranked = [(v[0], t, v[1]) for t, v in best.items() if v[0] is not None and not math.isnan(v[0])]
        if not ranked:
            raise RuntimeError("no config produced a finite validation score")
        score, trial, digest = max(ranked, key=lambda r: (r[0], -list(trial_lr).index(r[1])))
        if quota is not None:
            quota.check_model(store, blobs, task, job, blobs.size(digest) or 0)
        store.set_tag("job", job_id, ARTIFACT_TAG, "torch-checkpoint")
        store.set_tag("job", job_id, BEST_TRIAL_TAG, json.dumps({"trial": trial, "lr": trial_lr[trial]}))
        seconds = cost + time.monotonic() - started
        return store.update_job(job_id, JobStatus.SUCCEEDED,
                                JobUpdate(accuracy=float(score), cost_seconds=seconds, artifact_blob=digest))
    except Exception as error:  # noqa: BLE001 - recorded on the job
        log.exception("torch job %d failed", job_id)
        return fail_job(store, job_id, error)


def torch_outputs(store: Store, blobs: BlobStore, task: Task, job: Job, X: Any, *,
                  batch: int = 4096) -> np.ndarray:
    """The raw outputs of a torch job's best checkpoint, in eval mode and in
    batches: logits (N, D) for classification, outputs for regression."""
    import torch

    cand = next(c for c in torch_candidates(task) if c.name == job.model)
    info = json.loads(store.tags("job", job.id).get(BEST_TRIAL_TAG, "{}"))
    lr = float(info.get("lr", candidate_lrs(cand)[0]))
    spec = UnitSpec.of(info.get("trial", "t0"), cand.name, {"lr": lr}, cand.build)
    net = load_model(read_model(blobs, task, job), spec, Hooks())
    X = np.require(X, dtype=np.float32, requirements=["C", "W"])  # torch wants a writable buffer
    net.eval()
    parts = []
    with torch.no_grad():
        for start in range(0, len(X), batch):
            parts.append(net(torch.as_tensor(X[start:start + batch])).cpu().numpy())
    return np.concatenate(parts) if parts else np.zeros((0,), dtype=np.float32)


def torch_infer(store: Store, blobs: BlobStore, task: Task, job: Job, X: Any) -> np.ndarray:
    """Predict with a torch job's best checkpoint: class indices for classification."""
    checked = check_data(program_of(task), X)
    out = torch_outputs(store, blobs, task, job, checked.X)
    return out.argmax(axis=1) if program_of(task).num_classes is not None else out


def is_torch_job(store: Store, job: Job) -> bool:
    return store.tags("job", job.id).get(ARTIFACT_TAG) == "torch-checkpoint"


class TorchExecutor:
    """Runs torch picks one at a time (a runner owns its engine's event
    stream) on an engine made lazily by ``make_engine(engine)``."""

    workers = 1

    def __init__(self, store: Store, blobs: BlobStore, *, engine: str = "local", engine_workers: int = 1,
                 publish: Callable[[int, dict], None] | None = None, seed: int = 0,
                 partitions: int | None = None, quota: Any = None):
        self.store, self.blobs = store, blobs
        self.quota = quota
        self.partitions = partitions
        self.engine_spec, self.engine_workers = engine, int(engine_workers)
        self.publish, self.seed = publish, seed
        self._engine: Any = None
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="easeml-mop")

    def engine(self) -> Any:
        with self._lock:
            if self._engine is None:
                from ..execution.engine import make_engine

                kwargs = {"n_workers": self.engine_workers} if self.engine_spec in ("local", "dask") else {}
                self._engine = make_engine(self.engine_spec, **kwargs)
            return self._engine

    def _run(self, job_id: int) -> Job:
        return run_torch_job(self.store, self.blobs, self.engine(), job_id, publish=self.publish, seed=self.seed,
                             partitions=self.partitions, quota=self.quota)

    def submit(self, job_id: int) -> "Future[Job]":
        return self._pool.submit(self._run, job_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            if self._engine is not None:
                try:
                    self._engine.close()
                except Exception:  # noqa: BLE001
                    log.exception("closing the MOP engine failed")
                self._engine = None


_torch_worker: dict[str, Any] = {}


def _init_torch_worker(db_url: str | None, data_dir: str, engine: str, engine_workers: int, seed: int,
                       partitions: int | None, events: Any, parent_pid: int, nice: int, quota: Any = None) -> None:
    from ..store import open_store
    from .runner import init_worker_process

    _torch_worker.update(stores=open_store(db_url, data_dir), spec=engine, workers=engine_workers, seed=seed,
                         partitions=partitions, events=events, engine=None, quota=quota)
    init_worker_process(parent_pid, nice)


def _run_torch_in_worker(job_id: int) -> int:
    w = _torch_worker
    if w["engine"] is None:
        from ..execution.engine import make_engine

        kwargs = {"n_workers": w["workers"]} if w["spec"] in ("local", "dask") else {}
        w["engine"] = make_engine(w["spec"], **kwargs)
    events = w["events"]
    store, blobs = w["stores"]
    return run_torch_job(store, blobs, w["engine"], job_id, publish=lambda owner, event: events.put((owner, event)),
                         seed=w["seed"], partitions=w["partitions"], quota=w["quota"]).id


class TorchProcessExecutor:
    """Torch picks in one spawned worker process (its own store connection
    and MOP engine), so that training never holds the service's GIL. The
    per-epoch ``metrics`` events come back over a queue and are published by
    a relay thread. A worker that dies is replaced (``runner.RespawningPool``);
    its job is re-queued and resumes from its last finished unit. With ``engine="dask"`` or
    ``tcp://...`` the worker process drives the Dask engine."""

    workers = 1

    def __init__(self, db_url: str | None, data_dir: Any, *, engine: str = "local", engine_workers: int = 1,
                 publish: Callable[[int, dict], None] | None = None, seed: int = 0, nice: int = 0,
                 partitions: int | None = None, quota: Any = None):
        import multiprocessing
        import os

        self._ctx = multiprocessing.get_context("spawn")
        self._events = self._ctx.Queue()
        self._publish = publish or (lambda owner, event: None)
        from .runner import RespawningPool

        self._pool = RespawningPool(1, _init_torch_worker, (db_url, str(data_dir), engine, int(engine_workers), int(seed),
                                                            partitions, self._events, os.getpid(), int(nice), quota),
                                  self._ctx)
        self._relay = threading.Thread(target=self._relay_events, name="easeml-mop-events", daemon=True)
        self._relay.start()

    def _relay_events(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            try:
                self._publish(*item)
            except Exception:  # noqa: BLE001 - one bad event must not stop the relay
                log.exception("relaying a MOP event failed")

    def submit(self, job_id: int) -> "Future[int]":
        return self._pool.submit(_run_torch_in_worker, job_id)

    def worker_pids(self) -> list[int]:
        return self._pool.worker_pids()

    def shutdown(self) -> None:
        self._pool.shutdown()
        self._events.put(None)
        self._relay.join(10)

