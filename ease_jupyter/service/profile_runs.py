"""A job's profiling runs (ACAI §4.2.2), done before its full grid or workload.

The first job of a family the profiler has no record of carries a plan
(``profiling.ProfileBook.plan_profiling``, ``selection/profile_plan.py``):
a few (examples, threads) configurations. Each run fits the pick's first
grid point on a seeded subsample of the task's rows (training rows to fit,
held-out rows to score, both at the run's share of the examples, so the
run is the full job's one-point version at ``n`` examples), with the
task's preprocessing as the full job has it, on the job's engine, under a
limit of the run's threads, and is timed as the full grid is
(``GridResult.seconds``). A run that fails is logged and left out: the
job goes on.

A torch pick's runs (:func:`profile_torch`) train its first config for one
epoch on a seeded subsample of the task's training rows (the full job's
split, ``partitions.split_validation``) at the run's share of the
examples, with the units' own hooks (model, input and train functions,
precision) on the device the units pick (``device.worker_device``), under
the run's torch threads. Not through ``units.train_unit``: a unit pins
torch to one thread, and a run must measure its own thread count. A run's
seconds cover building and adapting the net, moving it and its data to the
device, and the epoch.

A user's torch factory runs her code (``forward``) wherever it trains, so
its runs are not done here but as MOP units (:func:`profile_in_units`): the
caller's ``run_epoch`` trains the run's subsample for one epoch through the
engine her training units use, under her job's deadline (an engine gives up
on a unit past it and replaces its worker). A unit trains at one thread, so
such a run is a record at one thread. An untimed warm-up epoch on a few
rows comes first, so that no run's seconds include starting her job's
sandboxed child and importing torch in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..execution.grid import grid_search
from ..execution.holdout import validation_mask
from ..selection.profile_plan import ProfileRun
from ..user_sandbox import from_user_code
from .threads import blas_threads, limit_threads, torch_threads

log = logging.getLogger(__name__)


def _log_failed(message: str, *args: Any, error: BaseException, users: bool) -> None:
    """Log a failed run. A user model's error (the grid's or engine's
    wrapping included) may carry what her code printed and her traceback:
    the log, which others read, gets its type only; her job's error keeps
    the text for her."""
    if users or from_user_code(error):
        log.warning(message + " (%s; a user model's error, not logged)", *args, type(error).__name__)
    else:
        log.warning(message, *args, exc_info=error)


def take(X: Any, rows: np.ndarray) -> Any:
    """Rows of the examples: a DataFrame's by position, an array's by index."""
    return X.iloc[rows] if hasattr(X, "iloc") else np.asarray(X)[rows]


def subsample(data: Any, n: int, seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """(X_train, y_train, X_held_out, y_held_out) of ``n`` of the task's
    examples: its fixed split's training and held-out rows
    (``holdout.validation_mask``), each at the share ``n / examples``
    (at least one of each), drawn with ``seed``."""
    held_out = validation_mask(data.split_keys)
    share = min(1.0, n / max(len(data.y), 1))
    rng = np.random.default_rng(seed)
    parts = []
    for rows in (np.flatnonzero(~held_out), np.flatnonzero(held_out)):
        size = min(len(rows), max(1, round(share * len(rows))))
        chosen = np.sort(rng.choice(rows, size=size, replace=False))
        parts.append((take(data.X, chosen), np.asarray(data.y)[chosen]))
    (X_tr, y_tr), (X_te, y_te) = parts
    return X_tr, y_tr, X_te, y_te


def profile_sklearn(candidate: Any, point: dict[str, Any], data: Any, classification: bool, engine: Any,
                    runs: Sequence[ProfileRun], *, seed: int = 0) -> list[dict[str, Any]]:
    """Do the planned runs of the pick's grid point ``point``; returns the
    measured ones as ``{"n", "threads", "seconds"}`` (failed runs left out).
    A user model's run that fails once her job's deadline passed (a fit that
    hung until it was killed) fails the job with that run's error: the
    limit is spent, and its grid could only fail for want of time."""
    grid = {k: [v] for k, v in point.items()}
    deadline = getattr(getattr(candidate, "build", None), "deadline", None)  # a user model's (``user_models``)
    done = []
    for run in runs:
        try:
            split = subsample(data, run.n, seed)
            with blas_threads(run.threads):
                result = grid_search(limit_threads(candidate, run.threads), grid, split[0], split[1], split=split,
                                     classification=classification, engine=engine, memory=None)
        except Exception as error:  # noqa: BLE001 - a profiling run must not fail the job, unless it spent her limit
            if deadline is not None and time.time() > deadline:
                raise
            _log_failed("profiling run %s of %s failed; no record of it", run, getattr(candidate, "name", candidate),
                        error=error, users=deadline is not None)
            continue
        done.append({"n": run.n, "threads": run.threads, "seconds": float(result.seconds)})
    return done


def training_subsample(X: np.ndarray, y: np.ndarray, split_keys: Any, n: int, *, seed: int = 0) -> tuple[Any, Any]:
    """(X, y) of the task's training rows, as a MOP workload splits them
    (``partitions.split_validation`` on the same keys and seed), at the
    share ``n / examples`` (at least two: a batch norm needs two), drawn
    with ``seed``."""
    from ..execution.mop.partitions import split_validation

    (X_tr, y_tr), _ = split_validation(X, y, example_ids=split_keys, seed=seed)
    share = min(1.0, n / max(len(y), 1))
    size = min(len(y_tr), max(2, round(share * len(y_tr))))
    rows = np.sort(np.random.default_rng(seed).choice(len(y_tr), size=size, replace=False))
    return X_tr[rows], y_tr[rows]


def split_subsample(X: np.ndarray, y: np.ndarray, split_keys: Any, n: int, *,
                    seed: int = 0) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """``((X_train, y_train), (X_held_out, y_held_out))``: the training rows
    of :func:`training_subsample` and the workload's held-out rows at the
    same share (at least two), so that a run is the full workload's one-epoch
    version at ``n`` examples."""
    from ..execution.mop.partitions import split_validation

    _, (X_val, y_val) = split_validation(X, y, example_ids=split_keys, seed=seed)
    share = min(1.0, n / max(len(y), 1))
    size = min(len(y_val), max(2, round(share * len(y_val))))
    rows = np.sort(np.random.default_rng(seed + 1).choice(len(y_val), size=size, replace=False))
    return training_subsample(X, y, split_keys, n, seed=seed), (X_val[rows], y_val[rows])


def profile_in_units(runs: Sequence[ProfileRun], X: np.ndarray, y: np.ndarray, split_keys: Any,
                     run_epoch: Callable[[tuple[Any, Any], tuple[Any, Any]], Any], *, seed: int = 0,
                     limit_spent: Callable[[], bool] | None = None, name: str = "") -> list[dict[str, Any]]:
    """Do the planned runs of a user's torch factory as MOP units:
    ``run_epoch(train, validation)`` trains its first config for one epoch
    on each run's subsample (:func:`split_subsample`) as her training does,
    and each run's wall seconds are its cost. Returns the measured ones as
    ``{"n", "threads": 1, "seconds", "epochs": 1}``. A run that fails once
    ``limit_spent()`` is true fails the job with its error (a unit that hung
    until the engine gave up on it): her limit is spent; any other failed
    run is left out.

    A warm-up epoch on the smallest subsample there is (two training and two
    held-out rows) comes first, untimed: it starts the sandboxed child her
    net is built in and imports torch there (seconds, on a worker's first
    unit), which would otherwise be counted in the first, smallest run and
    bend the fitted law's slope. Its failure is logged and the runs go on
    (one that spent her limit fails the job). An engine with several workers
    may still start a cold child for a later run on another worker."""
    if runs:
        try:
            run_epoch(*split_subsample(X, y, split_keys, 1, seed=seed))
        except Exception as error:  # noqa: BLE001 - a warm-up must not fail the job, unless it spent her limit
            if limit_spent is not None and limit_spent():
                raise
            _log_failed("profiling warm-up of %s failed", name, error=error, users=True)
    done = []
    for run in runs:
        try:
            train, validation = split_subsample(X, y, split_keys, run.n, seed=seed)
            started = time.perf_counter()
            run_epoch(train, validation)
            seconds = time.perf_counter() - started
        except Exception as error:  # noqa: BLE001 - a profiling run must not fail the job, unless it spent her limit
            if limit_spent is not None and limit_spent():
                raise
            _log_failed("profiling run %s of %s failed; no record of it", run, name, error=error, users=True)
            continue
        done.append({"n": run.n, "threads": 1, "seconds": float(seconds), "epochs": 1})
    return done


def one_epoch(spec: Any, X: np.ndarray, y: np.ndarray, hooks: Any) -> float:
    """Seconds to build ``spec``'s net, adapt it to ``(X, y)`` and train it
    one epoch with ``hooks`` on the units' device, as a unit trains
    (``units.default_train_fn`` or the hooks' own), from fresh weights."""
    import torch

    from ..execution.device import mixed_precision, worker_device
    from ..execution.units import build_net

    device = worker_device()
    started = time.perf_counter()
    X_t, y_t = hooks.input_fn((X, y))
    net = build_net(hooks, spec)
    net.adapt(X_t, y_t)
    net.to(device).train()
    options = spec.options
    opt = net.make_optimizer(spec.lr, **{k: float(options[k]) for k in ("momentum", "weight_decay") if k in options})
    amp = mixed_precision(hooks.precision, device)
    extra = {"amp": amp, "scaler": amp.scaler()} if amp.active else {}
    order = torch.Generator().manual_seed(spec.seed)
    hooks.train_fn(net, opt, X_t.to(device), y_t.to(device), spec, order, **extra)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the epoch's kernels are done, not only queued
    return time.perf_counter() - started


def profile_torch(candidate: Any, trial: str, params: Mapping[str, Any], X: np.ndarray, y: np.ndarray,
                  split_keys: Any, runs: Sequence[ProfileRun], *, seed: int = 0, hooks: Any = None) -> list[dict[str, Any]]:
    """Do the planned runs of a torch pick: its first config (trial
    ``trial``, ``params``) for one epoch on each run's subsample of the
    training rows at the run's threads (:func:`one_epoch`). Returns the
    measured ones as ``{"n", "threads", "seconds", "epochs": 1}`` (failed
    runs left out)."""
    from ..execution.units import Hooks, UnitSpec

    hooks = hooks or Hooks()
    spec = UnitSpec.of(trial, candidate.name, params, candidate.build, seed=seed)
    done = []
    for run in runs:
        try:
            X_run, y_run = training_subsample(X, y, split_keys, run.n, seed=seed)
            with torch_threads(run.threads):
                seconds = one_epoch(spec, X_run, y_run, hooks)
        except Exception as error:  # noqa: BLE001 - a profiling run must not fail the job
            _log_failed("profiling run %s of %s failed; no record of it", run, candidate.name, error=error,
                        users=False)
            continue
        done.append({"n": run.n, "threads": run.threads, "seconds": float(seconds), "epochs": 1})
    return done
