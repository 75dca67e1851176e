"""The MOP runner: an AutoML procedure, trained as MOP units on an engine.

It joins the three pure parts (the procedure, :class:`MOPScheduler`, the
units) to an :class:`~ease_jupyter.execution.engine.Engine`, and owns the
loop (Cerebro §4.2, the protocol in ``automl/base.py``):

1. Shuffle the training data once and cut it into p partitions (default:
   one per worker); cut the validation data (given, or a stable 80/20 split
   by example id, ``holdout.validation_mask``) into p partitions too. Place
   each on ``replication`` workers; never broadcast.
2. ``procedure.start()`` gives the trials. Each gets fresh weights built
   under its own seed and adapted to the training data, or, with
   ``init_from``, a copy of that trial's latest checkpoint.
3. Each epoch, every live trial visits every partition through training
   units pinned to the partition's workers (Alg. 1-2); the model hops by
   checkpoint after every unit. Then the same machinery runs validation
   units (one scheduler epoch over the validation partitions, parameters not
   trained), and the summed validation statistics give each trial's
   :class:`TrialResult`. Per-trial :class:`EpochMetrics` go to ``on_metrics``
   as soon as they exist.
4. ``procedure.epoch_end`` stops and adds trials; ``scheduler.next_epoch``
   starts the next epoch with the live set, until a decision is finished.

A runner owns its engine's event stream while it runs (``Engine.events`` has
one consumer): run one runner per engine at a time, or give each its own
engine.

Faults (§5.6). A unit that is lost (its worker died, its deadline passed,
its input went away) goes back to Q and runs again from the same
checkpoint, which never changed because only a completed unit moves a
trial's checkpoint. A lost worker leaves the schedulers; partitions left
with fewer than ``replication`` live copies are placed again on the next
worker that joins (a Dask nanny restarts a killed worker within a second),
or, after ``repair_grace`` seconds, on an idle live worker. Units are
deterministic, so a run replayed with ``visit_order=result.visit_log`` ends
with the same weights with or without faults.

Restart recovery (§5.6: "the trained model states are always checkpointed
between training units"). A process that dies loses the run, not its work,
if it kept :meth:`MOPRunner.resume_state` (or its parts,
:meth:`MOPRunner.trial_progress` and :meth:`MOPRunner.checkpoint`) after
every unit. ``MOPRunner(..., resume=state)`` then goes on from the last
finished unit: it replays the procedure's decisions of the completed epochs
from the stored scores (procedures are deterministic functions of their
results, ``automl/base.py``), loads each trial's checkpoint, marks the
units of the interrupted epoch that finished as completed
(:meth:`MOPScheduler.mark_completed`), so they are never trained again, and
restores the epoch's train-loss sums, so its ``train_loss`` is that of all
its units. If every train unit had finished, only validation runs again (it
changes no weights). The resumed units are seeded as before (unit seeds
depend only on trial, epoch and partition); the order in which the rest of
the epoch visits partitions is drawn afresh unless ``visit_order`` replays
the interrupted run's log, in which case the weights equal those of an
uninterrupted run.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ease_jupyter.errors import EaseMLError, InvalidStateError, NotFoundError
from ease_jupyter.execution.automl.base import Procedure, TrialResult, TrialSpec
from ease_jupyter.execution.engine.base import (
    Engine,
    EngineError,
    UnitDone,
    UnitFailed,
    UnitLost,
    WorkerAdded,
    WorkerLost,
    partition_key,
)
from ease_jupyter.execution.holdout import validation_mask
from ease_jupyter.execution.mop.scheduler import MOPScheduler, Unit
from ease_jupyter.execution.units import (
    DEFAULT_HOP,
    HOP_MODES,
    Hooks,
    UnitOutput,
    UnitSpec,
    combine_eval,
    eval_unit,
    initial_checkpoint,
    load_model,
    read_checkpoint,
    train_unit,
)

__all__ = [
    "MOPRunner", "RunResult", "EpochMetrics", "UnitRecord", "TrialProgress", "ResumeState", "RunnerError", "run_mop",
]

log = logging.getLogger(__name__)

TRAIN, VAL = "train", "val"


class RunnerError(EaseMLError, RuntimeError):
    """The run cannot go on: a unit kept failing, no worker is left, or the
    procedure did not finish within ``max_epochs``."""


@dataclass(frozen=True)
class EpochMetrics:
    """One trial's metrics after one of its epochs (streamed to ``on_metrics``)."""

    trial: str
    epoch: int  # epochs this trial has completed (1 after its first)
    mop_epoch: int  # the scheduler's epoch (0-based)
    score: float  # validation score, higher is better (NaN if diverged)
    train_loss: float
    val_loss: float
    examples: int  # training examples seen this epoch
    unit_seconds: float  # compute spent in this trial's units this epoch
    visits: tuple[int, ...]  # partitions in the order the trial trained on them


@dataclass(frozen=True)
class UnitRecord:
    """A completed unit (streamed to ``on_unit``)."""

    kind: str  # "train" or "val"
    trial: str
    mop_epoch: int
    partition: int
    worker: str
    metrics: Mapping[str, Any]


@dataclass(frozen=True)
class TrialProgress:
    """Where one trial stands in a run: what a restart needs besides its
    checkpoint (Cerebro §5.6). :meth:`to_dict` / :meth:`from_dict` give a
    JSON-ready form."""

    scores: tuple[float, ...] = ()  # validation score of each epoch it completed, oldest first
    visited: tuple[int, ...] = ()  # partitions of the current epoch it trained on, in that order
    loss_sum: float = 0.0  # sum of train loss x examples over those units
    examples: float = 0.0  # training examples in those units
    seconds: float = 0.0  # compute spent in those units

    @property
    def epochs(self) -> int:
        """Epochs the trial completed (under its own id, ``automl/base.py``)."""
        return len(self.scores)

    def to_dict(self) -> dict[str, Any]:
        return {"scores": list(self.scores), "visited": list(self.visited), "loss_sum": self.loss_sum,
                "examples": self.examples, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TrialProgress":
        return cls(tuple(float(x) for x in data.get("scores", ())), tuple(int(p) for p in data.get("visited", ())),
                   float(data.get("loss_sum", 0.0)), float(data.get("examples", 0.0)), float(data.get("seconds", 0.0)))


@dataclass(frozen=True)
class ResumeState:
    """A run interrupted after some unit, for ``MOPRunner(..., resume=state)``.

    ``MOPRunner.resume_state()`` makes one; a service may also assemble it
    from what it stored after each unit.

    Attributes:
        epoch: the scheduler epoch that was running (0-based); epochs
            ``0..epoch-1`` are complete (trained, validated, and handed to
            ``procedure.epoch_end``).
        trials: trial id -> its :class:`TrialProgress`. A trial that is
            missing counts as one with no completed epoch and no unit (e.g.
            one added at the last epoch boundary that had not trained yet).
        checkpoints: trial id -> its weights after its last finished train
            unit. A trial without one gets its weights as at admission: fresh
            ones (deterministic under the run's seed) or, with ``init_from``,
            its parent's, which is possible only when the parent trained no
            unit since the trial was added.
        best_checkpoints: trial id -> (score, checkpoint) of its best epoch so
            far; it seeds ``RunResult.best_checkpoints`` (optional).
        partitions: the interrupted run's partition count (p, §3.1). A
            trial's ``visited`` partitions mean something only for the same
            p and data; give the resumed runner ``n_partitions=partitions``.
    """

    epoch: int
    trials: Mapping[str, TrialProgress]
    checkpoints: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    best_checkpoints: Mapping[str, tuple[float, bytes]] = field(default_factory=dict, repr=False)
    partitions: int | None = None

    @property
    def units_done(self) -> int:
        """Train units of the interrupted epoch that finished (and are not run again)."""
        return sum(len(p.visited) for p in self.trials.values())


@dataclass
class _EpochSoFar:
    """One trial's train units in the current epoch (runner bookkeeping)."""

    visited: list[int] = field(default_factory=list)
    loss_sum: float = 0.0
    examples: float = 0.0
    seconds: float = 0.0


@dataclass
class RunResult:
    """What a run produced."""

    trials: dict[str, TrialSpec]
    history: list[EpochMetrics]
    best: tuple[str, float] | None
    visit_log: dict[tuple[str, int], tuple[int, ...]]
    checkpoints: dict[str, bytes] = field(repr=False)  # each trial's last checkpoint
    best_checkpoints: dict[str, tuple[float, bytes]] = field(repr=False)  # each trial's best-scoring one
    requeued: int = 0  # units run again after a loss
    faults: list[str] = field(default_factory=list)
    epochs: int = 0  # scheduler epochs run
    seconds: float = 0.0
    _builders: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict, repr=False)
    _hooks: Hooks = field(default_factory=Hooks, repr=False)

    def model(self, trial: str | None = None, *, best: bool = True) -> Any:
        """The trained net of ``trial`` (default: the procedure's best),
        from its best-scoring checkpoint (or its last with ``best=False``)."""
        if trial is None:
            if self.best is None:
                raise RunnerError("best: no trial has a score, expected at least one finished epoch")
            trial = self.best[0]
        if trial not in self.trials:
            raise RunnerError(f"trial: found {trial!r}, expected one of {sorted(self.trials)}")
        spec = self.trials[trial]
        ckpt = self.best_checkpoints[trial][1] if best and trial in self.best_checkpoints else self.checkpoints[trial]
        return load_model(ckpt, UnitSpec.of(trial, spec.model, spec.params, self._builders[spec.model]), self._hooks)


def _builders_of(models: Any) -> dict[str, Callable[[Any], Any]]:
    if isinstance(models, Mapping):
        return dict(models)
    out = {}
    for c in models:
        if not hasattr(c, "name") or not hasattr(c, "build"):
            raise EaseMLError(f"models: found {type(c).__name__}, expected zoo Candidates or a mapping name -> builder")
        out[c.name] = c.build
    return out


def _split(n: int, parts: int) -> list[np.ndarray]:
    return np.array_split(np.arange(n), parts)


class MOPRunner:
    """Run one AutoML procedure as a MOP workload on an engine.

    Args:
        engine: where units run (its live workers at start define the layout).
        procedure: a procedure that has not been started.
        models: zoo candidates, or a mapping model name -> builder
            (``builder(ModelConfig) -> ZooModule``), covering every
            ``TrialSpec.model`` the procedure proposes.
        X, y: the training data (validation is split off unless given).
        validation: ``(X_val, y_val)``; default: the examples that
            ``holdout.validation_mask(ids, val_fraction, seed)`` holds out.
        example_ids: stable ids for that split (default ``0..n-1``).
        n_partitions: default: one per live worker.
        replication: copies of each partition (Cerebro §5.5).
        hop: ``"bytes"``, ``"directory"`` (see ``units``) or ``"auto"``: the
            measured faster ``units.DEFAULT_HOP`` ("directory") when a
            ``checkpoint_dir`` is given or the engine's workers share the
            driver's file system, else "bytes".
        checkpoint_dir: the directory of the "directory" hop (shared by all
            workers); default: a temporary directory, removed at the end.
        hooks: Cerebro's input_fn/model_fn/train_fn (+ eval_fn).
        seed: shuffling, scheduling, initial weights and unit seeds.
        unit_timeout: seconds a pinned unit may take before it counts as lost.
        first_unit_timeout: the deadline of a worker's first unit in this run
            (a fresh worker process imports torch first, which takes seconds);
            default: ``unit_timeout + 60``.
        max_unit_retries: re-runs of a unit whose function raised.
        visit_order: a previous run's ``visit_log`` to replay.
        on_metrics: called with each :class:`EpochMetrics` as it is known.
        on_unit: called with each completed unit's :class:`UnitRecord`, after
            the runner took it into account (so :meth:`resume_state`,
            :meth:`trial_progress` and :meth:`checkpoint` include it).
        resume: a :class:`ResumeState` to go on from instead of starting
            afresh (restart recovery, §5.6; see the module docstring). Give
            the same procedure arguments, data, seed and ``n_partitions``
            as the interrupted run. ``RunResult.history`` then holds the
            epochs run after the resume point only.
        max_epochs: scheduler epochs (counted from the first, resumed or
            not) after which an unfinished run fails.
        repair_grace: seconds to wait for a new worker before re-placing a
            lost partition on a live one.
        worker_wait: seconds to wait for any worker when none is left.
    """

    def __init__(
        self,
        engine: Engine,
        procedure: Procedure,
        models: Any,
        X: Any,
        y: Any,
        *,
        validation: tuple[Any, Any] | None = None,
        val_fraction: float = 0.2,
        example_ids: Sequence[int] | None = None,
        n_partitions: int | None = None,
        replication: int = 1,
        hop: str = "auto",
        checkpoint_dir: str | None = None,
        hooks: Hooks = Hooks(),
        seed: int = 0,
        unit_timeout: float = 300.0,
        first_unit_timeout: float | None = None,
        max_unit_retries: int = 2,
        visit_order: Mapping[tuple[str, int], Sequence[int]] | None = None,
        on_metrics: Callable[[EpochMetrics], None] | None = None,
        on_unit: Callable[[UnitRecord], None] | None = None,
        resume: ResumeState | None = None,
        max_epochs: int = 1000,
        repair_grace: float = 5.0,
        worker_wait: float = 120.0,
    ):
        if hop == "auto":
            hop = DEFAULT_HOP if checkpoint_dir is not None or engine.shared_filesystem else "bytes"
        if hop not in HOP_MODES:
            raise EaseMLError(f"hop: found {hop!r}, expected one of {list(HOP_MODES) + ['auto']}")
        if not (isinstance(unit_timeout, (int, float)) and math.isfinite(unit_timeout) and unit_timeout > 0):
            raise EaseMLError(f"unit_timeout: found {unit_timeout!r}, expected a positive number of seconds")
        X = np.asarray(X)
        y = np.asarray(y)
        if len(X) != len(y):
            raise EaseMLError(f"y: found {len(y)} labels, expected one per example of X ({len(X)})")
        if validation is None:
            ids = np.arange(len(X)) if example_ids is None else np.asarray(example_ids)
            if len(ids) != len(X):
                raise EaseMLError(f"example_ids: found {len(ids)} ids, expected {len(X)}")
            held = validation_mask(ids, val_fraction, seed)
            X_val, y_val, X, y = X[held], y[held], X[~held], y[~held]
        else:
            X_val, y_val = (np.asarray(a) for a in validation)
            if len(X_val) != len(y_val):
                raise EaseMLError(f"validation[1]: found {len(y_val)} labels, expected {len(X_val)}")
        if len(X) < 2:
            raise EaseMLError(f"X: found {len(X)} training examples, expected at least 2")
        self.engine = engine
        self.procedure = procedure
        self.builders = _builders_of(models)
        self.hooks = hooks
        self.seed = int(seed)
        self.hop = hop
        self.replication = replication
        self.unit_timeout = float(unit_timeout)
        self.first_unit_timeout = float(first_unit_timeout) if first_unit_timeout is not None else self.unit_timeout + 60.0
        if not (math.isfinite(self.first_unit_timeout) and self.first_unit_timeout > 0):
            raise EaseMLError(f"first_unit_timeout: found {first_unit_timeout!r}, expected a positive number of seconds")
        self.max_unit_retries = int(max_unit_retries)
        self.visit_order = dict(visit_order) if visit_order is not None else None
        self.on_metrics = on_metrics
        self.on_unit = on_unit
        if resume is not None and not isinstance(resume, ResumeState):
            raise EaseMLError(f"resume: found {type(resume).__name__}, expected a ResumeState")
        self.resume = resume
        self.max_epochs = int(max_epochs)
        self.repair_grace = float(repair_grace)
        self.worker_wait = float(worker_wait)
        self._X, self._y = X, y
        p = n_partitions or len(engine.workers())
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise EaseMLError(f"n_partitions: found {n_partitions!r}, expected a positive integer")
        p = min(p, len(X) // 2)  # every partition gets at least two examples (BatchNorm)
        order = np.random.default_rng(self.seed).permutation(len(X))  # shuffle once (§3.1)
        self._parts = {
            TRAIN: {i: (X[order[idx]], y[order[idx]]) for i, idx in enumerate(_split(len(X), p))},
            VAL: {i: (X_val[idx], y_val[idx]) for i, idx in enumerate(_split(len(X_val), p))},
        }
        self._p = p
        self._checkpoint_dir = checkpoint_dir
        self._own_dir = False

    @property
    def partitions(self) -> int:
        """p, the number of data partitions (and of units per trial and epoch)."""
        return self._p

    # -- progress, for restart recovery (§5.6) ------------------------------------------------
    def checkpoint(self, trial: str) -> bytes:
        """``trial``'s weights after its last finished train unit (or its
        initial ones). Valid while :meth:`run` runs, e.g. from ``on_unit``."""
        ref = self._latest.get(trial) if hasattr(self, "_latest") else None
        if ref is None:
            raise RunnerError(f"trial {trial!r}: no checkpoint, expected a trial admitted by the running run")
        return read_checkpoint(ref)

    def trial_progress(self, trial: str) -> TrialProgress:
        """Where ``trial`` stands: its scores so far and its train units of
        the current epoch, up to the last finished unit."""
        if trial not in getattr(self, "_scores", {}):
            raise RunnerError(f"trial {trial!r}: unknown, expected a trial admitted by the running run")
        now = self._epoch_so_far.get(trial, _EpochSoFar())
        return TrialProgress(tuple(self._scores[trial]), tuple(now.visited), now.loss_sum, now.examples, now.seconds)

    def resume_state(self) -> ResumeState:
        """A snapshot to resume from after the last finished unit: call it
        from ``on_unit`` or ``on_metrics`` and store it (it reads every
        trial's checkpoint; :meth:`trial_progress` and :meth:`checkpoint`
        give one trial's share). Units in flight are not in it: a resumed
        run trains them again."""
        trials = {t: self.trial_progress(t) for t in self._trials}
        return ResumeState(self._epochs_done, trials, {t: self.checkpoint(t) for t in self._trials},
                           dict(self._best), self._p)

    # -- checkpoints -----------------------------------------------------------------------
    def _store(self, data: bytes, trial: str) -> bytes | str:
        if self.hop == "bytes":
            return data
        sub = os.path.join(self._dir, "init")
        os.makedirs(sub, exist_ok=True)
        # A unique name: a count of files could repeat once _discard removed some.
        path = os.path.join(sub, f"{uuid.uuid4().hex}.pt")
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        return path

    def _discard(self, ref: bytes | str | None) -> None:
        if isinstance(ref, str):
            try:
                os.remove(ref)
            except FileNotFoundError:
                pass

    # -- trials -----------------------------------------------------------------------------
    def _admit(self, specs: Sequence[TrialSpec], *, replaying: int | None = None) -> None:
        """Give new trials their first checkpoint: the resumed one if there
        is one, else fresh weights or a copy of ``init_from``'s latest.
        ``replaying`` is the completed epoch whose decision added them, when
        the procedure is being replayed for a resume."""
        restored = self.resume.checkpoints if self.resume is not None else {}
        for spec in specs:
            if spec.model not in self.builders:
                raise RunnerError(f"trial {spec.id!r}: model {spec.model!r} has no builder, expected one of {sorted(self.builders)}")
            uspec = UnitSpec.of(spec.id, spec.model, spec.params, self.builders[spec.model], seed=self.seed)
            if spec.id in restored:
                data = restored[spec.id]
            elif spec.init_from is None:
                data = initial_checkpoint(uspec, self._X, self._y, self.hooks)
            else:
                parent = self._latest.get(spec.init_from)
                if parent is None:
                    raise RunnerError(f"trial {spec.id!r}: init_from {spec.init_from!r} has no checkpoint")
                if replaying is not None:
                    # The parent's restored checkpoint is the one to copy only if it
                    # has not moved since this trial was added (at the last boundary).
                    parent_moved = self.resume.trials.get(spec.init_from, TrialProgress()).visited
                    if replaying != self.resume.epoch - 1 or parent_moved:
                        raise RunnerError(f"resume.checkpoints: found none for trial {spec.id!r}, expected one "
                                          f"(its parent {spec.init_from!r} has trained since it was added)")
                data = read_checkpoint(parent)
            self._trials[spec.id] = spec
            self._uspec[spec.id] = uspec
            self._epochs[spec.id] = 0
            self._scores[spec.id] = []
            self._latest[spec.id] = self._store(data, spec.id)

    # -- placement and workers ------------------------------------------------------------------
    def _availability(self, kind: str) -> dict[str, set[int]]:
        av: dict[str, set[int]] = {w: set() for w in self._live}
        for pid, holders in self._holders[kind].items():
            for w in holders:
                if w in av:
                    av[w].add(pid)
        return av

    def _scheds(self) -> list[tuple[str, MOPScheduler]]:
        out = [(TRAIN, self._train)] if self._train is not None else []
        if self._val is not None:
            out.append((VAL, self._val))
        return out

    def _busy_workers(self) -> set[str]:
        return {w for (_, _, _, w) in self._inflight.values()}

    def _give(self, worker: str, kind: str, pids: set[int]) -> None:
        """Place partitions of ``kind`` on a live worker and tell the scheduler."""
        for pid in sorted(pids):
            self.engine.place(partition_key(kind, pid), self._parts[kind][pid], [worker])
            self._holders[kind][pid].add(worker)
        for k, sched in self._scheds():
            if k != kind:
                continue
            if worker in sched.workers:
                lost = sched.remove_worker(worker)  # an idle worker: nothing in flight
                assert not lost, "re-placing onto a busy worker"
            sched.add_worker(worker, self._availability(kind)[worker])

    def _under_replicated(self, kind: str) -> list[int]:
        return sorted(p for p, h in self._holders[kind].items() if len(h) < self.replication)

    def _on_worker_added(self, worker: str) -> None:
        self._live.add(worker)
        self._faults.append(f"{time.monotonic() - self._t0:.2f}s worker added {worker}")
        for kind in (TRAIN, VAL):
            short = [p for p in self._under_replicated(kind) if worker not in self._holders[kind][p]]
            for pid in short:
                if not self._place(kind, pid, worker):
                    return
                self._holders[kind][pid].add(worker)
        for kind, sched in self._scheds():  # the validation scheduler, if any, too
            if worker not in sched.workers:
                sched.add_worker(worker, self._availability(kind)[worker])
        self._orphaned_since = None if not self._orphans() else self._orphaned_since

    def _place(self, kind: str, pid: int, worker: str) -> bool:
        """Copy a partition to ``worker``; False (and the worker counts as lost)
        if it left again before its data arrived."""
        try:
            self.engine.place(partition_key(kind, pid), self._parts[kind][pid], [worker])
        except EngineError as error:
            self._faults.append(f"{time.monotonic() - self._t0:.2f}s {error}")
            self._on_worker_lost(worker, "left while its data was placed")
            return False
        return True

    def _on_worker_lost(self, worker: str, reason: str) -> None:
        self._faults.append(f"{time.monotonic() - self._t0:.2f}s worker lost {worker} ({reason})")
        self._live.discard(worker)
        for holders in (*self._holders[TRAIN].values(), *self._holders[VAL].values()):
            holders.discard(worker)
        for _, sched in self._scheds():
            if worker in sched.workers:
                for unit in sched.remove_worker(worker):
                    self._forget_unit(sched, unit)
        if self._orphans() and self._orphaned_since is None:
            self._orphaned_since = time.monotonic()

    def _forget_unit(self, sched: MOPScheduler, unit: Unit) -> None:
        for h, (s, _, u, _) in list(self._inflight.items()):
            if s is sched and u == unit:
                del self._inflight[h]
                self.engine.cancel(h)
                self._requeued += 1

    def _orphans(self) -> dict[str, list[int]]:
        return {k: [p for p, h in self._holders[k].items() if not h] for k in (TRAIN, VAL) if any(not h for h in self._holders[k].values())}

    def _repair(self) -> None:
        """Re-place partitions that no live worker holds on idle live workers,
        once no new worker arrived within ``repair_grace`` seconds."""
        orphans = self._orphans()
        if not orphans:
            self._orphaned_since = None
            return
        now = time.monotonic()
        if self._orphaned_since is None:
            self._orphaned_since = now
        if not self._live:
            if now - self._orphaned_since > self.worker_wait:
                raise RunnerError(f"workers: found none for {self.worker_wait:.0f} s, expected at least one live worker")
            return
        if now - self._orphaned_since < self.repair_grace:
            return
        idle = sorted(self._live - self._busy_workers())
        if not idle:
            return
        for kind, pids in orphans.items():
            for pid in pids:
                load = {w: sum(w in h for h in self._holders[kind].values()) for w in idle}
                target = min(idle, key=lambda w: (load[w], w))
                self._faults.append(f"{now - self._t0:.2f}s re-placed {kind} partition {pid} on {target}")
                self._give(target, kind, {pid})
        self._orphaned_since = None

    def _rebalance(self) -> None:
        """At an epoch boundary (every worker idle): move partitions from the
        most loaded workers to workers that hold none of that kind, e.g. a
        replacement that joined after its predecessor's partitions had been
        re-placed, so that every worker has work again (elasticity, §5.6)."""
        for kind in (TRAIN, VAL):
            while True:
                av = self._availability(kind)
                empty = sorted(w for w, ps in av.items() if not ps)
                donor = max(sorted(av), key=lambda w: len(av[w]), default=None)
                if not empty or donor is None or len(av[donor]) < 2:
                    break
                pid, target = max(av[donor]), empty[0]
                key = partition_key(kind, pid)
                if not self._place(kind, pid, target):
                    continue
                self.engine.drop(key, [donor])
                self._holders[kind][pid].discard(donor)
                self._holders[kind][pid].add(target)
                self._faults.append(f"{time.monotonic() - self._t0:.2f}s moved {kind} partition {pid} from {donor} to {target}")
                if kind == TRAIN:
                    after = self._availability(TRAIN)
                    for w in (donor, target):
                        if w in self._train.workers:
                            self._train.remove_worker(w)
                        self._train.add_worker(w, after[w])

    # -- units --------------------------------------------------------------------------------
    def _submit(self, kind: str, sched: MOPScheduler, unit: Unit, worker: str) -> None:
        t = unit.config
        spec = self._uspec[t].at(self._epochs[t], unit.partition)
        key = partition_key(kind, unit.partition)
        timeout = self.unit_timeout if worker in self._warm else self.first_unit_timeout
        if kind == TRAIN:
            out_dir = self._dir if self.hop == "directory" else None
            h = self.engine.submit_pinned(train_unit, key, self._latest[t], spec, self.hooks, out_dir,
                                          worker=worker, timeout=timeout)
        else:
            h = self.engine.submit_pinned(eval_unit, key, self._latest[t], spec, self.hooks,
                                          worker=worker, timeout=timeout)
        self._inflight[h] = (sched, kind, unit, worker)

    def _on_done(self, kind: str, unit: Unit, worker: str, result: Any) -> Mapping[str, Any]:
        """Take a finished unit's result into the run; returns its metrics."""
        t = unit.config
        if kind == TRAIN:
            assert isinstance(result, UnitOutput)
            old = self._latest[t]
            self._latest[t] = result.checkpoint
            self._discard(old)
            m = result.metrics
            now = self._epoch_so_far.setdefault(t, _EpochSoFar())
            now.visited.append(unit.partition)
            n = float(m.get("examples", 0.0))
            if n > 0:
                now.loss_sum += float(m.get("loss", float("nan"))) * n
                now.examples += n
            now.seconds += float(m.get("seconds", 0.0))
            return m
        self._val_parts.setdefault(t, []).append(result)
        return result

    def _emit(self, fn: Callable[[Any], None], value: Any) -> None:
        try:
            fn(value)
        except Exception:  # noqa: BLE001 - a listener must not stop training
            log.exception("metrics listener failed")

    def _drive(self, kind: str, sched: MOPScheduler) -> None:
        """Run the scheduler's current epoch to the end (Alg. 1-2 with §5.6)."""
        failures: dict[Unit, int] = {}
        while not sched.epoch_done():
            for unit, worker in sched.schedule():
                try:
                    self._submit(kind, sched, unit, worker)
                except EngineError as error:  # the engine saw the worker go first
                    self._faults.append(f"{time.monotonic() - self._t0:.2f}s could not submit {unit} to {worker}: {error}")
                    sched.requeue(unit)
                    if worker not in self.engine.workers() and worker in self._live:
                        self._on_worker_lost(worker, "gone")
            for ev in self.engine.events(0.2):
                if isinstance(ev, UnitDone):
                    entry = self._inflight.pop(ev.handle, None)
                    if entry is None:
                        continue  # a late result of a unit already requeued
                    s, k, unit, worker = entry
                    self._warm.add(worker)
                    metrics = self._on_done(k, unit, worker, ev.result)
                    s.complete(unit, worker)
                    if self.on_unit is not None:
                        self._emit(self.on_unit, UnitRecord(k, unit.config, self._train.epoch, unit.partition, worker,
                                                            dict(metrics)))
                elif isinstance(ev, UnitFailed):
                    entry = self._inflight.pop(ev.handle, None)
                    if entry is None:
                        continue
                    s, k, unit, worker = entry
                    failures[unit] = failures.get(unit, 0) + 1
                    if failures[unit] > self.max_unit_retries:
                        raise RunnerError(
                            f"{k} unit (trial {unit.config!r}, partition {unit.partition}, epoch {unit.epoch}) "
                            f"failed {failures[unit]} times: {ev.error!r}"
                        ) from ev.error
                    self._faults.append(f"{time.monotonic() - self._t0:.2f}s {k} unit {unit} failed: {ev.error!r}")
                    s.requeue(unit)
                    self._requeued += 1
                elif isinstance(ev, UnitLost):
                    entry = self._inflight.pop(ev.handle, None)
                    if entry is None:
                        continue
                    s, k, unit, worker = entry
                    self._faults.append(f"{time.monotonic() - self._t0:.2f}s {k} unit {unit} lost on {worker} ({ev.reason})")
                    if worker in s.workers:
                        s.requeue(unit)
                    self._requeued += 1
                elif isinstance(ev, WorkerLost):
                    if ev.worker in self._live:
                        self._on_worker_lost(ev.worker, ev.reason)
                elif isinstance(ev, WorkerAdded):
                    if ev.worker not in self._live:
                        self._on_worker_added(ev.worker)
            if self._orphans():
                self._repair()

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run the procedure to the end and return the :class:`RunResult`."""
        self._t0 = time.monotonic()
        self._trials: dict[str, TrialSpec] = {}
        self._uspec: dict[str, UnitSpec] = {}
        self._epochs: dict[str, int] = {}
        self._latest: dict[str, bytes | str] = {}
        self._scores: dict[str, list[float]] = {}
        self._epoch_so_far: dict[str, _EpochSoFar] = {}
        self._epochs_done = 0  # scheduler epochs completed (validated and scored)
        self._best: dict[str, tuple[float, bytes]] = {}
        self._inflight: dict[str, tuple[MOPScheduler, str, Unit, str]] = {}
        self._faults: list[str] = []
        self._requeued = 0
        self._orphaned_since: float | None = None
        self._train: MOPScheduler | None = None
        self._val: MOPScheduler | None = None
        self._warm: set[str] = set()  # workers that completed a unit in this run
        history: list[EpochMetrics] = []
        if self.hop == "directory":
            if self._checkpoint_dir is None:
                self._dir, self._own_dir = tempfile.mkdtemp(prefix="easeml-ckpt-"), True
            else:
                self._dir = self._checkpoint_dir
                os.makedirs(self._dir, exist_ok=True)
        try:
            return self._run(history)
        finally:
            for kind in (TRAIN, VAL):
                for pid in self._parts[kind]:
                    self.engine.drop(partition_key(kind, pid))
            for h in list(self._inflight):
                self.engine.cancel(h)
            if self._own_dir:
                shutil.rmtree(self._dir, ignore_errors=True)

    def _replay_procedure(self, live: list[str]) -> tuple[list[str], bool]:
        """Bring the procedure to the resume point: feed it the stored score of
        every completed epoch (procedures are deterministic functions of their
        results, ``automl/base.py``) and admit the trials it adds then.
        Returns the live trials and whether the procedure had finished."""
        state = self.resume
        for epoch in range(state.epoch):
            results: dict[str, TrialResult] = {}
            for t in live:
                scores = state.trials.get(t, TrialProgress()).scores
                n = self._epochs[t]
                if n >= len(scores):
                    raise RunnerError(f"resume.trials[{t!r}].scores: found {len(scores)}, expected a score for "
                                      f"its epoch {n + 1} (scheduler epoch {epoch})")
                self._epochs[t] = n + 1
                self._scores[t].append(scores[n])
                results[t] = TrialResult(t, n + 1, scores[n])
            decision = self.procedure.epoch_end(results)
            stopped = set(decision.stop)
            self._admit(decision.add, replaying=epoch)
            live = [t for t in live if t not in stopped] + [s.id for s in decision.add]
            if decision.finished or not live:
                return live, True
        for t, progress in state.trials.items():
            if t not in self._trials:
                raise RunnerError(f"resume.trials: found trial {t!r}, expected only trials of the replayed procedure "
                                  f"({sorted(self._trials)})")
            if progress.epochs != self._epochs[t]:
                raise RunnerError(f"resume.trials[{t!r}].scores: found {progress.epochs}, expected "
                                  f"{self._epochs[t]} (its completed epochs before scheduler epoch {state.epoch})")
        return live, False

    def _restore_epoch(self, live: list[str]) -> None:
        """Take the interrupted epoch's finished train units as completed and
        restore their train-loss sums (§5.6: only unfinished units run again)."""
        state = self.resume
        if state.units_done and state.partitions is not None and state.partitions != self._p:
            raise RunnerError(f"resume.partitions: found {state.partitions}, expected this run's {self._p} "
                              f"(give n_partitions={state.partitions})")
        for t, progress in sorted(state.trials.items()):
            if not progress.visited:
                continue
            if t not in live:
                raise RunnerError(f"resume.trials[{t!r}].visited: found {list(progress.visited)}, expected none "
                                  f"for a trial not live in scheduler epoch {state.epoch}")
            for pid in progress.visited:
                try:
                    self._train.mark_completed(Unit(t, pid, state.epoch))
                except (InvalidStateError, NotFoundError) as error:
                    raise RunnerError(f"resume.trials[{t!r}].visited: {error}") from error
            self._epoch_so_far[t] = _EpochSoFar(list(progress.visited), progress.loss_sum, progress.examples,
                                                progress.seconds)

    def _run(self, history: list[EpochMetrics]) -> RunResult:
        workers = self.engine.workers()
        if not workers:
            raise RunnerError("engine: found no live workers, expected at least one")
        if isinstance(self.replication, bool) or not isinstance(self.replication, int) or not 1 <= self.replication <= len(workers):
            raise EaseMLError(f"replication: found {self.replication!r}, expected an integer in [1, {len(workers)}] (the live workers)")
        self._live = set(workers)
        specs = self.procedure.start()
        self._admit(specs)
        live = [s.id for s in specs]
        epochs_run = 0
        if self.resume is not None:
            self._best.update(self.resume.best_checkpoints)
            live, finished = self._replay_procedure(live)
            self._epochs_done = self.resume.epoch
            if finished:
                return self._result(history, epochs_run)
        self._holders: dict[str, dict[int, set[str]]] = {}
        for kind in (TRAIN, VAL):
            av = self.engine.place_partitions(self._parts[kind], replication=self.replication, prefix=kind, workers=workers)
            self._holders[kind] = {pid: {w for w, ps in av.items() if pid in ps} for pid in self._parts[kind]}
        self._train = MOPScheduler(live, self._availability(TRAIN), seed=self.seed, visit_order=self.visit_order,
                                   partitions=range(self._p), first_epoch=self._epochs_done)
        if self.resume is not None:
            self._restore_epoch(live)
        while True:
            mop_epoch = self._train.epoch
            if mop_epoch >= self.max_epochs:
                raise RunnerError(f"the procedure did not finish within max_epochs={self.max_epochs} epochs")
            self._drive(TRAIN, self._train)
            self._val_parts: dict[str, list[Mapping[str, Any]]] = {}
            self._val = MOPScheduler(live, self._availability(VAL), seed=self.seed + 1 + mop_epoch,
                                     partitions=range(self._p))
            self._drive(VAL, self._val)
            self._val = None
            epochs_run += 1
            results: dict[str, TrialResult] = {}
            log_now = self._train.visit_log
            for t in live:
                self._epochs[t] += 1
                v = combine_eval(self._val_parts.get(t, []))
                now = self._epoch_so_far.get(t, _EpochSoFar())
                train_loss = now.loss_sum / now.examples if now.examples else float("nan")
                results[t] = TrialResult(t, self._epochs[t], v["score"], {"val_loss": v["val_loss"], "train_loss": train_loss})
                m = EpochMetrics(t, self._epochs[t], mop_epoch, v["score"], train_loss, v["val_loss"],
                                 int(now.examples), now.seconds, tuple(log_now.get((t, mop_epoch), ())))
                history.append(m)
                if not math.isnan(v["score"]) and (t not in self._best or v["score"] > self._best[t][0]):
                    self._best[t] = (v["score"], read_checkpoint(self._latest[t]))
                if self.on_metrics is not None:
                    self._emit(self.on_metrics, m)
            # The epoch counts as done (for resume_state) only once every trial has its score.
            for t in live:
                self._scores[t].append(results[t].score)
            self._epoch_so_far = {}
            self._epochs_done = mop_epoch + 1
            decision = self.procedure.epoch_end(results)
            stopped = set(decision.stop)
            self._admit(decision.add)  # init_from may name a trial stopped right now
            live = [t for t in live if t not in stopped] + [s.id for s in decision.add]
            if decision.finished or not live:
                break
            self._rebalance()
            self._train.next_epoch(live)
        return self._result(history, epochs_run)

    def _result(self, history: list[EpochMetrics], epochs_run: int) -> RunResult:
        train = self._train
        return RunResult(
            trials=dict(self._trials),
            history=history,
            best=self.procedure.best(),
            visit_log=dict(train.visit_log) if train is not None else {},
            checkpoints={t: read_checkpoint(ref) for t, ref in self._latest.items()},
            best_checkpoints=dict(self._best),
            requeued=self._requeued,
            faults=list(self._faults),
            epochs=epochs_run,
            seconds=time.monotonic() - self._t0,
            _builders=self.builders,
            _hooks=self.hooks,
        )


def run_mop(engine: Engine, procedure: Procedure, models: Any, X: Any, y: Any, **kwargs: Any) -> RunResult:
    """``MOPRunner(engine, procedure, models, X, y, **kwargs).run()``."""
    return MOPRunner(engine, procedure, models, X, y, **kwargs).run()
