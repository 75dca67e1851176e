"""The MOP runner: an AutoML procedure, trained as MOP units on an engine.

It joins the three pure parts (the procedure, :class:`MOPScheduler`, the
units) to an :class:`~ease_jupyter.execution.engine.Engine`, and owns the
loop (Cerebro §4.2, the protocol in ``automl/base.py``):

1. Shuffle the training data once and cut it into p partitions (default:
   one per worker); cut the validation data (given, or a stable 80/20 split
   by key, ``holdout.validation_mask``) into p partitions too. Place
   each on ``replication`` workers; never broadcast (``partitions``,
   ``placement``).
2. ``procedure.start()`` gives the trials. Each gets fresh weights built
   under its own seed and adapted to the training data, or, with
   ``init_from``, a copy of that trial's latest checkpoint (``checkpoints``).
3. Each epoch, every live trial visits every partition through training
   units pinned to the partition's workers (Alg. 1-2); the model hops by
   checkpoint after every unit. Then the same machinery runs validation
   units (one scheduler epoch over the validation partitions, parameters not
   trained), and the summed validation statistics give each trial's
   :class:`TrialResult`. Per-trial :class:`EpochMetrics` go to ``on_metrics``
   as soon as they exist.
4. ``procedure.epoch_end`` stops and adds trials; ``scheduler.next_epoch``
   starts the next epoch with the live set, until a decision is finished.

This module keeps one workload's state and that loop, one phase at a time;
its parts live beside it, one job each:

* ``pool_driver``: :class:`PoolDriver`, the reader of the engine's events,
  which draws the units of one or several runs (MOP across tasks) through
  ``shared_pool.SharedPoolScheduler``; ``run()`` is its one-run case;

* ``partitions``: the split into partitions, and :class:`PartitionMap`, the
  one record of which worker holds which partition;
* ``placement``: placement, repair after a lost worker, rebalancing (§5.5-5.6);
* ``checkpoints``: the hop store, each trial's latest checkpoint;
* ``resume``: :class:`ResumeState`, :class:`TrialProgress` and the replay of
  an interrupted run (§5.6);
* ``results``: :class:`EpochMetrics`, :class:`UnitRecord`, :class:`RunResult`,
  :class:`RunnerError`.

``Engine.events`` has one consumer: run several runners on one engine
through its one driver (``PoolDriver.shared(engine).run(runner, owner=...)``),
not with several ``run()`` calls at once.

Devices. Each worker trains on its own device (``units``). While the engine
has GPU workers (workers that declare ``GPU``), the data are cut into one
partition per GPU worker by default and placed on GPU workers only, and no
unit runs on a CPU worker (the rules are ``pool_driver``'s).

GPU memory sizing (Seneca Alg. 1, ``gpu_memory``). Before a trial's first
training unit on GPU workers, a sizing phase runs
``gpu_memory.sizing_unit`` for it once on each GPU worker that holds a
training partition of the run, as a pinned unit through the pool like any
other (so it has its GPU to itself), with the partition there as its
sample. From the results (``gpu_memory.plan_from_sizings``) the trial keeps
its batch size if it fits, or trains with the largest size that fits
(:attr:`MOPRunner.planned_batch_sizes`, ``plan.describe()`` in
``RunResult.faults``); its units keep off the GPU workers it does not fit
on; and when not even the smallest batch fits any GPU, the run fails with a
``DeviceOutOfMemoryError`` whose message is the plan's (model, batch size,
GPU memory). Where the workers have no CUDA device the units answer None
and nothing changes; a pool without GPU workers runs no sizing unit.

A unit that still runs out of its GPU's memory runs again with half its
trial's batch size, which the trial keeps
(:attr:`MOPRunner.reduced_batch_sizes`, noted in ``RunResult.faults``);
running out again fails the run with a ``DeviceOutOfMemoryError`` that names
the model, the batch size and the GPU memory.

Data where the workers are. With ``blob_url`` (an fsspec URL such as
``s3://bucket/easeml``) the run makes its own folder there: the "directory"
hop's checkpoints live in it, and every partition is staged there once
(``blob_io.stage_partition``), so only a small ``StagedPartition`` is placed
on a worker (its ``load()`` gives the arrays; the default ``input_fn``
calls it). The folder is removed when the run ends.

Listeners. ``on_unit`` and ``on_metrics`` run between units. One that
raises :class:`StopRun` ends the run with the error it carries (a limit the
run passed, a progress record that could not be stored); any other error of
a listener is logged and training goes on (a broken progress bar costs no
run).

Faults (§5.6). A unit that is lost (its worker died, its deadline passed,
its input went away) goes back to Q and runs again from the same
checkpoint, which never changed because only a completed unit moves a
trial's checkpoint (past the run's own ``deadline``, the run fails
instead). Lost partitions are placed again (``placement``). Units
are deterministic, so a run replayed with ``visit_order=result.visit_log``
ends with the same weights with or without faults. A process that dies
loses the run, not its work, if it kept :meth:`MOPRunner.resume_state`
after every unit (``resume``).
"""

from __future__ import annotations

import logging
import math
import random
import time
from typing import Any, Callable, Mapping, Sequence

from ease_jupyter.errors import DeviceOutOfMemoryError, EaseMLError
from ease_jupyter.execution.automl.base import Procedure, TrialResult, TrialSpec
from ease_jupyter.execution.blob_io import is_url, stage_partition
from ease_jupyter.execution.engine.base import Engine
from ease_jupyter.execution.gpu_memory import BatchSizing, GpuPlan, plan_from_sizings, sizing_unit
from ease_jupyter.execution.mop.checkpoints import HopStore
from ease_jupyter.execution.mop.partitions import TRAIN, VAL, PartitionMap, data_bytes, partition, split_validation
from ease_jupyter.execution.mop.placement import FaultLog, Placement, copies_everywhere, resolve_replication
from ease_jupyter.execution.mop.pool_driver import Phase, PoolDriver, PoolSlot
from ease_jupyter.execution.mop.results import EpochMetrics, RunnerError, RunResult, StopRun, UnitRecord
from ease_jupyter.execution.mop.resume import (
    EpochSoFar,
    ResumeState,
    TrialProgress,
    check_parent_unmoved,
    replay_procedure,
    restore_epoch,
)
from ease_jupyter.execution.mop.scheduler import Unit
from ease_jupyter.execution.units import (
    DEFAULT_HOP,
    HOP_MODES,
    Hooks,
    UnitOutput,
    UnitSpec,
    combine_eval,
    eval_unit,
    initial_checkpoint,
    train_unit,
)
from ease_jupyter.zoo.templates import LARGEST_EPOCHS

__all__ = [
    "MOPRunner", "RunResult", "EpochMetrics", "UnitRecord", "TrialProgress", "ResumeState", "RunnerError", "StopRun",
    "run_mop",
]

log = logging.getLogger(__name__)

#: The sizing phase's kind (``_pool_kind``): it reads training partitions.
SIZE = "size"


def _builders_of(models: Any) -> dict[str, Callable[[Any], Any]]:
    if isinstance(models, Mapping):
        return dict(models)
    out = {}
    for c in models:
        if not hasattr(c, "name") or not hasattr(c, "build"):
            raise EaseMLError(f"models: found {type(c).__name__}, expected zoo Candidates or a mapping name -> builder")
        out[c.name] = c.build
    return out


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
        example_ids: the keys of that split, one per example (default
            ``0..n-1``): content keys keep copies of a row on one side.
        n_partitions: default: one per live GPU worker if the engine has
            any, else one per live worker.
        replication: copies of each partition (Cerebro §5.5), or
            ``"auto"``: on every worker while the data are small
            (``placement.resolve_replication``).
        hop: ``"bytes"``, ``"directory"`` (see ``units``) or ``"auto"``: the
            measured faster ``units.DEFAULT_HOP`` ("directory") when a
            ``checkpoint_dir`` or ``blob_url`` is given or the engine's
            workers share the driver's file system, else "bytes".
        checkpoint_dir: the directory of the "directory" hop (shared by all
            workers); default: a temporary directory, removed at the end.
        blob_url: an fsspec URL that the driver and every worker can reach
            (``s3://bucket/easeml``, ``file:///shared``); the run's
            checkpoints ("directory" hop) and staged partitions go to a
            folder of its own there, removed at the end. None: as without.
        hooks: Cerebro's input_fn/model_fn/train_fn (+ eval_fn).
        seed: shuffling, scheduling, initial weights and unit seeds.
        unit_timeout: seconds a pinned unit may take before it counts as lost.
        first_unit_timeout: the deadline of a worker's first unit in this run
            (a fresh worker process imports torch first, which takes seconds);
            default: ``unit_timeout + 60``.
        max_unit_retries: re-runs of a unit whose function raised.
        deadline: a ``time.time()`` after which the run's units are given
            up on: no unit's engine deadline is later, so a unit that hangs
            (a user's forward that never returns) is lost at this time and
            its worker replaced (the engine's own rule for a unit past its
            deadline), and the run fails instead of running it again.
        on_deadline: raises the error the run fails with once ``deadline``
            passed, or once ``time_budget`` ran out while a unit of it was
            running (default: a ``RunnerError``).
        time_budget: seconds the run's units may run on workers, counted
            by the pool driver from each unit's submit to its end (the
            union: time with any of its units in flight counts once), so
            that time waiting in the pool's queue behind other owners is
            not charged. Each unit's engine deadline is at most what is
            left; a unit still running when it runs out is given up on as
            at ``deadline`` (``on_deadline``), and a run with none left and
            no unit running fails with ``on_budget_spent``'s error.
        on_budget_spent: raises the error of a run whose ``time_budget``
            ran out between its units (default: a ``RunnerError``).
        visit_order: a previous run's ``visit_log`` to replay.
        on_metrics: called with each :class:`EpochMetrics` as it is known.
        on_unit: called with each completed unit's :class:`UnitRecord`, after
            the runner took it into account (so :meth:`resume_state`,
            :meth:`trial_progress` and :meth:`checkpoint` include it).
            A listener (``on_metrics``, ``on_unit``) ends the run by raising
            :class:`StopRun`: the run fails with the error it carries. Any
            other error of a listener is logged and training goes on.
        resume: a :class:`ResumeState` to go on from instead of starting
            afresh (restart recovery, §5.6; see ``resume``). Give
            the same procedure arguments, data, seed and ``n_partitions``
            as the interrupted run. ``RunResult.history`` then holds the
            epochs run after the resume point only.
        max_epochs: scheduler epochs (counted from the first, resumed or
            not) after which an unfinished run fails.
        repair_grace: seconds to wait for a new worker before re-placing a
            lost partition on a live one.
        worker_wait: seconds to wait for any worker when none is left.
        sizing_fn: the pinned unit that sizes a trial's batch on a GPU
            worker, ``sizing_fn(partition, spec, requested_batch_size,
            hooks) -> BatchSizing | None`` (None: no CUDA there); default
            ``gpu_memory.sizing_unit``. None turns GPU sizing off (then
            only the halve-and-retry after running out of memory applies).
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
        replication: int | str = 1,
        hop: str = "auto",
        checkpoint_dir: str | None = None,
        blob_url: str | None = None,
        hooks: Hooks = Hooks(),
        seed: int = 0,
        unit_timeout: float = 300.0,
        first_unit_timeout: float | None = None,
        max_unit_retries: int = 2,
        deadline: float | None = None,
        on_deadline: Callable[[], None] | None = None,
        time_budget: float | None = None,
        on_budget_spent: Callable[[], None] | None = None,
        visit_order: Mapping[tuple[str, int], Sequence[int]] | None = None,
        on_metrics: Callable[[EpochMetrics], None] | None = None,
        on_unit: Callable[[UnitRecord], None] | None = None,
        resume: ResumeState | None = None,
        max_epochs: int = LARGEST_EPOCHS,
        repair_grace: float = 5.0,
        worker_wait: float = 120.0,
        sizing_fn: Callable[..., BatchSizing | None] | None = sizing_unit,
    ):
        if blob_url is not None:
            if not isinstance(blob_url, str) or not is_url(blob_url):
                raise EaseMLError(f"blob_url: found {blob_url!r}, expected an fsspec URL such as 's3://bucket/easeml'")
            if checkpoint_dir is not None:
                raise EaseMLError(f"checkpoint_dir: found {checkpoint_dir!r} with blob_url, expected None "
                                  "(the checkpoints go under blob_url)")
            if hop not in ("auto", "directory"):
                raise EaseMLError(f"hop: found {hop!r} with blob_url, expected 'directory' or 'auto'")
            hop = "directory"
        if hop == "auto":
            hop = DEFAULT_HOP if checkpoint_dir is not None or engine.shared_filesystem else "bytes"
        if hop not in HOP_MODES:
            raise EaseMLError(f"hop: found {hop!r}, expected one of {list(HOP_MODES) + ['auto']}")
        if not (isinstance(unit_timeout, (int, float)) and math.isfinite(unit_timeout) and unit_timeout > 0):
            raise EaseMLError(f"unit_timeout: found {unit_timeout!r}, expected a positive number of seconds")
        train, val = split_validation(X, y, validation=validation, val_fraction=val_fraction,
                                      example_ids=example_ids, seed=seed)
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
        if deadline is not None and not (isinstance(deadline, (int, float)) and math.isfinite(deadline)):
            raise EaseMLError(f"deadline: found {deadline!r}, expected a time.time() in seconds or None")
        self.deadline = None if deadline is None else float(deadline)
        self.on_deadline = on_deadline
        if time_budget is not None and not (isinstance(time_budget, (int, float)) and math.isfinite(time_budget)):
            raise EaseMLError(f"time_budget: found {time_budget!r}, expected a number of seconds or None")
        self.time_budget = None if time_budget is None else float(time_budget)
        self.on_budget_spent = on_budget_spent
        #: Seconds its units have run on workers so far (``time_budget``; the pool driver counts them).
        self.time_used = 0.0
        self.visit_order = dict(visit_order) if visit_order is not None else None
        self.on_metrics = on_metrics
        self.on_unit = on_unit
        if resume is not None and not isinstance(resume, ResumeState):
            raise EaseMLError(f"resume: found {type(resume).__name__}, expected a ResumeState")
        self.resume = resume
        self.max_epochs = int(max_epochs)
        self.repair_grace = float(repair_grace)
        self.worker_wait = float(worker_wait)
        self._X, self._y = train
        p = n_partitions or len(engine.gpu_workers()) or len(engine.workers())
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise EaseMLError(f"n_partitions: found {n_partitions!r}, expected a positive integer")
        p = min(p, len(self._X) // 2)  # every partition gets at least two examples (BatchNorm)
        self._parts = partition(train, val, p, self.seed)
        self._p = p
        self._checkpoint_dir = checkpoint_dir
        self.blob_url = blob_url
        self.sizing_fn = sizing_fn
        self._reduced: dict[str, int] = {}  # trial -> its batch size after running out of device memory
        self._planned: dict[str, int] = {}  # trial -> the batch size its GPU sizing cut it to
        self._plans: dict[str, GpuPlan] = {}  # trial -> its GPU plan
        self._hops: HopStore | None = None  # the running run's, from run()
        self._placement: Placement | None = None  # likewise
        self._slot: PoolSlot | None = None  # the current phase's scheduler in the pool

    @property
    def partitions(self) -> int:
        """p, the number of data partitions (and of units per trial and epoch)."""
        return self._p

    @property
    def partition_map(self) -> PartitionMap:
        """Which worker holds which partition, as far as the events this run
        has taken in tell (the engine may know of a loss a moment earlier).
        Valid while :meth:`run` runs, e.g. from ``on_unit``."""
        if self._placement is None:
            raise RunnerError("partition_map: found no run started, expected run() to be running")
        return self._placement.map

    @property
    def reduced_batch_sizes(self) -> dict[str, int]:
        """Trial -> the batch size its units use since one of them ran out of
        device memory (half the trial's own); trials not named use their own."""
        return dict(self._reduced)

    @property
    def planned_batch_sizes(self) -> dict[str, int]:
        """Trial -> the batch size its units use because GPU sizing found
        its own too big for the GPUs (before any of its units ran); trials
        not named keep their own."""
        return dict(self._planned)

    @property
    def gpu_plans(self) -> dict[str, GpuPlan]:
        """Trial -> its GPU plan, for the trials sized on CUDA devices."""
        return dict(self._plans)

    @property
    def live_trials(self) -> list[str]:
        """The trials the current epoch trains: those the procedure has not
        stopped (early, or at the end of their budget). Valid while
        :meth:`run` runs, e.g. from ``on_metrics``, where it is the epoch
        just scored, before the procedure's decision."""
        return list(getattr(self, "_live", ()))

    # -- progress, for restart recovery (§5.6) ------------------------------------------------
    def checkpoint(self, trial: str) -> bytes:
        """``trial``'s weights after its last finished train unit (or its
        initial ones). Valid while :meth:`run` runs, e.g. from ``on_unit``."""
        if self._hops is None or trial not in self._hops:
            raise RunnerError(f"trial {trial!r}: no checkpoint, expected a trial admitted by the running run")
        return self._hops.read(trial)

    def trial_progress(self, trial: str) -> TrialProgress:
        """Where ``trial`` stands: its scores so far and its train units of
        the current epoch, up to the last finished unit."""
        if trial not in getattr(self, "_scores", {}):
            raise RunnerError(f"trial {trial!r}: unknown, expected a trial admitted by the running run")
        return self._epoch_so_far.get(trial, EpochSoFar()).progress(self._scores[trial])

    def resume_state(self) -> ResumeState:
        """A snapshot to resume from after the last finished unit: call it
        from ``on_unit`` or ``on_metrics`` and store it (it reads every
        trial's checkpoint; :meth:`trial_progress` and :meth:`checkpoint`
        give one trial's share). Units in flight are not in it: a resumed
        run trains them again."""
        trials = {t: self.trial_progress(t) for t in self._trials}
        return ResumeState(self._epochs_done, trials, {t: self.checkpoint(t) for t in self._trials},
                           dict(self._best), self._p)

    # -- admission -----------------------------------------------------------------------------
    def _admit(self, specs: Sequence[TrialSpec], replaying: int | None = None) -> None:
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
                if spec.init_from not in self._hops:
                    raise RunnerError(f"trial {spec.id!r}: init_from {spec.init_from!r} has no checkpoint")
                if replaying is not None:
                    check_parent_unmoved(self.resume, spec.id, spec.init_from, replaying)
                data = self._hops.read(spec.init_from)
            self._trials[spec.id] = spec
            self._uspec[spec.id] = uspec
            self._epochs[spec.id] = 0
            self._scores[spec.id] = []
            self._hops.put(spec.id, data)

    # -- driven by a pool (pool_driver.PoolDriver calls these between units) ------------------------
    def _pool_open(self, namespace: str, workers: Sequence[str]) -> bool:
        """Start the run on ``workers`` (the pool's live ones): the
        procedure's first trials (or the replayed resume point), and the
        partitions placed under keys that start with ``namespace``. Returns
        whether the procedure had already finished (a resumed run)."""
        self._faults = FaultLog()
        self._trials: dict[str, TrialSpec] = {}
        self._uspec: dict[str, UnitSpec] = {}
        self._epochs: dict[str, int] = {}
        self._scores: dict[str, list[float]] = {}
        self._epoch_so_far: dict[str, EpochSoFar] = {}
        self._epochs_done = 0  # scheduler epochs completed (validated and scored)
        self._best: dict[str, tuple[float, bytes]] = {}
        self._requeued = 0
        self._visit_log: dict[tuple[str, int], tuple[int, ...]] = {}
        self._history: list[EpochMetrics] = []
        self._epochs_run = 0
        self._reduced = {}
        self._oom_retried: set[str] = set()  # trials whose one retry after running out of memory is used
        self._planned, self._plans = {}, {}
        self._sized: set[str] = set()  # trials whose GPU sizing is done (or found no CUDA)
        self._sizings: dict[str, dict[str, BatchSizing | None]] = {}  # trial -> worker -> result, this phase
        self._size_on: list[str] = []  # the sizing phase's workers (its pseudo-partition i is worker i)
        self._keep_off: dict[str, frozenset[str]] = {}  # trial -> GPU workers it was sized not to fit on
        self._gpus = set(self.engine.gpu_workers()) if self.sizing_fn is not None else set()
        self._placement = None  # this run's, once its partitions are staged
        if not workers:
            raise RunnerError("engine: found no live workers, expected at least one")
        size = data_bytes(self._parts)
        replication = resolve_replication(self.replication, size, len(workers))
        self._hops = HopStore(self.hop, self._checkpoint_dir, under=self.blob_url).open()
        self._placement = Placement(self.engine, self._staged_parts(), replication=replication,
                                    repair_grace=self.repair_grace, worker_wait=self.worker_wait,
                                    faults=self._faults, forget=lambda sched, unit: None, namespace=namespace,
                                    everywhere=copies_everywhere(self.replication, size))
        specs = self.procedure.start()
        self._admit(specs)
        self._live = [s.id for s in specs]
        if self.resume is not None:
            self._best.update(self.resume.best_checkpoints)
            self._live, finished = replay_procedure(self.resume, self.procedure, self._live, self._epochs,
                                                    self._scores, self._admit)
            self._epochs_done = self.resume.epoch
            if finished:
                return True
        self._mop_epoch = self._epochs_done
        self._restoring = self.resume is not None
        self._placement.place_all(workers)
        self._pool_kind = self._training_or_sizing()
        self._check_epochs()
        return False

    def _staged_parts(self) -> Mapping[str, Mapping[int, Any]]:
        """What is placed on the workers: the partitions themselves, or with
        ``blob_url`` their :class:`StagedPartition` in the run's folder (staged
        once; a re-placement after a lost worker places the same reference)."""
        if self.blob_url is None:
            return self._parts
        base = f"{self._hops.directory}/partitions"
        return {kind: {pid: stage_partition(data, base, f"{kind}-{pid}") for pid, data in parts.items()}
                for kind, parts in self._parts.items()}

    def _check_epochs(self) -> None:
        if self._mop_epoch >= self.max_epochs:
            raise RunnerError(f"the procedure did not finish within max_epochs={self.max_epochs} epochs")

    def _pool_phase(self) -> Phase:
        """The scheduler of the phase that starts now: this epoch's training
        units, or its validation units (parameters not trained), or, before
        training, the sizing of new trials on the GPU workers."""
        kind, epoch = self._pool_kind, self._mop_epoch
        if kind == SIZE:  # one unit per (trial, worker): pseudo-partition i is held by worker i only
            unsized = tuple(t for t in self._live if t not in self._sized)
            seed = random.Random(f"{self.seed}/size/{epoch}").randrange(2**32)
            return Phase(unsized, {w: {i} for i, w in enumerate(self._size_on)}, range(len(self._size_on)),
                         seed, None, 0, partial=True)
        if kind == TRAIN:  # a seed of its own per epoch: an epoch's draws do not depend on the others'
            seed = random.Random(f"{self.seed}/train/{epoch}").randrange(2**32)
            return Phase(tuple(self._live), self._placement.availability(TRAIN), range(self._p), seed,
                         self.visit_order, epoch)
        return Phase(tuple(self._live), self._placement.availability(VAL), range(self._p), self.seed + 1 + epoch,
                     None, 0)

    def _pool_phase_started(self, slot: Any) -> None:
        """The phase's scheduler is in the pool as ``slot``: placement changes
        go to it, and a resumed run takes its finished units as done."""
        self._slot = slot
        if self._pool_kind == SIZE:
            self._sizings = {}
            return
        self._placement.attach(self._pool_kind, slot)
        if self._pool_kind == VAL:
            self._val_parts: dict[str, list[Mapping[str, Any]]] = {}
        elif self._restoring:
            self._restoring = False
            self._epoch_so_far.update(restore_epoch(self.resume, slot, self._live, self._p))

    def _pool_unit(self, unit: Unit) -> tuple[Callable[..., Any], str, tuple[Any, ...]]:
        """``(fn, key, args)`` of ``unit`` of the current phase, for ``Engine.submit_pinned``."""
        t = unit.config
        if self._pool_kind == SIZE:
            worker = self._size_on[unit.partition]
            pid = min(self._placement.map.held_by(TRAIN, worker))
            return self.sizing_fn, self._placement.key(TRAIN, pid), (self._uspec[t], self._size_request(t), self.hooks)
        spec = self._uspec[t].at(self._epochs[t], unit.partition)
        key = self._placement.key(self._pool_kind, unit.partition)
        if self._pool_kind == TRAIN:
            return train_unit, key, (self._hops.ref(t), spec, self.hooks, self._hops.out_dir)
        return eval_unit, key, (self._hops.ref(t), spec, self.hooks)

    def _pool_unit_done(self, kind: str, unit: Unit, worker: str, result: Any) -> None:
        """Take a finished unit's result into the run, then tell ``on_unit``."""
        t = unit.config
        if kind == SIZE:
            self._sizings.setdefault(t, {})[worker] = result
            return
        if kind == TRAIN:
            assert isinstance(result, UnitOutput)
            self._hops.advance(t, result.checkpoint)
            self._epoch_so_far.setdefault(t, EpochSoFar()).add(unit.partition, result.metrics)
            metrics = result.metrics
        else:
            self._val_parts.setdefault(t, []).append(result)
            metrics = result
        if self.on_unit is not None:
            self._emit(self.on_unit, UnitRecord(kind, t, self._mop_epoch, unit.partition, worker, dict(metrics)))

    def _pool_phase_done(self, visit_log: Mapping[tuple[str, int], Sequence[int]]) -> bool:
        """The phase's units are all done (``visit_log``: its scheduler's).
        After sizing, the new trials follow their plans and training starts;
        after training, validation starts; after validation, the epoch is
        scored and ``procedure.epoch_end`` decides. Returns whether the run finished."""
        self._placement.detach(self._pool_kind)
        self._slot = None
        if self._pool_kind == SIZE:
            for t in sorted(t for t in self._live if t not in self._sized):
                self._follow_plan(t, self._sizings.get(t, {}))
            self._sizings = {}
            self._pool_kind = TRAIN
            return False
        if self._pool_kind == TRAIN:
            self._visit_log.update({k: tuple(v) for k, v in visit_log.items()})
            self._pool_kind = VAL
            return False
        mop_epoch = self._mop_epoch
        self._epochs_run += 1
        live = self._live
        results = self._score_epoch(live, mop_epoch, self._history)
        # The epoch counts as done (for resume_state) only once every trial has its score.
        for t in live:
            self._scores[t].append(results[t].score)
        self._epoch_so_far = {}
        self._epochs_done = mop_epoch + 1
        decision = self.procedure.epoch_end(results)
        stopped = set(decision.stop)
        self._admit(decision.add)  # init_from may name a trial stopped right now
        self._live = [t for t in live if t not in stopped] + [s.id for s in decision.add]
        if decision.finished or not self._live:
            return True
        self._placement.rebalance()
        self._mop_epoch += 1
        self._pool_kind = self._training_or_sizing()
        self._check_epochs()
        return False

    # -- GPU memory sizing (gpu_memory, Seneca Alg. 1) ----------------------------------------------
    def _training_or_sizing(self) -> str:
        """SIZE when live trials that were never sized can be sized on GPU
        workers that hold training partitions of this run, else TRAIN."""
        if self.sizing_fn is None or all(t in self._sized for t in self._live):
            return TRAIN
        placement = self._placement
        self._size_on = sorted(w for w in self._gpus & placement.live if placement.map.held_by(TRAIN, w))
        return SIZE if self._size_on else TRAIN

    def _size_request(self, t: str) -> int:
        """The batch size to size trial ``t`` for: its own, or the largest
        training partition when that is smaller (no unit trains on a larger
        batch, so only a smaller size is a cut)."""
        largest = max(len(x) for x, _ in self._parts[TRAIN].values())
        return min(self._uspec[t].batch_size, largest)

    def _follow_plan(self, t: str, sizings: Mapping[str, BatchSizing | None]) -> None:
        """Take trial ``t``'s sizing results (worker -> result) into its
        spec: keep or cut its batch size, keep its units off the GPU
        workers it does not fit on.

        Raises:
            DeviceOutOfMemoryError: not even the smallest batch fits any GPU.
            RunnerError: some partition has no copy on a worker ``t`` fits on.
        """
        spec = self._uspec[t]
        plan = plan_from_sizings(spec.model, sizings)
        self._sized.add(t)
        if plan is None:
            return  # no CUDA on the GPU workers: train as asked
        self._plans[t] = plan
        if plan.batch_size is None:
            s = plan.sizing
            raise DeviceOutOfMemoryError(spec.model, s.peaks[0][0], s.device or f"the GPU of {plan.probed_on!r}",
                                         s.total_bytes, phase="sizing", detail=f"trial {t!r}: {plan.describe()}")
        notes = []
        if plan.cut:
            self._uspec[t] = spec.with_params(batch_size=plan.batch_size)
            self._planned[t] = plan.batch_size
            notes.append(f"it trains with batch size {plan.batch_size}")
        keep_off = frozenset(w for w, s in sizings.items() if s is not None) - set(plan.workers)
        if keep_off:
            self._keep_off[t] = keep_off
            notes.append(f"its units keep off {sorted(keep_off)}")
        if notes:
            self._faults.note(f"GPU sizing of trial {t!r}: {plan.describe()}; {'; '.join(notes)}")
        else:
            log.info("GPU sizing of trial %r: %s", t, plan.describe())
        if keep_off:
            for kind in (TRAIN, VAL):
                self._check_reachable(t, kind, self._placement.map.partitions(kind))

    def _check_reachable(self, t: str, kind: str, pids: Sequence[int]) -> None:
        """Raise when a partition of ``kind`` has live copies only on
        workers that trial ``t`` keeps off (its units could never run)."""
        placement = self._placement
        for pid in pids:
            holders = placement.map.holders(kind, pid) & placement.live
            if holders and not holders - self._keep_off[t]:
                raise RunnerError(
                    f"trial {t!r}: {kind} partition {pid} lives only on {sorted(holders)}, where it does not fit "
                    f"({self._plans[t].describe()}); expected a copy on one of {list(self._plans[t].workers)} "
                    f"(raise replication)")

    def _pool_allows(self, unit: Unit, worker: str) -> bool:
        """Whether ``unit`` of the current phase may run on ``worker``: not
        where its trial was sized not to fit (the driver puts it back in Q).

        Raises:
            RunnerError: no live copy of its partition is on a worker it fits on.
        """
        keep_off = self._keep_off.get(unit.config)
        if self._pool_kind == SIZE or keep_off is None or worker not in keep_off:
            return True
        self._check_reachable(unit.config, self._pool_kind, [unit.partition])
        return False

    def _pool_out_of_memory(self, kind: str, unit: Unit, worker: str, error: DeviceOutOfMemoryError) -> None:
        """``unit`` ran out of its device's memory on ``worker``: it runs again,
        once per trial. A training unit's trial uses half its batch size from
        now on; a validation unit (whose batch is the units' own) runs as it was.

        Raises:
            DeviceOutOfMemoryError: the trial ran out of memory once already
                (or its batch size cannot be halved): its config does not fit.
        """
        t = unit.config
        spec = self._uspec[t]
        training = error.phase == "training"
        size = spec.batch_size
        if t in self._oom_retried or (training and size // 2 < 2):
            raise DeviceOutOfMemoryError(spec.model, error.batch_size, error.device, error.total_memory,
                                         phase=error.phase,
                                         detail=f"trial {t!r}, after one retry") from error
        self._oom_retried.add(t)
        if training:
            self._uspec[t] = spec.with_params(batch_size=size // 2)
            self._reduced[t] = size // 2
            then = f"trial {t!r} goes on with batch size {size // 2}"
        else:
            then = "it runs once more"
        self._faults.note(f"{kind} unit {unit} ran out of memory on {worker} ({error.device}) at batch size "
                          f"{error.batch_size}: {then}")

    def _pool_worker_added(self, worker: str) -> None:
        """A worker joined the pool: place this run's under-replicated
        partitions there and tell the pool what it holds of them."""
        placement = self._placement
        if worker in placement.live:
            return
        if self.sizing_fn is not None and worker in self.engine.gpu_workers():
            self._gpus.add(worker)
        placement.worker_added(worker)
        if worker in placement.live and self._slot is not None and self._pool_kind != SIZE:
            self._slot.add_worker(worker, placement.availability(self._pool_kind)[worker])

    def _pool_close(self) -> None:
        """The run ended: forget its data on the workers and its hop store."""
        if self._placement is not None:
            self._placement.drop_all()
        if self._hops is not None:
            self._hops.close()  # with blob_url, the run's folder: checkpoints and staged partitions

    def _emit(self, fn: Callable[[Any], None], value: Any) -> None:
        """Tell a listener. Its :class:`StopRun` ends the run with the error
        it carries (raised here, the driver fails the workload with it); any
        other error is its own bug, logged, and training goes on."""
        try:
            fn(value)
            return
        except StopRun as stop:
            error = stop.error
        except Exception:  # noqa: BLE001 - a broken listener must not stop training
            log.exception("a listener of the run failed (%s); training goes on", type(value).__name__)
            return
        raise error  # outside the handler: the StopRun wrapper is no part of the error's story

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run the procedure to the end and return the :class:`RunResult`
        (the one-workload case of :class:`PoolDriver`, on this thread)."""
        return PoolDriver(self.engine, seed=self.seed).run_alone(self)

    def _score_epoch(self, live: list[str], mop_epoch: int, history: list[EpochMetrics]) -> dict[str, TrialResult]:
        """Each live trial's result of the epoch just validated; streams its
        :class:`EpochMetrics` and keeps its best checkpoint."""
        results: dict[str, TrialResult] = {}
        log_now = self._visit_log
        for t in live:
            self._epochs[t] += 1
            v = combine_eval(self._val_parts.get(t, []))
            now = self._epoch_so_far.get(t, EpochSoFar())
            train_loss = now.train_loss
            results[t] = TrialResult(t, self._epochs[t], v["score"], {"val_loss": v["val_loss"], "train_loss": train_loss})
            m = EpochMetrics(t, self._epochs[t], mop_epoch, v["score"], train_loss, v["val_loss"],
                             int(now.examples), now.seconds, tuple(log_now.get((t, mop_epoch), ())))
            history.append(m)
            if not math.isnan(v["score"]) and (t not in self._best or v["score"] > self._best[t][0]):
                self._best[t] = (v["score"], self._hops.read(t))
            if self.on_metrics is not None:
                self._emit(self.on_metrics, m)
        return results

    def _result(self) -> RunResult:
        return RunResult(
            trials=dict(self._trials),
            history=self._history,
            best=self.procedure.best(),
            visit_log=dict(self._visit_log),
            checkpoints=self._hops.read_all(),
            best_checkpoints=dict(self._best),
            requeued=self._requeued,
            faults=list(self._faults.entries),
            epochs=self._epochs_run,
            seconds=time.monotonic() - self._faults.t0,
            _builders=self.builders,
            _hooks=self.hooks,
        )


def run_mop(engine: Engine, procedure: Procedure, models: Any, X: Any, y: Any, **kwargs: Any) -> RunResult:
    """``MOPRunner(engine, procedure, models, X, y, **kwargs).run()``."""
    return MOPRunner(engine, procedure, models, X, y, **kwargs).run()
