"""The live service against what users do today: a multi-user workload on
``easeml serve`` with its default rule, with a first-come-first-served
queue, and every user running her own Optuna study.

    python benchmarks/workload.py            # full: 10 users, 2 repetitions (about 12 min on 2 shared cores)
    python benchmarks/workload.py --quick    # 8 small users, 1 repetition (about 2.5 min)
    python benchmarks/workload.py --torch-epochs 12 --reps 1 --out benchmarks/results/workload_heavy.json
    python benchmarks/workload.py --reps 1 --budget 200 --arms easeml,fifo
    python benchmarks/workload.py --quick --reps 2 --arms easeml,easeml_no_prior --out benchmarks/results/workload_prior.json

Writes ``benchmarks/results/workload[_quick].json`` and ``.md``.

The workload
------------
Ten users (eight with ``--quick``), each with one real task made from data
scikit-learn ships (nothing downloaded): flat feature tasks (iris, wine,
breast cancer, digits as 64 features, digits upsampled to 32x32 = 1024
features) whose candidates are the zoo's scikit-learn models, each pick a
hyperparameter grid (Seneca grid search); and image tasks from digits
(8x8 pairs, label noise, random rotations, all ten digits upsampled to 16x16
and 32x32) whose candidates are the zoo's torch nets, each pick a
learning-rate grid trained for ``--torch-epochs`` epochs as one MOP workload
(Cerebro §4.2). The 32x32 and 1024-feature tasks are the costly ones: their
largest arms take tens of seconds, where iris's take milliseconds. Users
arrive on a fixed schedule (``users()``: one every 6 s in the full run,
every 2 s with ``--quick``), so there are more users than workers while the
first ones still train. Each task holds back 10% of its data (stratified,
seeded), never fed to anyone; the rest is fed once, in the same order
everywhere, so every arm trains on the same examples with the same
validation split (``execution.holdout.validation_mask`` by example id).

The arms, run back to back on the same machine, same users, arrival
schedule, candidates, grids and epochs:

* ``easeml``: one ``easeml serve --policy default --workers W
  --max-torch-workloads W`` subprocess on loopback with a fresh data dir
  (W torch workloads at once, one per worker: more would only time-share the
  same workers and delay every result); each user creates her task and feeds
  it through ``ease_jupyter.Client`` at her arrival time, and the service
  decides what trains. The service is started, and its worker processes
  spawned, before the arm's clock starts (a shared service is already
  running when users come).
* ``fifo``: the same with ``--policy fifo``: tasks served in the order they
  arrived, each task's models in the zoo's order.
* ``easeml_no_express`` (only when named in ``--arms``): ``easeml`` with
  ``--express-slots 0``, without the slot beyond ``--workers`` that takes a
  task's first short pick while every worker is busy (``easeml serve``'s
  default is one); ``express_slots`` in the JSON is
  ``t(easeml_no_express) / t(easeml)`` per loss level.
* ``easeml_no_prior`` (only when named in ``--arms``): the default rule with
  ``--no-cross-user-prior``, the selector's prior from the model descriptors
  alone. Every service arm starts on a fresh data dir, so ``easeml`` starts
  from the prior shipped with the package and moves to the store's own
  history as the workload's tasks finish (``service/loop/prior.py``); this
  arm measures what that brings. A family's block needs ``MIN_TASKS`` (5)
  finished tasks, and the workload has five flat (and, full, five image)
  tasks, so no pick here is made on a block of the store's own: what is
  compared is the shipped prior against the descriptors (docs/service.md).
* ``optuna_per_user``: what users do without a shared scheduler. Each user
  runs her own Optuna study (``TPESampler``, seeded, Optuna's defaults) in
  her own process, all at once on the same cores. A trial is one arm of her
  task, the same arms the service would train for it
  (``service.candidates.arm_specs``: a scikit-learn candidate's grid, or a
  torch candidate's learning-rate workload), trained by the service's own job
  code (``service.runner.run_sklearn_job`` / ``service.mop.run_torch_job``)
  on a store of her own in memory, with one engine worker and the same MOP
  partition count as the service's torch engine. An arm TPE suggests again
  is answered from the first result without training (Optuna's recipe for
  duplicates); after 30 duplicates in a row the first untried arm is
  enqueued. The processes are started, and have imported everything, before
  the arm's clock starts ("warm" Optuna: imports are not counted against
  it), and each waits for her arrival time. Training threads are niced as
  the service's workers are (``--worker-nice``), and every process has one
  BLAS/OpenMP thread and one torch thread.

An arm ends when every user has tried every arm of her task, or at the
budget (``--budget`` seconds after its start); a result later than that is
not counted.

What is measured
----------------
* *Reference accuracy* of a user: the best validation accuracy that any
  job of any arm, in any repetition, reached on her task.
* *Loss* of user u at time t (seconds since the arm's start):
  ``ref_u - best_u(t)``, where ``best_u(t)`` is the best validation accuracy
  among her jobs finished by t, and 0 before her first result (also before
  she arrives: arrivals are the same in every arm). The *average loss* is
  the mean over users; ``curve`` is that step function as ``[[t, loss],
  ...]`` (a point at 0, at each result, and at the arm's end).
* ``time_to_loss[L]``: the first t with average loss <= L, for L = 0.05,
  0.02, 0.01; null when the arm never got there (``censored``). With several
  repetitions each arm's figure is the mean over repetitions (per-repetition
  figures in ``runs``), and the pooled curve the mean of the step functions.
* ``time_after_last_arrival[L]``: the same minus the last user's arrival.
  No arm can bring the average below L before every user has a result
  (one user with nothing holds it at about ref_u / users), so with a short
  backlog every arm's time is close to the last arrival and the ratios of
  ``time_to_loss`` are squeezed toward 1; the ratio counted from the last
  arrival is reported beside each target for that reason (it is not the
  target).
* ``final_accuracy[u]``: accuracy on u's held-back 10% of the model the arm
  would serve her at its end: the service's best model through
  ``task.infer``; for Optuna, the best trial's model (``models.predict``).
  Mean over repetitions.
* ``cpu_seconds`` (per run): CPU time of the arm's processes (the service
  and its workers, or the studies), start-up included. On a shared machine
  an arm with more runnable processes (ten studies) takes a larger share of
  the cores from other people's work than one service with W workers does.
* ``machine``: cores, and the load average (``os.getloadavg``) at the start,
  end and mean over each arm: other work on a shared machine slows arms
  unevenly, so ratios measured under load are noisy.

Targets (``targets`` in the JSON): the default arm reaches average loss 0.02
at least 2x sooner than ``optuna_per_user`` and 1.5x sooner than ``fifo``,
and no user's final held-out accuracy is lower under ``easeml`` than under
either. A ratio is ``t_other / t_easeml`` of the mean times; where the other
arm never reached the level within its budget, the ratio is a lower bound
(``budget / t_easeml``, ``lower_bound: true``). Each ratio comes with the
95 % paired bootstrap interval over the repetitions (``interval``; a run
that missed the level counts its budget), as the simulator's do
(``ease_jupyter.selection.stats``), and a target is met only when the
interval's low end clears it (``verdict``; ``unresolved`` where the default
arm itself missed the level in a repetition).
No arm can reach 0.02 while the users still to come hold more than 0.02 x
users of reference accuracy (``earliest_possible``: with these users, not
before the last one arrives; ``floor_t0.02`` in the JSON), so no arm can be
more than ``t_other / floor`` faster than another (``reachable``, with its
interval). A target above that over its whole interval, the other arm having
reached the level in every repetition, is out of any rule's reach in this
workload and judged ``saturated``, as the simulator judges a speed-up over a
baseline already near its lower bound (``benchmarks/selection.py``).
``--report-from JSON`` recomputes a saved run's summary and targets.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # every arm's processes inherit it

import argparse
import json
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import image_matrix as im

from ease_jupyter.selection.stats import censored_times, ratio_of_means, verdict

ARMS = ("easeml", "fifo", "optuna_per_user")  # the default --arms
ALL_ARMS = (*ARMS, "easeml_no_prior", "easeml_no_express")
POLICY = {"easeml": "default", "fifo": "fifo", "easeml_no_prior": "default", "easeml_no_express": "default"}
SERVE_FLAGS = {"easeml_no_prior": ("--no-cross-user-prior",), "easeml_no_express": ("--express-slots", "0")}  # beyond --policy
WORKERS = 2  # easeml serve --workers in every arm, fewer than the users of each kind
LEVELS = ("0.05", "0.02", "0.01")
TARGET_LEVEL = "0.02"
TARGET_RATIO = {"optuna_per_user": 2.0, "fifo": 1.5}
HOLDOUT = 0.1
DUPLICATES_BEFORE_ENQUEUE = 30
SMOKE_USERS = ("ada", "cy", "gus")  # --smoke: iris, wine and a small image task of the quick schedule
SMOKE_GAP = 1.0  # --smoke: seconds between its users' arrivals (on the quick schedule gus would come at 12 s)


# -- the users -------------------------------------------------------------------------
@dataclass(frozen=True)
class User:
    """One user and her task: ``make()`` gives (X, y) before the held-out split."""

    name: str
    task: str
    kind: str  # "flat" (scikit-learn candidates) or "image" (torch candidates)
    arrival: float  # seconds after the arm's start
    description: str
    seed: int  # of her held-out split: her place in the schedule
    make: Callable[[], tuple[np.ndarray, np.ndarray]] = field(repr=False, compare=False)


def _sk(loader_name: str) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    def load() -> tuple[np.ndarray, np.ndarray]:
        from sklearn import datasets

        X, y = getattr(datasets, loader_name)(return_X_y=True)
        return X.astype(np.float32), y.astype(np.int64)

    return load


def _digits(transform: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
            flat: bool = False) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    def load() -> tuple[np.ndarray, np.ndarray]:
        X, y = transform(*im.digits_images())
        X = np.ascontiguousarray(X, dtype=np.float32)
        return (X.reshape(len(X), -1) if flat else X), y.astype(np.int64)

    return load


def _pair(a: int, b: int, noise: float = 0.0) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    def pick(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Xs, ys = im.select_classes(X, y, [a, b])
        if noise:
            ys = im.with_label_noise(ys, noise, 2, np.random.default_rng(0))
        return Xs, ys

    return pick


def _rot90(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return im.rotate_random(X, np.random.default_rng(0))[0], y


def _up(factor: int) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    return lambda X, y: (im.upsample(X, factor), y)


def users(quick: bool = False) -> list[User]:
    """The workload's users in arrival order (a fixed schedule)."""
    same = lambda X, y: (X, y)
    if quick:
        spec = [
            ("ada", "iris", "flat", "iris, 4 features", _sk("load_iris")),
            ("bob", "digits_16x16", "image", "all ten digits upsampled to 16x16 images (costly)", _digits(_up(2))),
            ("cy", "wine", "flat", "wine, 13 features", _sk("load_wine")),
            ("dee", "digits_all", "image", "all ten digits, 8x8 images", _digits(same)),
            ("eve", "breast_cancer", "flat", "breast cancer, 30 features", _sk("load_breast_cancer")),
            ("fay", "digits_256", "flat", "all ten digits upsampled to 16x16, as 256 features",
             _digits(_up(2), flat=True)),
            ("gus", "digits_3v8", "image", "digit 3 v 8, 8x8 images", _digits(_pair(3, 8))),
            ("hal", "digits", "flat", "all ten digits, 64 features", _sk("load_digits")),
        ]
        gap = 2.0
    else:
        spec = [
            ("ada", "digits", "flat", "all ten digits, 64 features", _sk("load_digits")),
            ("bob", "digits_32x32", "image", "all ten digits upsampled to 32x32 images (costly)", _digits(_up(4))),
            ("cy", "wine", "flat", "wine, 13 features", _sk("load_wine")),
            ("dee", "digits_rot90", "image", "all ten digits, each turned by a random multiple of 90 degrees",
             _digits(_rot90)),
            ("eve", "digits_1024", "flat", "all ten digits upsampled to 32x32, as 1024 features (costly)",
             _digits(_up(4), flat=True)),
            ("fay", "breast_cancer", "flat", "breast cancer, 30 features", _sk("load_breast_cancer")),
            ("gus", "digits_3v8_noise30", "image", "digit 3 v 8, 30% of labels flipped, 8x8 images",
             _digits(_pair(3, 8, noise=0.3))),
            ("hal", "iris", "flat", "iris, 4 features", _sk("load_iris")),
            ("ivy", "digits_16x16", "image", "all ten digits upsampled to 16x16 images", _digits(_up(2))),
            ("jay", "digits_0v1", "image", "digit 0 v 1, 8x8 images", _digits(_pair(0, 1))),
        ]
        gap = 6.0
    return [User(n, t, k, i * gap, d, i, m) for i, (n, t, k, d, m) in enumerate(spec)]


def holdout_split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fed, held out) example indices: a stratified, seeded 10% held out, never fed to any arm."""
    from sklearn.model_selection import train_test_split

    index = np.arange(len(y))
    fed, held = train_test_split(index, test_size=HOLDOUT, stratify=y, random_state=seed)
    return np.sort(fed), np.sort(held)


@dataclass
class UserData:
    user: User
    X: np.ndarray
    y: np.ndarray
    fed: np.ndarray
    held: np.ndarray

    @property
    def n_classes(self) -> int:
        return max(int(self.y.max()) + 1, 2)

    def held_out_accuracy(self, predicted: Any) -> float:
        return float(np.mean(np.asarray(predicted).reshape(-1) == self.y[self.held]))


def load_user(user: User) -> UserData:
    X, y = user.make()
    fed, held = holdout_split(y, seed=user.seed)
    return UserData(user, X, y, fed, held)


# -- the measures (pure) ----------------------------------------------------------------
Results = dict[str, list[tuple[float, float]]]  # user -> [(seconds since the arm's start, validation accuracy)]


def reference_accuracy(runs: Sequence[Results], names: Sequence[str]) -> dict[str, float]:
    """Each user's best validation accuracy over every run of every arm (0 if none)."""
    return {u: max((acc for run in runs for _, acc in run.get(u, [])), default=0.0) for u in names}


def loss_curve(results: Results, reference: dict[str, float], end: float) -> list[list[float]]:
    """The average accuracy loss over the users of ``reference`` as a step
    function ``[[t, loss], ...]``: a point at 0, at every result up to ``end``
    and at ``end``. A user's loss is her reference minus her best result so
    far (0 before her first)."""
    times = sorted({0.0, float(end), *(t for u in reference for t, _ in results.get(u, []) if t <= end)})
    best = dict.fromkeys(reference, 0.0)
    events = sorted((t, u, acc) for u in reference for t, acc in results.get(u, []) if t <= end)
    curve, k = [], 0
    for t in times:
        while k < len(events) and events[k][0] <= t:
            _, u, acc = events[k]
            best[u] = max(best[u], acc)
            k += 1
        loss = float(np.mean([reference[u] - best[u] for u in reference])) if reference else 0.0
        curve.append([round(t, 3), max(loss, 0.0)])
    return curve


def time_to_loss(curve: Sequence[Sequence[float]], level: float) -> float | None:
    """The first time the average loss is at most ``level``; None if never."""
    for t, loss in curve:
        if loss <= level + 1e-12:
            return float(t)
    return None


def mean_curve(curves: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
    """The pointwise mean of step functions (each held at its last value past its end)."""
    times = sorted({t for c in curves for t, _ in c})

    def at(curve: Sequence[Sequence[float]], t: float) -> float:
        value = curve[0][1]
        for s, loss in curve:
            if s > t:
                break
            value = loss
        return value

    return [[t, round(float(np.mean([at(c, t) for c in curves])), 6)] for t in times]


def ratio(other: float | None, ours: float | None, budget: float) -> dict[str, Any]:
    """``other / ours`` of two times to a loss level; a lower bound when
    ``other`` never got there within ``budget``; None when ours never did."""
    if ours is None or ours <= 0:
        return {"ratio": None, "lower_bound": False}
    if other is None:
        return {"ratio": round(budget / ours, 3), "lower_bound": True}
    return {"ratio": round(other / ours, 3), "lower_bound": False}


def earliest_possible(reference: dict[str, float], arrivals: dict[str, float], level: float) -> float:
    """A floor under every arm's time to average loss ``level``: a user's loss
    is her reference accuracy until she arrives and gets a result, so no arm
    gets the average there while the users still to come hold more than
    ``level`` times the number of users of it, even one that gave each user
    her best model the instant she arrived."""
    allowed = level * len(reference) + 1e-12
    for t in sorted({0.0, *arrivals.values()}):
        if sum(ref for u, ref in reference.items() if arrivals.get(u, 0.0) > t) <= allowed:
            return t
    return max(arrivals.values(), default=0.0)


def first_result_wait(results: Results, arrivals: dict[str, float]) -> dict[str, float | None]:
    """Seconds from each user's arrival to her first result (None: she had none)."""
    return {u: (round(min(t for t, _ in results.get(u, [])) - at, 3) if results.get(u) else None)
            for u, at in arrivals.items()}


def summarize(runs: dict[str, list[dict[str, Any]]], names: Sequence[str], budget: float,
              held_out: dict[str, int] | None = None, last_arrival: float = 0.0,
              arrivals: dict[str, float] | None = None) -> dict[str, Any]:
    """The JSON's ``reference_accuracy``, ``arms`` and ``targets`` from each
    arm's runs (``{"results": Results, "final_accuracy": {user: acc}, "end": s, ...}``);
    ``time_after_last_arrival`` counts from ``last_arrival``; with ``arrivals``
    (user -> seconds), each arm's ``first_result_wait``: per user, the mean
    over runs of the seconds from her arrival to her first result (None
    where a run gave her none: what a user sharing the service waits)."""
    reference = reference_accuracy([r["results"] for rs in runs.values() for r in rs], names)
    arms: dict[str, Any] = {}
    for arm, rs in runs.items():
        curves = [loss_curve(r["results"], reference, r["end"]) for r in rs]
        per_run = [{lvl: time_to_loss(c, float(lvl)) for lvl in LEVELS} for c in curves]
        times = {lvl: (round(statistics.mean(p[lvl] for p in per_run), 3)
                       if all(p[lvl] is not None for p in per_run) else None) for lvl in LEVELS}
        final = {u: round(statistics.mean(r["final_accuracy"].get(u, 0.0) for r in rs), 4) for u in names}
        waits = [first_result_wait(r["results"], arrivals or {}) for r in rs]
        first_wait = {u: (round(statistics.mean(w[u] for w in waits), 3) if all(w[u] is not None for w in waits)
                          else None) for u in (arrivals or {})}
        arms[arm] = {
            "time_to_loss": times,
            "time_after_last_arrival": {lvl: None if t is None else round(t - last_arrival, 3) for lvl, t in times.items()},
            "censored": {lvl: sum(p[lvl] is None for p in per_run) for lvl in LEVELS},
            "curve": mean_curve(curves),
            "final_accuracy": final,
            "first_result_wait": first_wait,
            "repetitions": len(rs),
            "runs": [{"time_to_loss": p, "curve": c, **{k: v for k, v in r.items() if k != "results"},
                      "results": {u: [[round(t, 3), round(a, 6)] for t, a in sorted(r["results"].get(u, []))]
                                  for u in names}}
                     for p, c, r in zip(per_run, curves, rs)],
        }
    floor = earliest_possible(reference, arrivals or {}, float(TARGET_LEVEL))
    out = {"reference_accuracy": reference, "arms": arms, f"floor_t{TARGET_LEVEL}": floor,
           "targets": targets(arms, names, budget, held_out, last_arrival, floor)}
    if "easeml" in arms and "easeml_no_prior" in arms:
        out["cross_user_prior"] = variant_effect(arms["easeml_no_prior"], arms["easeml"], budget)
    if "easeml" in arms and "easeml_no_express" in arms:
        out["express_slots"] = variant_effect(arms["easeml_no_express"], arms["easeml"], budget)
    return out


def variant_effect(without: dict[str, Any], with_: dict[str, Any], budget: float) -> dict[str, Any]:
    """What a service setting brings, for information (no target): per loss
    level, ``t_without / t_with`` of the mean times (above 1: the setting
    helped), and the same per repetition."""
    return {lvl: {**ratio(without["time_to_loss"][lvl], with_["time_to_loss"][lvl], budget),
                  "per_repetition": [ratio(o["time_to_loss"][lvl], e["time_to_loss"][lvl], budget)["ratio"]
                                     for o, e in zip(without["runs"], with_["runs"])]}
            for lvl in LEVELS}


def targets(arms: dict[str, Any], names: Sequence[str], budget: float,
            held_out: dict[str, int] | None = None, last_arrival: float = 0.0,
            floor: float = 0.0) -> dict[str, Any]:
    """Met or missed, with the measured ratios (only for the arms that ran),
    and, for information, the ratio of the times counted from the last
    arrival (``ratio_after_last_arrival``: no arm can reach a low average
    loss before every user has arrived).
    ``floor`` (``earliest_possible``) bounds every arm's time from below, so
    no arm can be more than ``t_other / floor`` times faster than another
    (``reachable``, with its interval): a target above that over its whole
    interval, the other arm having reached the level in every repetition, is
    out of any rule's reach and judged ``saturated``, not ``missed``.
    A user worse off under ``easeml`` is listed with ``examples``: the
    difference in held-out examples (with ``held_out``, her held-out count)."""
    out: dict[str, Any] = {}
    ours = arms.get("easeml")
    if ours is None:
        return out
    for other, goal in TARGET_RATIO.items():
        if other not in arms:
            continue
        r = ratio(arms[other]["time_to_loss"][TARGET_LEVEL], ours["time_to_loss"][TARGET_LEVEL], budget)
        per_run = [ratio(o["time_to_loss"][TARGET_LEVEL], e["time_to_loss"][TARGET_LEVEL], budget)["ratio"]
                   for o, e in zip(arms[other]["runs"], ours["runs"])]
        after = [arms[a]["time_after_last_arrival"][TARGET_LEVEL] for a in (other, "easeml")]
        (theirs, _), (mine, missed) = (
            censored_times([run["time_to_loss"][TARGET_LEVEL] for run in arms[a]["runs"]],
                           [budget] * len(arms[a]["runs"])) for a in (other, "easeml"))
        interval = ratio_of_means(theirs, mine) if len(theirs) == len(mine) and mine.mean() > 0 else None
        reachable = ratio_of_means(theirs, np.full(len(theirs), floor)) if floor > 0 and len(theirs) else None
        they_missed = any(run["time_to_loss"][TARGET_LEVEL] is None for run in arms[other]["runs"])
        out_of_reach = reachable is not None and not they_missed and reachable["high"] < goal
        judged = verdict(interval, goal, censored=float(missed.mean()), saturated=out_of_reach)
        out[f"easeml_vs_{other}_t{TARGET_LEVEL}"] = {
            **r, "target": goal, "met": judged == "met", "verdict": judged,
            "interval": None if interval is None else {k: round(interval[k], 3) for k in ("low", "high")},
            "reachable": None if reachable is None else {k: round(reachable[k], 3) for k in ("value", "low", "high")},
            "per_repetition": per_run, "ratio_after_last_arrival": ratio(*after, budget - last_arrival)["ratio"]}
    if not any(other in arms for other in TARGET_RATIO):
        return out  # nothing to judge the default against (easeml_no_prior is for information)
    worse = [{"user": u, "arm": other, "easeml": ours["final_accuracy"][u], other: arms[other]["final_accuracy"][u],
              "difference": round(ours["final_accuracy"][u] - arms[other]["final_accuracy"][u], 4),
              **({"examples": round((ours["final_accuracy"][u] - arms[other]["final_accuracy"][u]) * held_out[u], 2)}
                 if held_out else {})}
             for other in ("fifo", "optuna_per_user") if other in arms for u in names
             if ours["final_accuracy"][u] < arms[other]["final_accuracy"][u] - 1e-9]
    out["final_accuracy_not_worse"] = {"met": not worse, "worse": worse}
    return out


# -- the machine ---------------------------------------------------------------------------
class LoadSampler:
    """The 1-minute load average at the start, every ``sample()`` and the end of an arm."""

    def __init__(self) -> None:
        self.samples = [os.getloadavg()[0]]

    def sample(self) -> None:
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, float]:
        self.sample()
        return {"start": round(self.samples[0], 2), "mean": round(statistics.mean(self.samples), 2),
                "max": round(max(self.samples), 2), "end": round(self.samples[-1], 2)}


def _when(iso: str) -> float:
    stamp = datetime.fromisoformat(iso)
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()


@dataclass(frozen=True)
class Setup:
    workers: int
    torch_epochs: int
    budget: float
    warmup: float
    worker_nice: int
    torch_workloads: int
    poll: float
    quick: bool


# -- the service arms ------------------------------------------------------------------------
def run_service_arm(arm: str, data: list[UserData], setup: Setup, say: Callable[[str], None]) -> dict[str, Any]:
    """One ``easeml serve --policy POLICY`` run of the workload (with the arm's
    ``SERVE_FLAGS``); the run's record."""
    from ease_jupyter.client import Client
    from ease_jupyter.errors import EaseMLError
    from ease_jupyter.service.testing import ServeProcess, add_user

    with tempfile.TemporaryDirectory(prefix=f"easeml-workload-{arm}-") as scratch:
        admin_token = add_user(scratch, "admin", admin=True, cwd=ROOT)
        cpu = children_cpu_seconds()
        server = ServeProcess(scratch, *serve_args(arm, setup), cwd=ROOT)
        record: dict[str, Any] = {}
        try:
            admin = Client(server.url, admin_token)
            tokens = {d.user.name: admin.add_user(d.user.name)["token"] for d in data}
            time.sleep(setup.warmup)  # the workers spawn with the service: let them import
            load = LoadSampler()
            t0 = time.time()
            tasks: dict[str, Any] = {}
            errors: list[str] = []

            def arrive(d: UserData) -> None:
                try:
                    time.sleep(max(0.0, t0 + d.user.arrival - time.time()))
                    task = Client(server.url, tokens[d.user.name]).task(
                        d.user.task, input=list(d.X.shape[1:]), output=[d.n_classes])
                    task.feed(d.X[d.fed], d.y[d.fed])
                    tasks[d.user.name] = task
                except Exception as error:  # noqa: BLE001 - reported, the arm goes on
                    errors.append(f"{d.user.name}: {error}")

            threads = [threading.Thread(target=arrive, args=(d,), daemon=True) for d in data]
            for thread in threads:
                thread.start()
            last_say = 0.0
            while True:
                time.sleep(setup.poll)
                now = time.time() - t0
                load.sample()
                infos = {name: task.refresh() for name, task in list(tasks.items())}
                done = sum(sum(i["jobs"].get(s, 0) for s in ("succeeded", "failed")) for i in infos.values())
                total = sum(int(i["arms"]) for i in infos.values())
                finished = len(infos) == len(data) and all(i["idle"] for i in infos.values())
                if now - last_say >= 5 * setup.poll or finished:
                    say(f"  {arm}: {now:6.1f} s  {len(infos)}/{len(data)} users arrived  jobs {done}/{total}  "
                        f"load {os.getloadavg()[0]:.1f}")
                    last_say = now
                if finished or now >= setup.budget or errors:
                    break
            end = min(time.time() - t0, setup.budget)
            record = _service_record(data, tasks, t0, end, EaseMLError)
            record.update(end=round(end, 3), load=load.summary(), errors=errors, finished=finished,
                          scheduler_errors=server.errors()[:5],
                          prior=admin.progress()["loop"]["prior"])  # where the selector's prior came from at the end
        finally:
            server.stop()
        record["cpu_seconds"] = round(children_cpu_seconds() - cpu, 1)
        return record


def serve_args(arm: str, setup: Setup) -> list[str]:
    """``easeml serve``'s options for a service arm: the same workers, epochs and
    niceness for every arm, the arm's ``--policy`` and its ``SERVE_FLAGS``."""
    return ["--workers", str(setup.workers), "--policy", POLICY[arm], *SERVE_FLAGS.get(arm, ()),
            "--torch-epochs", str(setup.torch_epochs), "--worker-nice", str(setup.worker_nice),
            "--max-torch-workloads", str(setup.torch_workloads)]


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished (waited-for) child processes and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _service_record(data: list[UserData], tasks: dict[str, Any], t0: float, end: float,
                    error_type: type) -> dict[str, Any]:
    results: Results = {}
    final: dict[str, float] = {}
    jobs: dict[str, list[list[Any]]] = {}
    for d in data:
        name = d.user.name
        task = tasks.get(name)
        if task is None:
            results[name], final[name], jobs[name] = [], 0.0, []
            continue
        listing = task.jobs()
        ok = [(_when(j["finished_at"]) - t0, float(j["accuracy"]), j["model"], _when(j["started_at"]) - t0)
              for j in listing if j["status"] == "succeeded" and j["accuracy"] is not None and j["finished_at"]]
        results[name] = [(t, a) for t, a, *_ in ok if t <= end]
        jobs[name] = [[round(t, 3), m, round(a, 6), round(s, 3)] for t, a, m, s in sorted(ok)]
        try:
            final[name] = d.held_out_accuracy(task.infer(d.X[d.held]))
        except error_type:  # no model yet: nothing to serve her
            final[name] = 0.0
    return {"results": results, "final_accuracy": final, "jobs": jobs}


# -- the Optuna arm ----------------------------------------------------------------------------
def run_optuna_arm(data: list[UserData], setup: Setup, rep: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Every user's own Optuna study in her own process, all at once; the run's record."""
    cpu = children_cpu_seconds()
    with tempfile.TemporaryDirectory(prefix="easeml-workload-optuna-") as scratch:
        procs = []  # (user, spec, log file, process); the logs are closed in the finally below
        for index, d in enumerate(data):
            spec = {"quick": setup.quick, "user": d.user.name, "arrival": d.user.arrival,
                    "seed": 1000 * rep + index, "budget": setup.budget,
                    "torch_epochs": setup.torch_epochs, "partitions": setup.workers, "nice": setup.worker_nice,
                    "trials": str(Path(scratch) / f"{d.user.name}.trials"),
                    "out": str(Path(scratch) / f"{d.user.name}.json")}
            spec_path = Path(scratch) / f"{d.user.name}.spec.json"
            spec_path.write_text(json.dumps(spec))
            log = open(Path(scratch) / f"{d.user.name}.log", "w")  # noqa: SIM115 - open while the study runs
            procs.append((d, spec, log, subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--optuna-child", str(spec_path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)))
        try:
            for d, _, _, proc in procs:  # warm: every study has imported everything
                line = proc.stdout.readline()
                if line.strip() != "ready":
                    raise RuntimeError(f"optuna process of {d.user.name} did not start: {line!r}")
            load = LoadSampler()
            t0 = time.time()
            for _, _, _, proc in procs:
                proc.stdin.write(f"{t0!r}\n")
                proc.stdin.flush()
            last_say = 0.0
            while any(p.poll() is None for *_, p in procs):
                time.sleep(setup.poll)
                now = time.time() - t0
                load.sample()
                if now - last_say >= 5 * setup.poll:
                    trained = sum(_count_lines(s["trials"]) for _, s, _, _ in procs)
                    alive = sum(p.poll() is None for *_, p in procs)
                    say(f"  optuna_per_user: {now:6.1f} s  {alive} studies running  arms trained {trained}  "
                        f"load {os.getloadavg()[0]:.1f}")
                    last_say = now
                if now > setup.budget + 120:  # a study past its budget by this much is stuck
                    break
            results: Results = {}
            final: dict[str, float] = {}
            jobs: dict[str, list[list[Any]]] = {}
            errors = []
            ends = []
            for d, spec, log, proc in procs:
                name = d.user.name
                out = Path(spec["out"])
                if not out.exists():
                    errors.append(f"{name}: no result (exit {proc.poll()}): {Path(log.name).read_text()[-500:]}")
                    results[name], final[name], jobs[name] = [], 0.0, []
                    continue
                got = json.loads(out.read_text())
                results[name] = [(t, a) for t, _, a, _ in got["trained"] if t <= setup.budget]
                final[name] = got["final_accuracy"]
                jobs[name] = got["trained"]
                ends.append(got["end"])
            end = min(max(ends, default=setup.budget), setup.budget)
            for *_, proc in procs:
                proc.wait(30)
            return {"cpu_seconds": round(children_cpu_seconds() - cpu, 1),
                    "results": results, "final_accuracy": final, "jobs": jobs, "end": round(end, 3),
                    "load": load.summary(), "errors": errors,
                    "finished": all(Path(s["out"]).exists() and json.loads(Path(s["out"]).read_text())["complete"]
                                    for _, s, _, _ in procs)}
        finally:
            for _, _, log, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
                log.close()


def _count_lines(path: str) -> int:
    try:
        return sum(1 for _ in open(path))
    except FileNotFoundError:
        return 0


def optuna_child(spec_path: str) -> None:
    """One user's own Optuna study (run as ``--optuna-child SPEC``): import,
    say ``ready``, read the arm's start time, wait for her arrival, feed her
    store, optimise until every arm is tried or the budget is spent, score
    the best trial's model on her held-out data, write the result."""
    spec = json.loads(Path(spec_path).read_text())
    os.nice(spec["nice"])
    import optuna

    from ease_jupyter import datasets
    from ease_jupyter.schema import check_data, format_program, program_from_shapes
    from ease_jupyter.service import models
    from ease_jupyter.service.candidates import arm_specs
    from ease_jupyter.service.mop import TorchJobs, run_torch_job
    from ease_jupyter.service.runner import grid_engine, run_sklearn_job
    from ease_jupyter.store import JobStatus, open_store
    from ease_jupyter.zoo import Engine

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    d = load_user(next(u for u in users(spec["quick"]) if u.name == spec["user"]))
    store, blobs = open_store("memory://")
    owner = store.create_user(d.user.name, None)
    task = store.create_task(owner.id, d.user.task,
                             format_program(program_from_shapes(list(d.X.shape[1:]), [d.n_classes])))
    arms = arm_specs(task, torch_epochs=spec["torch_epochs"])
    sk_engine = grid_engine("local")
    torch_engine = (TorchJobs("local", 1).make_engine()
                    if any(s.engine is Engine.TORCH for s in arms.values()) else None)
    print("ready", flush=True)
    line = sys.stdin.readline()
    if not line:  # the benchmark was stopped before the arm began
        os._exit(1)
    t0 = float(line)
    budget = spec["budget"]
    time.sleep(max(0.0, t0 + spec["arrival"] - time.time()))
    datasets.feed(store, blobs, task, d.X[d.fed], d.y[d.fed])
    version = store.latest_dataset_version(task.id)

    trained: dict[str, tuple[float, float, int, float]] = {}  # arm -> (finished, accuracy, job id, started)
    lock = threading.Lock()
    duplicates = [0]
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=spec["seed"]))

    def objective(trial: optuna.Trial) -> float:
        arm = trial.suggest_categorical("model", list(arms))
        if arm in trained:  # a finished arm is never trained again on the same data
            duplicates[0] += 1
            if duplicates[0] >= DUPLICATES_BEFORE_ENQUEUE:
                study.enqueue_trial({"model": next(a for a in arms if a not in trained)})
                duplicates[0] = 0
            return trained[arm][1]
        duplicates[0] = 0
        started = time.time() - t0
        job = store.create_job(task.id, version.id, arm, arms[arm].config())
        if arms[arm].engine is Engine.TORCH:
            job = run_torch_job(store, blobs, torch_engine, job.id, seed=0, partitions=spec["partitions"])
        else:
            job = run_sklearn_job(store, blobs, job.id, sk_engine)
        accuracy = float(job.accuracy) if job.status is JobStatus.SUCCEEDED and job.accuracy is not None else 0.0
        with lock:
            trained[arm] = (time.time() - t0, accuracy, job.id, started)
            with open(spec["trials"], "a") as out:
                out.write(json.dumps([trained[arm][0], arm, accuracy]) + "\n")
        if len(trained) == len(arms):
            study.stop()
        return accuracy

    worker = threading.Thread(target=study.optimize, args=(objective,), daemon=True)
    worker.start()
    worker.join(timeout=max(0.0, t0 + budget - time.time()))
    end = min(time.time() - t0, budget)
    with lock:
        done = {a: v for a, v in trained.items() if v[0] <= budget}
    final = 0.0
    if done:
        _, _, job_id, _ = max(done.values(), key=lambda v: v[1])  # ties: the earlier trial, as best_job does
        checked = check_data(datasets.program_of(task), d.X[d.held])
        final = d.held_out_accuracy(models.predict(store, blobs, task, store.get_job(job_id), checked.X))
    Path(spec["out"]).write_text(json.dumps({
        "trained": [[round(t, 3), a, acc, round(s, 3)] for a, (t, acc, _, s) in sorted(done.items(), key=lambda kv: kv[1][0])],
        "final_accuracy": final, "end": round(end, 3), "complete": len(done) == len(arms),
        "trials": len(study.trials)}))
    sys.stdout.flush()
    os._exit(0)  # a trial past the budget may still be training: stop it with the process


# -- the run -------------------------------------------------------------------------------------
def render_markdown(payload: dict[str, Any]) -> str:
    arms = payload["arms"]
    names = [u["name"] for u in payload["setup"]["users"]]
    lines = [f"# Workload on the live service ({payload['mode']})", "",
             (f"{len(names)} users, {payload['setup']['workers']} workers, torch epochs "
              f"{payload['setup']['torch_epochs']}, budget {payload['setup']['budget_seconds']} s per arm, "
              f"{payload['setup']['repetitions']} repetition(s); {payload['created']}. Load averages per arm are in "
              "the JSON (`machine`); the machine is shared, so ratios are noisy."), "",
             ("| arm | t(0.05) s | t(0.02) s | t(0.01) s | t(0.02) after the last arrival s | mean held-out accuracy "
              "| load (mean) | CPU s |"), "|---|---|---|---|---|---|---|---|"]
    for arm, a in arms.items():
        t = a["time_to_loss"]
        fmt = lambda v: "never" if v is None else f"{v:.1f}"
        load = statistics.mean(r["load"]["mean"] for r in a["runs"])
        cpu = statistics.mean(r.get("cpu_seconds", float("nan")) for r in a["runs"])
        lines.append(f"| {arm} | {fmt(t['0.05'])} | {fmt(t['0.02'])} | {fmt(t['0.01'])} | "
                     f"{fmt(a['time_after_last_arrival']['0.02'])} | "
                     f"{statistics.mean(a['final_accuracy'].values()):.4f} | {load:.1f} | {cpu:.0f} |")
    lines += ["", "| user | task | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
    for u in payload["setup"]["users"]:
        lines.append(f"| {u['name']} | {u['task']} | " + " | ".join(f"{arms[a]['final_accuracy'][u['name']]:.4f}"
                                                                   for a in arms) + " |")
    lines += ["", "Seconds from each user's arrival to her first result:", "",
              "| user | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for u in payload["setup"]["users"]:
        # None: no result in that arm; "–": a payload from before the field was recorded
        waits = ["–" if "first_result_wait" not in arms[a] else arms[a]["first_result_wait"].get(u["name"])
                 for a in arms]
        lines.append(f"| {u['name']} | " + " | ".join("never" if w is None else w if isinstance(w, str) else f"{w:.1f}"
                                                      for w in waits) + " |")
    for key, title in (("cross_user_prior", "The cross-user prior: t(easeml_no_prior) / t(easeml) (above 1: the prior helped)"),
                       ("express_slots", "The express slot: t(easeml_no_express) / t(easeml) (above 1: it helped)")):
        if key in payload:
            lines += ["", f"{title}:", ""]
            for lvl, r in payload[key].items():
                bound = ">= " if r["lower_bound"] else ""
                lines.append(f"- t({lvl}): {bound}{r['ratio']} (per repetition {r['per_repetition']})")
    lines += ["", "Targets:", ""] if payload["targets"] else []
    for name, t in payload["targets"].items():
        if "ratio" in t:
            bound = ">= " if t["lower_bound"] else ""
            low_high = "" if t["interval"] is None else f", 95 % interval {t['interval']['low']}–{t['interval']['high']}"
            reach = t.get("reachable")
            most = "" if reach is None else (f"; the most any arm could show, no arm reaching it before "
                                             f"{payload[f'floor_t{TARGET_LEVEL}']:g} s: {reach['value']} "
                                             f"({reach['low']}–{reach['high']})")
            lines.append(f"- {name}: ratio {bound}{t['ratio']} (target {t['target']}{low_high}, per repetition "
                         f"{t['per_repetition']}; counted from the last arrival {t['ratio_after_last_arrival']}"
                         f"{most}): {t['verdict']}")
        else:
            lines.append(f"- {name}: {'met' if t['met'] else 'missed'} {t['worse'] or ''}")
    return "\n".join(lines) + "\n"


def report_from(path: Path) -> None:
    """Recompute ``path``'s summary and targets from the runs it keeps, and write it and its markdown again."""
    payload = json.loads(path.read_text())
    people = payload["setup"]["users"]
    arrivals = {u["name"]: u["arrival_seconds"] for u in people}
    derived = ("time_to_loss", "curve")  # summarize's own, made again from each run's results
    runs = {arm: [{k: v for k, v in run.items() if k not in derived} for run in a["runs"]]
            for arm, a in payload["arms"].items()}
    payload.update(summarize(runs, list(arrivals), payload["setup"]["budget_seconds"],
                             {u["name"]: u["held_out"] for u in people}, last_arrival=max(arrivals.values()),
                             arrivals=arrivals))
    path.write_text(json.dumps(payload, indent=1))
    path.with_suffix(".md").write_text(render_markdown(payload))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="8 small users, 1 repetition: a few minutes")
    parser.add_argument("--reps", type=int, default=None, help="repetitions of the arms (default 2; 1 quick)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds an arm may run (default 300; 75 quick)")
    parser.add_argument("--workers", type=int, default=WORKERS, help="easeml serve --workers, the same for every arm")
    parser.add_argument("--torch-epochs", type=int, default=None, help="epochs of every torch pick (default 6; 2 quick)")
    parser.add_argument("--max-torch-workloads", type=int, default=None,
                        help="easeml serve --max-torch-workloads (default: --workers, one MOP workload per worker)")
    parser.add_argument("--worker-nice", type=int, default=5, help="niceness of the training processes in every arm")
    parser.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma-separated, from {', '.join(ALL_ARMS)} (default {','.join(ARMS)})")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/workload[_quick].json)")
    parser.add_argument("--smoke", action="store_true",
                        help="3 small quick users arriving 1 s apart, nets of 1 epoch, a 120 s budget (an arm stops when every task is idle), easeml and optuna_per_user only (for tests)")
    parser.add_argument("--report-from", type=Path, default=None, metavar="JSON",
                        help="recompute the summary, targets and markdown of a results JSON written by this script")
    parser.add_argument("--optuna-child", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.optuna_child:
        optuna_child(args.optuna_child)
        return 0
    if args.report_from is not None:
        report_from(args.report_from)
        return 0
    # A stop (SIGTERM) unwinds like Ctrl-C, so the running arm's service and studies are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    quick = args.quick or args.smoke
    arm_names = [a for a in args.arms.split(",") if a]
    if args.smoke and args.arms == ",".join(ARMS):
        arm_names = ["easeml", "optuna_per_user"]
    unknown = sorted(set(arm_names) - set(ALL_ARMS))
    if unknown:
        parser.error(f"--arms: found {', '.join(unknown)}, expected names from {', '.join(ALL_ARMS)}")
    setup = Setup(workers=args.workers, torch_epochs=args.torch_epochs or (1 if args.smoke else 2 if quick else 6),
                  budget=args.budget or (120.0 if args.smoke else 75.0 if quick else 300.0),
                  warmup=3.0 if quick else 5.0, worker_nice=args.worker_nice,
                  torch_workloads=args.max_torch_workloads or args.workers, poll=1.0, quick=quick)
    reps = args.reps or (1 if quick else 2)
    people = [u for u in users(quick) if not args.smoke or u.name in SMOKE_USERS]
    if args.smoke:  # the same users in the same order, arriving closer together
        people = [replace(u, arrival=i * SMOKE_GAP) for i, u in enumerate(people)]
    data = [load_user(u) for u in people]
    out = args.out or RESULTS / f"workload{'_quick' if quick else ''}.json"
    say = lambda text: print(text, flush=True)
    say(f"workload: {len(data)} users, {setup.workers} workers, arms {', '.join(arm_names)}, {reps} repetition(s), "
        f"budget {setup.budget:.0f} s, load {os.getloadavg()[0]:.1f}")
    runs: dict[str, list[dict[str, Any]]] = {a: [] for a in arm_names}
    order_log = []
    started = time.time()
    for rep in range(reps):
        order = arm_names if rep % 2 == 0 else arm_names[::-1]  # alternate, so drift in load hits both ends
        order_log.append(order)
        for arm in order:
            say(f"repetition {rep + 1}/{reps}: {arm}")
            run = (run_optuna_arm(data, setup, rep, say) if arm == "optuna_per_user"
                   else run_service_arm(arm, data, setup, say))
            runs[arm].append(run)
            say(f"  {arm}: ended at {run['end']:.1f} s, finished: {run['finished']}, load {run['load']}"
                + (f", errors: {run['errors']}" if run["errors"] else ""))
    import optuna

    payload = {
        "benchmark": "workload", "mode": "smoke" if args.smoke else "quick" if quick else "full",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(time.time() - started, 1),
        "setup": {
            "users": [{"name": d.user.name, "task": d.user.task, "kind": d.user.kind, "arrival_seconds": d.user.arrival,
                       "description": d.user.description, "shape": list(d.X.shape[1:]), "classes": d.n_classes,
                       "fed": len(d.fed), "held_out": len(d.held)} for d in data],
            "workers": setup.workers, "torch_epochs": setup.torch_epochs, "budget_seconds": setup.budget,
            "warmup_seconds": setup.warmup, "worker_nice": setup.worker_nice, "repetitions": reps,
            "max_torch_workloads": setup.torch_workloads,
            "arm_order": order_log, "policies": {a: POLICY[a] for a in arm_names if a in POLICY},
            "serve_flags": {a: list(SERVE_FLAGS[a]) for a in arm_names if a in SERVE_FLAGS},
            "optuna": {"version": optuna.__version__, "sampler": "TPESampler(seed=1000*rep+user index), defaults",
                       "trial": "one arm (service.candidates.arm_specs), trained by the service's job code"},
        },
        "definitions": {
            "loss": "user u at t: ref_u - best validation accuracy among her jobs finished by t (0 before the first); "
                    "ref_u = best validation accuracy of any job of any arm and repetition on her task; average over "
                    "users; t in seconds since the arm's start",
            "time_to_loss": "first t with average loss <= level; mean over repetitions; null if never (censored)",
            "final_accuracy": "accuracy on the user's held-out 10% of the model the arm serves her at its end; "
                              "mean over repetitions",
        },
        **summarize(runs, [d.user.name for d in data], setup.budget, {d.user.name: len(d.held) for d in data},
                    last_arrival=max(d.user.arrival for d in data),
                    arrivals={d.user.name: d.user.arrival for d in data}),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "load_per_arm": {a: [r["load"] for r in rs] for a, rs in runs.items()},
                    "note": "a shared machine: the 1-minute load average includes other people's work, so the "
                            "ratios are noisy"},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1))
    out.with_suffix(".md").write_text(render_markdown(payload))
    say(render_markdown(payload))
    say(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
