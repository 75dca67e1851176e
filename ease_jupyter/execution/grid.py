"""Seneca-style grid evaluation for models that cannot hop (Seneca §II-III).

Models fitted in one call (scikit-learn) cannot be trained as MOP units, so
they are evaluated the way Seneca evaluates a user's function on AWS Lambda:

* the search space is the Cartesian product of the user's option lists;
* the data is split automatically into 80 % train / 20 % test (stratified
  for classification, seeded), unless a split is given;
* every combination is fitted and scored concurrently on the engine (Dask,
  or the local engine), as independent unpinned tasks;
* the answer is the best config, its score and its fitted model.

Memory auto-sizing (Seneca Alg. 1, see ``ease_jupyter.execution.memory``):
with ``memory="auto"`` a typical config (the middle of the grid) runs first
as a probe at a fixed, generous reservation, its peak memory is measured,
and every other task then reserves only what the probe needed (times a
safety factor) from the workers' ``MEMORY`` resource, so more tasks fit on a
worker at once. The :class:`~ease_jupyter.execution.memory.CostReport`
compares the reserved GB·s with what the fixed reservation would have cost.

GPU workers. A scikit-learn fit uses no GPU, so while the engine has CPU
workers the tasks run on those only (``Engine.submit(..., workers=...)``)
and never take the slot of a GPU worker (one per GPU, for the MOP units);
a pool of GPU workers only runs them there.

Scores follow ``sklearn_fit``: accuracy for classification, R² clipped to
[0, 1] for regression. A config whose fit raises gets a NaN score and its
error; it never stops the others.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ease_jupyter.errors import ClusterUnavailableError, EaseMLError
from ease_jupyter.execution.engine.base import MEMORY, Engine, UnitDone, UnitFailed, UnitLost, cpu_workers
from ease_jupyter.execution.memory import (
    STEP,
    CostReport,
    cost_report,
    measure_peak,
    reservation,
    seneca_size,
)
from ease_jupyter.execution.sklearn_fit import fit_and_score

__all__ = ["GridPoint", "GridResult", "cartesian", "grid_search", "split_80_20"]

#: Times one grid task is submitted again after it was lost, for each of two
#: reasons. Its shared data went with a worker (then the data is shared again
#: first): a task that loses it more often fails the grid with
#: ``ClusterUnavailableError`` (the job is retried later). The workers it was
#: kept to all died while it ran, other workers live: a task that loses them
#: more often is taken to kill its workers (a crash, its memory), which is the
#: model's failure (``EaseMLError``, the arm is scored 0). Losing its workers
#: with no worker left at all (the scheduler gone) is the cluster's:
#: ``ClusterUnavailableError`` at once.
MAX_LOST = 3


@dataclass(frozen=True)
class GridPoint:
    """One evaluated combination."""

    params: Mapping[str, Any]
    score: float
    train_score: float
    fit_seconds: float
    task_seconds: float  # wall time of the whole task on its worker
    reserved_bytes: int | None
    peak_bytes: int | None = None  # measured for the probe only
    error: str | None = None


@dataclass
class GridResult:
    """The best config, its score and fitted model, and every point."""

    best_params: dict[str, Any]
    best_score: float
    best_model: Any = field(repr=False)
    points: list[GridPoint]
    cost: CostReport | None
    n_train: int
    n_test: int
    seconds: float


def cartesian(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Seneca's search space: every combination of the option lists, the last
    key varying fastest.

    Raises:
        EaseMLError: an empty grid, or an option with no values.
    """
    if not isinstance(grid, Mapping) or not grid:
        raise EaseMLError(f"grid: found {grid!r}, expected a non-empty mapping option -> list of values")
    keys = list(grid)
    values = []
    for k in keys:
        v = grid[k]
        if isinstance(v, (str, bytes, Mapping)) or not (hasattr(v, "__len__") and hasattr(v, "__iter__")):
            raise EaseMLError(f"grid[{k!r}]: found {v!r}, expected a list of values")
        if len(v) == 0:
            raise EaseMLError(f"grid[{k!r}]: found an empty list, expected at least one value")
        values.append(list(v))
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def split_80_20(X: Any, y: Any, *, test_size: float = 0.2, classification: bool = True, seed: int = 0):
    """Seneca's automatic split: 80 % train, 20 % test, seeded; stratified
    when every class has at least two examples."""
    from sklearn.model_selection import train_test_split

    X, y = _rows(X), np.asarray(y)
    if len(X) != len(y):
        raise EaseMLError(f"y: found {len(y)} labels, expected one per example of X ({len(X)})")
    if len(X) < 2:
        raise EaseMLError(f"X: found {len(X)} examples, expected at least 2 to split")
    if not 0 < test_size < 1:
        raise EaseMLError(f"test_size: found {test_size!r}, expected a fraction in (0, 1)")
    stratify = None
    if classification and y.ndim == 1:
        _, counts = np.unique(y, return_counts=True)
        n_test = math.ceil(test_size * len(y))
        if counts.min() >= 2 and n_test >= len(counts) and len(y) - n_test >= len(counts):
            stratify = y
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=test_size, random_state=seed, stratify=stratify)
    return X_tr, y_tr, X_te, y_te


def _rows(data: Any) -> Any:
    """Examples as the estimators take them: a DataFrame as it is (a table
    task's pipeline selects its columns by name), anything else as an array."""
    return data if type(data).__module__.startswith("pandas") else np.asarray(data)


def _grid_workers(resources: Mapping[str, Mapping[str, float]], fan_out: int | None = None) -> list[str] | None:
    """The workers a grid task may run on (worker -> declared resources): the
    CPU workers when there are GPU workers too, else any (None); with
    ``fan_out``, the first that many of them (by name, so every task of one
    grid gets the same ones; the live ones when some were lost)."""
    cpus = cpu_workers(resources)
    allowed = cpus if cpus and len(cpus) < len(resources) else None
    if fan_out is None or fan_out >= len(allowed if allowed is not None else resources):
        return allowed
    return sorted(allowed if allowed is not None else resources)[:fan_out]


# -- model factories (picklable values, shipped to workers) --------------------------


@dataclass(frozen=True)
class _FromEstimator:
    estimator: Any

    def __call__(self, params: Mapping[str, Any]) -> Any:
        from sklearn.base import clone

        return clone(self.estimator).set_params(**params)


@dataclass(frozen=True)
class _FromCandidate:
    name: str
    build: Callable[[Any], Any]
    option: str | None

    def __call__(self, params: Mapping[str, Any]) -> Any:
        from ease_jupyter.zoo import ModelConfig

        own = {k: v for k, v in params.items() if k == self.option}
        rest = {k: v for k, v in params.items() if k != self.option}
        est = self.build(ModelConfig.of(self.name, own))
        prefix = getattr(self.build, "params_prefix", "")  # a builder that wraps the estimator names its step
        return est.set_params(**{prefix + k: v for k, v in rest.items()}) if rest else est


def _factory(model: Any) -> tuple[Callable[[Mapping[str, Any]], Any], bool | None, dict[str, list[Any]]]:
    """(factory, classification or None if unknown, the candidate's default grid)."""
    if hasattr(model, "build") and hasattr(model, "engine") and hasattr(model, "configs"):
        from ease_jupyter.zoo import Engine as ZooEngine, Workload

        if model.engine is not ZooEngine.SKLEARN:
            raise EaseMLError(f"model: found torch candidate {model.name!r}, expected a scikit-learn one (torch models train as MOP units)")
        option = getattr(model.build, "option", None)
        default: dict[str, list[Any]] = {}
        for cfg in model.configs:
            for k, v in cfg.params:
                default.setdefault(k, [])
                if v not in default[k]:
                    default[k].append(v)
        return _FromCandidate(model.name, model.build, option), model.workload is Workload.FLAT_CLASSIFICATION, default
    if hasattr(model, "fit") and hasattr(model, "get_params"):
        from sklearn.base import is_classifier

        return _FromEstimator(model), bool(is_classifier(model)), {}
    raise EaseMLError(f"model: found {type(model).__name__}, expected a scikit-learn estimator or a zoo Candidate")


def _fit_task(make: Callable[[Mapping[str, Any]], Any], params: Mapping[str, Any], data: tuple, classification: bool, probe: bool) -> dict[str, Any]:
    """One grid point on a worker: build, fit, score (optionally measured)."""
    started = time.perf_counter()
    X_tr, y_tr, X_te, y_te = data
    out: dict[str, Any] = {"params": dict(params), "peak": None, "error": None}
    try:
        est = make(params)
        if probe:
            p = measure_peak(fit_and_score, est, X_tr, y_tr, X_te, y_te, classification=classification)
            res, out["peak"] = p.result, p.peak_bytes
        else:
            res = fit_and_score(est, X_tr, y_tr, X_te, y_te, classification=classification)
        out.update(score=res.score, train_score=res.train_score, fit_seconds=res.fit_seconds, model=res.model)
    except Exception as error:  # noqa: BLE001 - one bad config must not stop the grid
        out.update(score=float("nan"), train_score=float("nan"), fit_seconds=0.0, model=None,
                   error=f"{type(error).__name__}: {error}")
    out["task_seconds"] = time.perf_counter() - started
    return out


def grid_search(
    model: Any,
    grid: Mapping[str, Sequence[Any]] | None,
    X: Any,
    y: Any,
    *,
    split: tuple[Any, Any, Any, Any] | None = None,
    test_size: float = 0.2,
    classification: bool | None = None,
    engine: Engine | None = None,
    memory: str | int | None = "auto",
    fixed_bytes: int | None = None,
    safety: float = 1.5,
    seed: int = 0,
    timeout: float | None = None,
    fan_out: int | None = None,
) -> GridResult:
    """Evaluate every combination of ``grid`` for ``model`` and return the best.

    Args:
        model: a scikit-learn estimator (options set with ``set_params``), or
            a zoo ``Candidate`` with ``engine=SKLEARN`` (its tuned option goes
            to the builder, other options to ``set_params``).
        grid: option -> list of values; None for a candidate's own grid.
        X, y: the data; split 80/20 (``test_size``) unless ``split`` gives
            ``(X_train, y_train, X_test, y_test)``.
        classification: accuracy vs R²; default: from the model.
        engine: where tasks run; default: a local engine with two workers,
            closed at the end.
        memory: ``"auto"`` (probe, then size, Seneca Alg. 1), ``"fixed"``
            (every task reserves ``fixed_bytes``), a number of bytes per task,
            or None (no reservation).
        fixed_bytes: the generous reservation; default: the smallest
            worker's whole ``MEMORY``.
        safety: the probe's peak is multiplied by this before rounding up to
            64 MB.
        seed: the split's seed.
        timeout: seconds for the whole grid (None: no limit).
        fan_out: the most workers the grid's tasks run on (the
            auto-provisioner's ``workers``; None: every worker it may use).

    Returns:
        A :class:`GridResult`; ties go to the earlier combination.

    Raises:
        EaseMLError: bad arguments, or every combination failed.
        TimeoutError: ``timeout`` passed first.
    """
    make, is_clf, default_grid = _factory(model)
    points_params = cartesian(grid if grid is not None else default_grid)
    classification = is_clf if classification is None else bool(classification)
    if classification is None:
        raise EaseMLError("classification: found None, expected True or False (the model does not say)")
    if split is None:
        X_tr, y_tr, X_te, y_te = split_80_20(X, y, test_size=test_size, classification=classification, seed=seed)
    else:
        if len(split) != 4:
            raise EaseMLError(f"split: found {len(split)} items, expected (X_train, y_train, X_test, y_test)")
        X_tr, y_tr, X_te, y_te = (_rows(a) for a in split)
        if len(X_tr) != len(y_tr) or len(X_te) != len(y_te) or not len(X_tr) or not len(X_te):
            raise EaseMLError("split: found mismatched or empty parts, expected X_train/y_train and X_test/y_test of equal, non-zero lengths")
    if memory not in ("auto", "fixed", None) and not (isinstance(memory, int) and not isinstance(memory, bool) and memory > 0):
        raise EaseMLError(f"memory: found {memory!r}, expected 'auto', 'fixed', None or a positive number of bytes")

    own_engine = engine is None
    if engine is None:
        from ease_jupyter.execution.engine.local import LocalEngine

        engine = LocalEngine(2, torch_threads=None)
    started = time.perf_counter()
    end = None if timeout is None else time.monotonic() + timeout
    try:
        if fan_out is not None and (isinstance(fan_out, bool) or not isinstance(fan_out, int) or fan_out < 1):
            raise EaseMLError(f"fan_out: found {fan_out!r}, expected a number of workers >= 1, or None for all")
        allowed = _grid_workers(engine.worker_resources(), fan_out)
        worker_mem = [float(r.get(MEMORY, 0.0)) for w, r in engine.worker_resources().items()
                      if allowed is None or w in allowed]
        fixed = int(fixed_bytes if fixed_bytes is not None else (min(worker_mem) if worker_mem else 0))
        if memory in ("auto", "fixed") and fixed <= 0:
            raise EaseMLError("fixed_bytes: found no MEMORY resource on the workers, expected workers that declare MEMORY or memory=None")
        parts = (X_tr, y_tr, X_te, y_te)
        shared = [engine.share(parts)]  # its copy may go with a worker: then shared again
        submitted: dict[int, tuple[int | None, bool]] = {}  # point -> (reservation, probe)
        used: dict[int, int] = {}  # point -> which share its last submission read

        def submit(i: int, reserve: int | None, probe: bool) -> str:
            res = {MEMORY: reserve} if reserve else None
            submitted[i], used[i] = (reserve, probe), len(shared) - 1
            return engine.submit(_fit_task, make, points_params[i], shared[-1], classification, probe,
                                 resources=res, workers=_grid_workers(engine.worker_resources(), fan_out))

        def collect(handles: dict[str, int]) -> dict[int, dict[str, Any]]:
            out: dict[int, dict[str, Any]] = {}
            lost: Counter = Counter()  # point -> times its data was lost
            killed: Counter = Counter()  # point -> times the workers it ran on died
            while handles:
                left = None if end is None else max(0.0, end - time.monotonic())
                events = engine.wait_all(handles, timeout=left)
                again = {}
                for h, ev in events.items():
                    i = handles[h]
                    if isinstance(ev, UnitLost) and ev.reason == "worker-lost":
                        # the workers it was kept to all died: it runs again on the live ones
                        if not engine.workers():
                            raise ClusterUnavailableError(
                                f"grid task {points_params[i]}: no worker of the cluster is left to run it; "
                                "the job is retried later")
                        if killed[i] >= MAX_LOST:
                            raise EaseMLError(
                                f"grid task {points_params[i]}: the worker running it died {killed[i] + 1} "
                                "times; the model may crash its worker or run out of memory")
                        killed[i] += 1
                        again[submit(i, *submitted[i])] = i
                    elif isinstance(ev, UnitLost):
                        # its data was lost with a worker: shared again, and it runs again
                        if lost[i] >= MAX_LOST:
                            raise ClusterUnavailableError(
                                f"grid task {points_params[i]}: a worker of the cluster was lost "
                                f"{lost[i] + 1} times while it ran; the job is retried later")
                        lost[i] += 1
                        if ev.reason == "data-lost" and used[i] == len(shared) - 1:
                            shared.append(engine.share(parts))
                        again[submit(i, *submitted[i])] = i
                    elif isinstance(ev, UnitFailed) and isinstance(ev.error, EaseMLError):
                        raise EaseMLError(f"grid task {points_params[i]}: {ev.error}") from ev.error
                    elif not isinstance(ev, UnitDone):
                        raise EaseMLError(f"grid task {points_params[i]}: {ev}")
                    else:
                        out[i] = ev.result
                handles = again
            return out

        results: dict[int, dict[str, Any]] = {}
        reserve: int | None
        probe_idx = len(points_params) // 2  # the "typical payload"
        probe_peak, probe_seconds = 0, 0.0
        if memory == "auto":
            results.update(collect({submit(probe_idx, fixed, True): probe_idx}))
            probe = results[probe_idx]
            probe_peak, probe_seconds = int(probe["peak"] or 0), float(probe["task_seconds"])
            start = reservation(probe_peak, safety=safety)
            reserve, _ = seneca_size(min(start, fixed), None, seconds=probe_seconds, step=STEP, cap=fixed)
        elif memory == "fixed":
            reserve = fixed
        else:
            reserve = memory  # bytes or None
        rest = {submit(i, reserve, False): i for i in range(len(points_params)) if i not in results}
        results.update(collect(rest))
    finally:
        if own_engine:
            engine.close()

    points = []
    for i, params in enumerate(points_params):
        r = results[i]
        points.append(GridPoint(
            params=dict(params),
            score=float(r["score"]),
            train_score=float(r["train_score"]),
            fit_seconds=float(r["fit_seconds"]),
            task_seconds=float(r["task_seconds"]),
            reserved_bytes=(fixed if (memory == "auto" and i == probe_idx) else reserve),
            peak_bytes=r["peak"],
            error=r["error"],
        ))
    scored = [i for i, p in enumerate(points) if not math.isnan(p.score)]
    if not scored:
        raise EaseMLError(f"grid: every combination failed, expected at least one to fit (first error: {points[0].error})")
    best = max(scored, key=lambda i: (points[i].score, -i))
    cost = None
    if memory == "auto":
        cost = cost_report(
            reserve or 0, fixed, probe_peak, probe_seconds,
            [p.task_seconds for i, p in enumerate(points) if i != probe_idx], worker_mem,
        )
    return GridResult(
        best_params=dict(points_params[best]),
        best_score=points[best].score,
        best_model=results[best]["model"],
        points=points,
        cost=cost,
        n_train=len(X_tr),
        n_test=len(X_te),
        seconds=time.perf_counter() - started,
    )
