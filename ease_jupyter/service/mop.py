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

Restart recovery. After every epoch each trial's checkpoint goes into the
blob store and the job's tag ``easeml.mop.progress`` records the completed
epoch, the checkpoint digests, the scores so far and each trial's best
checkpoint. A job re-queued after a restart (or a lost worker) rebuilds the
procedure, replays the stored scores (procedures are deterministic functions
of their results, ``automl/base.py``), loads the checkpoints and continues
with the next epoch; ``easeml.mop.resumed_from`` says from which epoch.
Units are seeded by (trial, epoch, partition), so the resumed epochs train
exactly as they would have without the interruption.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..datasets import load, program_of
from ..execution.automl import LearningRateGrid
from ..execution.automl.base import TrialResult
from ..execution.mop.runner import EpochMetrics, MOPRunner
from ..execution.units import Hooks, UnitSpec, load_model
from ..schema import check_data
from ..store import BlobStore, Job, JobStatus, JobUpdate, Store, Task
from ..zoo import Candidate, Engine, candidates

log = logging.getLogger(__name__)

PROGRESS_TAG = "easeml.mop.progress"
RESUMED_TAG = "easeml.mop.resumed_from"
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


class _Replayed:
    """A procedure brought back to where an interrupted run left it: its
    ``start`` replays the stored per-epoch scores and returns the live trials."""

    def __init__(self, inner: Any, scores: Mapping[str, Sequence[float]], done: int):
        self.inner, self.scores, self.done = inner, scores, done

    def start(self) -> list:
        specs = self.inner.start()
        live = [s.id for s in specs]
        for e in range(self.done):
            decision = self.inner.epoch_end({t: TrialResult(t, e + 1, float(self.scores[t][e])) for t in live})
            stopped = set(decision.stop)
            live = [t for t in live if t not in stopped] + [s.id for s in decision.add]
            if decision.finished:
                break
        return [s for s in specs if s.id in live]

    def epoch_end(self, results):
        return self.inner.epoch_end(results)

    def best(self):
        return self.inner.best()


class _ResumableRunner(MOPRunner):
    """A MOPRunner whose trials may start from stored checkpoints at a given epoch."""

    def __init__(self, *args: Any, resume: Mapping[str, tuple[int, bytes]] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._resume = dict(resume or {})

    def _admit(self, specs) -> None:  # noqa: D401 - see MOPRunner._admit
        super()._admit(specs)
        for spec in specs:
            if spec.id in self._resume:
                epoch, data = self._resume[spec.id]
                old = self._latest[spec.id]
                self._latest[spec.id] = self._store(data, spec.id)
                self._discard(old)
                self._epochs[spec.id] = int(epoch)

    def latest_bytes(self, trial: str) -> bytes:
        from ..execution.units import read_checkpoint

        return read_checkpoint(self._latest[trial])


def _existing_metrics(store: Store, job_id: int) -> set[tuple[int, str]]:
    return {(m.epoch, m.name) for m in store.list_metrics(job_id)}


def run_torch_job(store: Store, blobs: BlobStore, engine: Any, job_id: int, *,
                  publish: Callable[[int, dict], None] | None = None, seed: int = 0,
                  partitions: int | None = None) -> Job:
    """Train a queued torch job (a pick) as one MOP workload; resume from its
    last checkpointed epoch if it ran before. queued -> running -> succeeded | failed."""
    publish = publish or (lambda owner, event: None)
    job = store.get_job(job_id)
    if job.status is not JobStatus.QUEUED:
        return job
    job = store.update_job(job_id, JobStatus.RUNNING)
    task = store.get_task(job.task_id)
    started = time.monotonic()
    try:
        cand = next(c for c in torch_candidates(task) if c.name == job.model)
        config = dict(job.config)
        lrs = [float(x) for x in config.get("lrs", candidate_lrs(cand))]
        epochs = int(config.get("epochs", DEFAULT_EPOCHS))
        procedure = LearningRateGrid(cand.name, lrs, epochs=epochs)
        trial_lr = {s.id: float(dict(s.params)["lr"]) for s in LearningRateGrid(cand.name, lrs, epochs=epochs).start()}
        tags = store.tags("job", job_id)
        progress = json.loads(tags[PROGRESS_TAG]) if PROGRESS_TAG in tags else None
        done = int(progress["epoch"]) if progress else 0
        cost = float(progress.get("seconds", 0.0)) if progress else 0.0
        scores: dict[str, list[float]] = {t: list(v) for t, v in (progress or {}).get("scores", {}).items()}
        best: dict[str, list] = dict((progress or {}).get("best", {}))  # trial -> [score, digest, epoch]
        ckpts: dict[str, str] = dict((progress or {}).get("ckpts", {}))
        if done:
            store.set_tag("job", job_id, RESUMED_TAG, str(done))
            log.info("job %d resumes from epoch %d", job_id, done)
        if done < epochs:
            data = load(store, blobs, store.get_dataset_version(job.dataset_version_id))
            X = np.array(data.X, dtype=np.float32)
            y = np.asarray(data.y)
            resume = {t: (done, blobs.get_bytes(d)) for t, d in ckpts.items()} if done else None
            proc = _Replayed(procedure, scores, done) if done else procedure
            seen = _existing_metrics(store, job_id)
            pending: dict[str, EpochMetrics] = {}
            runner_box: list[_ResumableRunner] = []

            def add(epoch: int, name: str, value: float) -> None:
                if (epoch, name) not in seen and value is not None and math.isfinite(value):
                    store.add_metric(job_id, epoch, name, float(value))
                    seen.add((epoch, name))

            def on_metrics(m: EpochMetrics) -> None:
                runner = runner_box[0]
                lr = trial_lr[m.trial]
                add(m.epoch, f"val_accuracy[{_lr_name(lr)}]", m.score)
                add(m.epoch, f"val_loss[{_lr_name(lr)}]", m.val_loss)
                add(m.epoch, f"train_loss[{_lr_name(lr)}]", m.train_loss)
                digest = blobs.put_bytes(runner.latest_bytes(m.trial))
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
                    store.set_tag("job", job_id, PROGRESS_TAG, json.dumps({
                        "epoch": m.epoch, "ckpts": ckpts, "scores": scores, "best": best,
                        "seconds": cost + time.monotonic() - started}))

            runner = _ResumableRunner(engine, proc, [cand], X, y, example_ids=data.example_ids, seed=seed,
                                      n_partitions=partitions, on_metrics=on_metrics, resume=resume)
            runner_box.append(runner)
            runner.run()
        ranked = [(v[0], t, v[1]) for t, v in best.items() if v[0] is not None and not math.isnan(v[0])]
        if not ranked:
            raise RuntimeError("no config produced a finite validation score")
        score, trial, digest = max(ranked, key=lambda r: (r[0], -list(trial_lr).index(r[1])))
        store.set_tag("job", job_id, ARTIFACT_TAG, "torch-checkpoint")
        store.set_tag("job", job_id, BEST_TRIAL_TAG, json.dumps({"trial": trial, "lr": trial_lr[trial]}))
        seconds = cost + time.monotonic() - started
        return store.update_job(job_id, JobStatus.SUCCEEDED,
                                JobUpdate(accuracy=float(score), cost_seconds=seconds, artifact_blob=digest))
    except Exception as error:  # noqa: BLE001 - recorded on the job
        log.exception("torch job %d failed", job_id)
        message = "".join(traceback.format_exception_only(type(error), error)).strip()
        return store.update_job(job_id, JobStatus.FAILED, JobUpdate(error=message))


def torch_outputs(store: Store, blobs: BlobStore, task: Task, job: Job, X: Any, *,
                  batch: int = 4096) -> np.ndarray:
    """The raw outputs of a torch job's best checkpoint, in eval mode and in
    batches: logits (N, D) for classification, outputs for regression."""
    import torch

    cand = next(c for c in torch_candidates(task) if c.name == job.model)
    info = json.loads(store.tags("job", job.id).get(BEST_TRIAL_TAG, "{}"))
    lr = float(info.get("lr", candidate_lrs(cand)[0]))
    spec = UnitSpec.of(info.get("trial", "t0"), cand.name, {"lr": lr}, cand.build)
    net = load_model(blobs.get_bytes(job.artifact_blob), spec, Hooks())
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
                 partitions: int | None = None):
        self.store, self.blobs = store, blobs
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
                             partitions=self.partitions)

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
                       partitions: int | None, events: Any, parent_pid: int, nice: int) -> None:
    from ..store import open_store
    from .runner import init_worker_process

    _torch_worker.update(stores=open_store(db_url, data_dir), spec=engine, workers=engine_workers, seed=seed,
                         partitions=partitions, events=events, engine=None)
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
                         seed=w["seed"], partitions=w["partitions"]).id


class TorchProcessExecutor:
    """Torch picks in one spawned worker process (its own store connection
    and MOP engine), so that training never holds the service's GIL. The
    per-epoch ``metrics`` events come back over a queue and are published by
    a relay thread. A worker that dies breaks the pool: its job comes back
    still RUNNING and the loop re-queues it (it resumes from its checkpoint),
    and the next submit starts a fresh pool. With ``engine="dask"`` or
    ``tcp://...`` the worker process drives the Dask engine."""

    workers = 1

    def __init__(self, db_url: str | None, data_dir: Any, *, engine: str = "local", engine_workers: int = 1,
                 publish: Callable[[int, dict], None] | None = None, seed: int = 0, nice: int = 0,
                 partitions: int | None = None):
        import multiprocessing
        import os

        self._ctx = multiprocessing.get_context("spawn")
        self._events = self._ctx.Queue()
        self._publish = publish or (lambda owner, event: None)
        self._args = (db_url, str(data_dir), engine, int(engine_workers), int(seed), partitions, self._events, os.getpid(),
                      int(nice))
        self._pool = self._new_pool()
        self._relay = threading.Thread(target=self._relay_events, name="easeml-mop-events", daemon=True)
        self._relay.start()

    def _new_pool(self) -> Any:
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(max_workers=1, mp_context=self._ctx, initializer=_init_torch_worker,
                                   initargs=self._args)

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
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self._pool.submit(_run_torch_in_worker, job_id)
        except (BrokenProcessPool, RuntimeError):
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
            return self._pool.submit(_run_torch_in_worker, job_id)

    def worker_pids(self) -> list[int]:
        return list(getattr(self._pool, "_processes", None) or {})

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._events.put(None)
        self._relay.join(10)

