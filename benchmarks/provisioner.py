"""Benchmark of the profiler and the auto-provisioner (ACAI §3.3.2, §4.2.2-4.2.4,
§5.1): how well the profiler predicts job runtimes, what the provisioner's
choice of resources buys, and what better costs do for model selection.

    python benchmarks/provisioner.py            # full: ~10-15 min on 2 busy cores
    python benchmarks/provisioner.py --quick    # a few minutes: fewer tasks, sizes and replays

Writes benchmarks/results/provisioner.json (--quick: provisioner_quick.json,
git-ignored). Every figure below is MEASURED on this machine unless its key
says ``simulated``; the machine's load average (``os.getloadavg``) is
recorded before and after each part, since the cores are shared.

(a) ``median_abs_log_error``: a log of measured jobs: each zoo scikit-learn
    candidate (``ease_jupyter.zoo.candidates``) trained on one config or on
    its whole grid, on subsamples of tasks made from the data sets
    scikit-learn ships (digits, breast_cancer, wine, iris, diabetes) and
    generated ones, and the zoo's torch nets on 8x8x1 images (the digits and
    a generated image task) at 1 and 2 epochs, every job at 1 and 2 threads
    (``threadpoolctl`` limits, ``torch.set_num_threads``). Leave one task
    out: ``selection.profiler.Profiler`` is fitted on the other tasks' jobs
    and predicts the held-out task's; the FLOPs proxy is the service's
    (``service/loop/costs.py``, ``Costs.flops_seconds``): the candidate's
    FLOPs (``Candidate.cost``) x grid points at 1 GFLOP/s, times the median
    measured seconds per predicted second of the training jobs of its engine.
    Reported: the median |log(predicted / actual)| of each over all held-out
    jobs, with a bootstrap interval. Target: the profiler's at most half the
    proxy's. ``synthetic_law``: the profiler refitted on the same jobs'
    features with seconds drawn from a known power law, and the exponents it
    recovers.

(b) ``autoprovision``: ACAI's experiment (§5.1). The job: the zoo's LeNet on
    the digits images (1797 x 8x8x1) at fixed epochs, one training run per
    config of a small grid. Measured at each configuration this machine can
    run honestly: threads 1 and 2 in one worker, and 2 warm worker
    processes of one thread each (the grid's configs split between them);
    each with two memory reservations: Seneca's sizing of the job
    (``execution.memory.measure_peak``, ``reservation``, ``seneca_size``)
    and the baseline's, all of one worker's memory (ACAI's n1-standard-2:
    7.5 GB). The reservation is not enforced in-process, so it changes the
    price, not the runtime. The baseline is one thread, one worker, the
    whole worker's memory. The profiler is fitted on the measured runs and
    ``selection.provisioner.choose`` picks, at ``DEFAULT_PRICES``, (i) the
    least runtime at cost <= the baseline's and (ii) the least cost at
    runtime <= the baseline's; each choice is judged by its MEASURED runtime
    and cost. Targets: speed-up >= 1.3x, cost cut >= 25 % (ACAI: 1.7x, 39 %).
    ``simulated``: the same choice over a larger space (threads 1..16,
    workers 1..8, several memory sizes, a grid of 8 configs) whose runtimes
    are a model built from the measured curves: an Amdahl fit of the
    measured thread scaling, and the measured two-worker efficiency applied
    to the ceil(configs / workers) make-span. SIMULATED, not measured.

(c) ``selection``: an ``easeml simulate``-style replay of the default rule
    (``selection.simulator.default_policy``) on the measured scikit-learn
    matrix of ``benchmarks/selection.py`` (28 tasks x 15 configs: held-out
    accuracy and measured fit seconds, ``benchmarks/data/sklearn_*.csv``).
    Time always advances by the MEASURED seconds; what differs is the cost
    the selector is told: the profiler's prediction (fitted on the job log
    of (a) without the task's source data set) or the FLOPs proxy's (its
    correction from the same jobs); a third arm, a reference, is told the
    measured seconds themselves. ``t_0.02_*``: the mean time to average loss
    0.02 over repetitions pooled over seeds (a repetition that misses
    counts its budget: a lower bound, with the share reached), with 95 %
    bootstrap intervals, and the paired ratio proxy / predicted.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import multiprocessing as mp
import os
import platform
import site
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ease_jupyter.selection.profiler import FEATURE_NAMES, JobFeatures, Profiler
from ease_jupyter.selection.provisioner import (
    DEFAULT_PRICES,
    GIB,
    ResourceConfig,
    choose,
)

RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT / "benchmarks" / "data"
FLOPS_PER_SECOND = 1e9  # the proxy's assumed speed before its correction (service/loop/costs.py)
WORKER_MEMORY = int(7.5 * GIB)  # the baseline: all of one n1-standard-2 worker's memory (ACAI §5.1)
BATCH = 64
LEVEL = 0.02
TARGETS = {"error_ratio_at_most": 0.5, "speedup_at_least": 1.3, "cost_cut_at_least": 0.25}


@dataclass(frozen=True)
class Plan:
    """How much to measure and replay."""

    flat_tasks: tuple[str, ...]
    fractions: tuple[float, ...]  # subsample sizes of each task
    threads: tuple[int, ...] = (1, 2)
    families: tuple[str, ...] | None = None  # scikit-learn families (None: the zoo's all)
    torch_tasks: tuple[str, ...] = ("digits_images", "noise_images")
    torch_families: tuple[str, ...] = ("lenet",)
    torch_fractions: tuple[float, ...] = (0.3, 1.0)
    torch_epochs: tuple[int, ...] = (1, 2)
    acai_epochs: int = 10
    acai_configs: int = 2  # the ACAI job's grid: configs split between workers
    acai_repeats: int = 2
    seeds: int = 2
    reps: int = 10
    n_test: int = 10
    budget: float = 0.3  # share of the test users' total measured cost a replay may spend


FULL = Plan(flat_tasks=("digits", "breast_cancer", "wine", "iris", "diabetes", "blobs", "moons"),
            fractions=(0.15, 0.4, 1.0), torch_fractions=(0.25, 0.5, 1.0), torch_families=("lenet", "mobilenet_small"),
            acai_epochs=20, acai_repeats=3, seeds=3, reps=15)
QUICK = Plan(flat_tasks=("digits", "breast_cancer", "wine", "diabetes", "blobs"), fractions=(0.3, 1.0),
             acai_epochs=10, acai_repeats=2, seeds=2, reps=8)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------------------- data
def flat_task(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A classification task (X, y) from scikit-learn's bundled or generated data."""
    from sklearn import datasets

    if name == "diabetes":
        d = datasets.load_diabetes()
        return d.data, (d.target > np.median(d.target)).astype(int)
    if name == "blobs":
        return datasets.make_classification(n_samples=3000, n_features=30, n_informative=10, n_classes=4,
                                            random_state=0)
    if name == "moons":
        X, y = datasets.make_moons(n_samples=2500, noise=0.3, random_state=0)
        return X, y
    if name == "tiny":
        return datasets.make_classification(n_samples=200, n_features=5, n_classes=2, random_state=0)
    loader = {"digits": datasets.load_digits, "breast_cancer": datasets.load_breast_cancer,
              "wine": datasets.load_wine, "iris": datasets.load_iris}[name]
    d = loader()
    return d.data, d.target


def image_task(name: str) -> tuple[np.ndarray, np.ndarray]:
    """An 8x8x1 image task (float32 images, int64 labels)."""
    from sklearn import datasets

    if name == "digits_images":
        d = datasets.load_digits()
        return (d.images / 16.0).astype(np.float32)[..., None], d.target.astype(np.int64)
    if name == "noise_images":
        X, y = datasets.make_classification(n_samples=1200, n_features=64, n_informative=20, n_classes=4,
                                            random_state=0)
        return X.reshape(-1, 8, 8, 1).astype(np.float32), y.astype(np.int64)
    raise ValueError(f"image task: found {name!r}, expected digits_images or noise_images")


def subsample(X: np.ndarray, y: np.ndarray, fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    n = max(round(len(y) * fraction), 20)
    idx = np.random.default_rng(seed).permutation(len(y))[:n]
    return X[idx], y[idx]


def zoo_candidates(shape_in: tuple[int, ...], classes: int):
    from ease_jupyter.schema import program_from_shapes
    from ease_jupyter.zoo import candidates

    return candidates(program_from_shapes(shape_in, (max(classes, 2),)))


# ---------------------------------------------------------------------------- (a) the job log
def _threads(threads: int):
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads)


def fit_flat(cand, configs, X, y, threads: int) -> float:
    """Seconds to fit ``configs`` of a scikit-learn candidate one after another at ``threads``."""
    with _threads(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        for cfg in configs:
            est = cand.build(cfg)
            if "n_jobs" in est.get_params():
                est.set_params(n_jobs=threads)
            est.fit(X, y)
        return time.perf_counter() - start


def train_torch(cand, configs, X, y, epochs: int, threads: int) -> float:
    """Seconds to train ``configs`` of a zoo net for ``epochs`` (SGD, batches of 64) at ``threads``."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    start = time.perf_counter()
    for cfg in configs:
        net = cand.build(cfg)
        net.adapt(xt, yt)
        opt = net.make_optimizer(float(cfg.options.get("lr", 0.01)))
        for _ in range(epochs):
            order = torch.randperm(len(yt))
            for b in range(0, len(yt), BATCH):
                idx = order[b:b + BATCH]
                net.train_step(opt, xt[idx], yt[idx])
    return time.perf_counter() - start


def job_log(plan: Plan, progress=None) -> list[dict]:
    """Measure every job of the plan: one record per (task, family, size, points, epochs, threads)."""
    work = []
    for task in plan.flat_tasks:
        X, y = flat_task(task)
        k = len(np.unique(y))
        for cand in zoo_candidates((X.shape[1],), k):
            if cand.engine.value != "sklearn" or (plan.families is not None and cand.name not in plan.families):
                continue
            for frac in plan.fractions:
                for points in sorted({1, len(cand.configs)}):
                    for threads in plan.threads:
                        work.append(("sklearn", task, cand, frac, points, 1, threads))
    for task in plan.torch_tasks:
        X, y = image_task(task)
        for cand in zoo_candidates(X.shape[1:], len(np.unique(y))):
            if cand.name not in plan.torch_families:
                continue
            for frac in plan.torch_fractions:
                for epochs in plan.torch_epochs:
                    for threads in plan.threads:
                        work.append(("torch", task, cand, frac, 1, epochs, threads))
    bar = progress(total=len(work), desc="job log", unit="job") if progress else None
    records, cache = [], {}
    for engine, task, cand, frac, points, epochs, threads in work:
        if task not in cache:
            cache[task] = flat_task(task) if engine == "sklearn" else image_task(task)
        X, y = subsample(*cache[task], frac)
        configs = cand.configs[:points]
        if engine == "sklearn":
            seconds = fit_flat(cand, configs, X, y, threads)
            flops = max(cand.cost(len(y)), 1.0) * points
        else:
            seconds = train_torch(cand, configs, X, y, epochs, threads)
            flops = max(cand.cost(len(y), epochs), 1.0) * points
        records.append({"task": task, "family": cand.name, "engine": engine, "n": len(y),
                        "d": int(np.prod(X.shape[1:])), "k": len(np.unique(y)), "points": points,
                        "epochs": epochs, "threads": threads, "flops": float(flops), "seconds": float(seconds)})
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return records


def features(r: dict) -> JobFeatures:
    return JobFeatures(family=r["family"], engine=r["engine"], n=r["n"], d=r["d"], k=r["k"], points=r["points"],
                       epochs=r["epochs"], threads=r["threads"], workers=r.get("workers", 1),
                       memory_bytes=r.get("memory_bytes", 0))


def flops_correction(train: list[dict]) -> dict[str, float]:
    """Per engine, the median measured over proxy seconds of the training jobs
    (an engine without jobs: the median over all), as ``Costs.flops_seconds``."""
    ratio = {e: [r["seconds"] / (r["flops"] / FLOPS_PER_SECOND) for r in train if r["engine"] == e]
             for e in ("sklearn", "torch")}
    pooled = [x for xs in ratio.values() for x in xs]
    return {e: float(np.median(xs or pooled or [1.0])) for e, xs in ratio.items()}


def flops_seconds(r: dict, correction: dict[str, float]) -> float:
    return max(r["flops"] / FLOPS_PER_SECOND * correction[r["engine"]], 1e-3)


def leave_one_task_out(records: list[dict]) -> list[dict]:
    """Each job predicted by the profiler and the proxy fitted on the other tasks' jobs."""
    out = []
    for task in dict.fromkeys(r["task"] for r in records):
        train = [r for r in records if r["task"] != task]
        profiler = Profiler().fit((features(r), r["seconds"]) for r in train)
        correction = flops_correction(train)
        for r in records:
            if r["task"] != task:
                continue
            pred = profiler.predict(features(r))
            out.append({**r, "profiler": pred.seconds if pred.source else None, "source": pred.source,
                        "flops_proxy": flops_seconds(r, correction)})
    return out


def median_ci(values: np.ndarray, seed: int = 0) -> dict:
    from scipy.stats import bootstrap

    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return {"value": float(np.median(v)) if v.size else None, "low": None, "high": None, "n": int(v.size)}
    ci = bootstrap((v,), np.median, n_resamples=2000, method="percentile", random_state=seed).confidence_interval
    return {"value": float(np.median(v)), "low": float(ci.low), "high": float(ci.high), "n": int(v.size)}


def prediction_errors(held: list[dict]) -> dict:
    """Median |log(pred/actual)| of the profiler and the proxy over held-out jobs."""
    rows = [h for h in held if h["profiler"] is not None]
    prof = np.array([abs(math.log(h["profiler"] / h["seconds"])) for h in rows])
    flops = np.array([abs(math.log(h["flops_proxy"] / h["seconds"])) for h in rows])
    per_engine = {}
    for e in ("sklearn", "torch"):
        pe = [abs(math.log(h["profiler"] / h["seconds"])) for h in rows if h["engine"] == e]
        fe = [abs(math.log(h["flops_proxy"] / h["seconds"])) for h in rows if h["engine"] == e]
        if pe:
            per_engine[e] = {"profiler": float(np.median(pe)), "flops": float(np.median(fe)), "jobs": len(pe)}
    return {"profiler": median_ci(prof), "flops": median_ci(flops), "per_engine": per_engine,
            "unpredicted_jobs": len(held) - len(rows), "jobs": len(held)}


SYNTHETIC_LAW = {"log_n": 1.2, "log_points": 1.0, "log_epochs": 1.0, "log_threads": -0.6}


def synthetic_law(records: list[dict], noise: float = 0.05, seed: int = 0) -> dict:
    """The profiler fitted on the log's job features with seconds drawn from a
    known law (SYNTHETIC_LAW, a family scale, log-normal noise): the
    exponents it recovers, and its median error on held-out draws."""
    rng = np.random.default_rng(seed)
    scale = {f: float(rng.uniform(-9, -5)) for f in dict.fromkeys(r["family"] for r in records)}
    idx = {name: i for i, name in enumerate(FEATURE_NAMES)}

    def draw(r: dict) -> float:
        row = features(r).row()
        mean = scale[r["family"]] + sum(b * row[idx[name]] for name, b in SYNTHETIC_LAW.items())
        return float(math.exp(mean + rng.normal(0, noise)))

    fitted = Profiler().fit((features(r), draw(r)) for r in records)
    exps = fitted.exponents()
    errors = []
    for r in records:
        truth = draw(r)
        errors.append(abs(math.log(fitted.predict(features(r)).seconds / truth)))
    return {"law": SYNTHETIC_LAW, "noise_log_sd": noise,
            "recovered": {k: round(exps[k], 4) for k in SYNTHETIC_LAW},
            "median_abs_log_error": float(np.median(errors))}


# ---------------------------------------------------------------------------- (b) ACAI's experiment
def _acai_job(configs: list[int], epochs: int, threads: int) -> float:
    """Train the given configs (indices into LeNet's grid) of the ACAI job; seconds."""
    X, y = image_task("digits_images")
    cand = next(c for c in zoo_candidates(X.shape[1:], 10) if c.name == "lenet")
    grid = [cand.configs[i % len(cand.configs)] for i in configs]
    return train_torch(cand, grid, X, y, epochs, threads)


def _warm(_: int) -> int:
    """Load what the job needs (libraries, data, the zoo), as a warm worker has."""
    _acai_job([0], 0, 1)
    return os.getpid()


def measure_acai(plan: Plan, progress=None) -> dict:
    """Median measured seconds of the ACAI job at each configuration the
    machine can run, and Seneca's memory reservation for it."""
    from ease_jupyter.execution.memory import measure_peak, reservation, seneca_size

    configs = list(range(plan.acai_configs))
    probe = measure_peak(_acai_job, configs[:1], 1, 1)
    start = reservation(probe.peak_bytes)
    seneca, _ = seneca_size(start, seconds=probe.seconds)
    runs: dict[tuple[int, int], list[float]] = {(1, 1): [], (2, 1): [], (1, 2): []}
    bar = progress(total=3 * plan.acai_repeats, desc="ACAI job", unit="run") if progress else None
    # Fresh ("spawn") workers: forking a process whose torch threads are up can hang. They
    # import this file as the module ``provisioner``, whatever name it was loaded under here.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import provisioner as importable

    with mp.get_context("spawn").Pool(2, initializer=site.addsitedir, initargs=(str(Path(__file__).parent),)) as pool:
        pool.map(importable._warm, range(2))  # the workers are up before the clock starts, as a Dask pool's
        for _ in range(plan.acai_repeats):
            for threads in (1, 2):
                runs[(threads, 1)].append(_acai_job(configs, plan.acai_epochs, threads))
                if bar is not None:
                    bar.update(1)
            # two workers, one thread each, each training its share of the grid
            started = time.perf_counter()
            pool.starmap(importable._acai_job, [(configs[w::2], plan.acai_epochs, 1) for w in range(2)])
            runs[(1, 2)].append(time.perf_counter() - started)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return {"seconds": {f"threads={t},workers={w}": float(np.median(v)) for (t, w), v in runs.items()},
            "runs": {f"threads={t},workers={w}": v for (t, w), v in runs.items()},
            "seneca_memory_bytes": int(seneca), "probe_peak_bytes": int(probe.peak_bytes),
            "epochs": plan.acai_epochs, "configs": plan.acai_configs}


def _key(t: int, w: int) -> str:
    return f"threads={t},workers={w}"


def provision(space: list[ResourceConfig], runtime, baseline: ResourceConfig, predict=None,
              max_cpus: int | None = None) -> dict:
    """ACAI's two questions (§5.1) on ``space``: ``predict`` chooses (default:
    ``runtime`` itself), ``runtime`` judges the choice."""
    predict = predict or runtime
    base_s = runtime(baseline)
    base_cost = DEFAULT_PRICES.cost(baseline, base_s)
    fast = choose(space, predict, DEFAULT_PRICES, budget=base_cost, max_cpus=max_cpus)
    cheap = choose(space, predict, DEFAULT_PRICES, deadline=base_s, max_cpus=max_cpus)
    fast_s, cheap_s = runtime(fast.config), runtime(cheap.config)
    cheap_cost = DEFAULT_PRICES.cost(cheap.config, cheap_s)
    return {"baseline": {"config": baseline.json(), "seconds": base_s, "cost": base_cost},
            "at_cost_cap": {"config": fast.config.json(), "seconds": fast_s, "predicted_seconds": fast.seconds,
                            "cost": DEFAULT_PRICES.cost(fast.config, fast_s), "feasible": fast.feasible},
            "at_deadline": {"config": cheap.config.json(), "seconds": cheap_s, "predicted_seconds": cheap.seconds,
                            "cost": cheap_cost, "feasible": cheap.feasible},
            "speedup_at_cost_cap": base_s / fast_s, "cost_cut_at_deadline": 1.0 - cheap_cost / base_cost}


def acai_measured(m: dict) -> dict:
    """The provisioner on the measured space: chosen by the profiler fitted on
    the measured runs, judged by the measured runtimes."""
    memories = (m["seneca_memory_bytes"], WORKER_MEMORY)
    space = [ResourceConfig(threads=t, workers=w, partitions=w, memory_bytes=mem)
             for (t, w) in ((1, 1), (2, 1), (1, 2)) for mem in memories]

    def runtime(c: ResourceConfig) -> float:
        return m["seconds"][_key(c.threads, c.workers)]

    records = [(JobFeatures(family="lenet", engine="torch", n=1797, d=64, k=10, points=m["configs"],
                            epochs=m["epochs"], partitions=c.partitions, threads=c.threads, workers=c.workers,
                            memory_bytes=c.memory_bytes), s)
               for c in space for s in m["runs"][_key(c.threads, c.workers)]]
    profiler = Profiler().fit(records)

    def predicted(c: ResourceConfig) -> float:
        return profiler.predict(JobFeatures(family="lenet", engine="torch", n=1797, d=64, k=10, points=m["configs"],
                                            epochs=m["epochs"], partitions=c.partitions, threads=c.threads,
                                            workers=c.workers, memory_bytes=c.memory_bytes)).seconds

    baseline = ResourceConfig(threads=1, workers=1, memory_bytes=WORKER_MEMORY)
    return {"chosen_by_profiler": provision(space, runtime, baseline, predicted, max_cpus=os.cpu_count()),
            "chosen_by_measurement": provision(space, runtime, baseline, max_cpus=os.cpu_count()),
            "space": [c.json() for c in space], "max_cpus": os.cpu_count()}


SIM_CONFIGS = 8  # the simulated job's grid


def acai_simulated(m: dict) -> dict:
    """SIMULATED: the provisioner over threads 1..16 x workers 1..8 x memory
    sizes, runtimes from the measured curves (module docstring)."""
    s = m["seconds"]
    t1, t2, w2 = s[_key(1, 1)], s[_key(2, 1)], s[_key(1, 2)]
    parallel = min(max(2.0 * (1.0 - t2 / t1), 0.0), 1.0)  # Amdahl: t2/t1 = (1 - p) + p/2
    per_config = t1 / m["configs"]
    worker_eff = min((t1 / w2) / 2.0, 1.0)  # measured 2-worker efficiency on the measured grid

    def runtime(c: ResourceConfig) -> float:
        amdahl = (1.0 - parallel) + parallel / c.threads
        rounds = math.ceil(SIM_CONFIGS / c.workers)
        return per_config * amdahl * rounds / (worker_eff if c.workers > 1 else 1.0)

    memories = sorted({m["seneca_memory_bytes"], GIB, 2 * GIB, 4 * GIB, WORKER_MEMORY})
    space = [ResourceConfig(threads=t, workers=w, partitions=w, memory_bytes=mem)
             for t in range(1, 17) for w in range(1, 9) for mem in memories if t * w <= 16]
    baseline = ResourceConfig(threads=1, workers=1, memory_bytes=WORKER_MEMORY)
    out = provision(space, runtime, baseline, max_cpus=16)
    return {"SIMULATED": True, **out, "model": {"amdahl_parallel_fraction": parallel, "worker_efficiency": worker_eff,
                                                  "configs": SIM_CONFIGS, "space_size": len(space), "max_cpus": 16,
                                                  "memory_sizes_bytes": memories}}


# ---------------------------------------------------------------------------- (c) selection replay
def _selection_module():
    spec = importlib.util.spec_from_file_location("selection_benchmark", ROOT / "benchmarks" / "selection.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ORIGINS = (("digits_4x4", "digits"), ("digits", "digits"), ("cancer", "breast_cancer"), ("wine", "wine"),
           ("iris", "iris"), ("diabetes", "diabetes"))


def origin(user: str) -> str:
    return next(o for prefix, o in ORIGINS if user.startswith(prefix))


def selection_costs(records: list[dict]) -> dict:
    """The measured matrix and, per cell, the profiler's and the proxy's predicted
    seconds, each fitted on the job log without the task's source data set."""
    sel = _selection_module()
    users, models, q = sel.read_csv(DATA / "sklearn_quality.csv")
    _, _, true = sel.read_csv(DATA / "sklearn_cost.csv")
    shapes = {}
    for name, X, y in sel.sklearn_tasks():
        n_test = math.ceil(0.3 * len(y))  # train_test_split(test_size=0.3) keeps the rest for fitting
        shapes[name] = (len(y) - n_test, X.shape[1], len(np.unique(y)))
    predicted, proxy = np.full(q.shape, np.nan), np.full(q.shape, np.nan)
    fits: dict[str, tuple[Profiler, dict]] = {}
    for i, user in enumerate(users):
        o = origin(user)
        if o not in fits:
            train = [r for r in records if r["task"] != o]
            fits[o] = (Profiler().fit((features(r), r["seconds"]) for r in train), flops_correction(train))
        profiler, correction = fits[o]
        n, d, k = shapes[user]
        cands = {c.name: c for c in zoo_candidates((d,), k)}
        for j, key in enumerate(models):
            family = key.split("[")[0]
            r = {"family": family, "engine": "sklearn", "n": n, "d": d, "k": k, "points": 1, "epochs": 1,
                 "threads": 1, "flops": max(cands[family].cost(n), 1.0)}
            pred = profiler.predict(features(r))
            proxy[i, j] = flops_seconds(r, correction)
            predicted[i, j] = max(pred.seconds, 1e-4) if pred.source else proxy[i, j]
    return {"users": users, "models": models, "quality": q, "true": true, "profiler": predicted, "flops": proxy}


def replay(q: np.ndarray, true: np.ndarray, told: np.ndarray, prior, budget: float, seed: int) -> float | None:
    """One default-rule episode on one worker: the selector is told ``told``,
    time advances by ``true``. Returns the time to average loss LEVEL, or None."""
    from ease_jupyter.selection import Selector
    from ease_jupyter.selection.simulator import default_policy

    n, K = q.shape
    names = [str(j) for j in range(K)]
    sel = Selector(names, prior=prior, policy=default_policy(), cost_aware=True, random_state=seed)
    for i in range(n):
        sel.add_user(str(i), costs=told[i])
    a_star, best, t = np.nanmax(q, axis=1), np.zeros(n), 0.0
    while t < budget:
        picks = sel.next_picks(1)
        if not picks:
            return None
        i, j = int(picks[0].user), int(picks[0].model)
        t += float(true[i, j])
        if t > budget:
            return None
        sel.observe(str(i), str(j), float(q[i, j]))
        best[i] = max(best[i], float(q[i, j]))
        if float(np.mean(a_star - best)) <= LEVEL + 1e-12:
            return t
    return None


def selection_effect(costs: dict, plan: Plan, progress=None) -> dict:
    from scipy.stats import bootstrap

    from ease_jupyter.selection import ModelPrior
    from ease_jupyter.selection.stats import ratio_of_means

    q, true = costs["quality"], costs["true"]
    arms = ("profiler", "flops", "true")
    times = {a: [] for a in arms}
    reached = {a: 0 for a in arms}
    budgets = []
    bar = progress(total=plan.seeds * plan.reps, desc="selection replay", unit="rep") if progress else None
    for seed in range(plan.seeds):
        for rep in range(plan.reps):
            rng = np.random.default_rng([seed, rep])
            perm = rng.permutation(q.shape[0])
            test, train = np.sort(perm[:plan.n_test]), perm[plan.n_test:]
            prior = ModelPrior(random_state=int(rng.integers(2**31 - 1))).fit(q[train])
            budget = plan.budget * float(np.sum(true[test]))
            budgets.append(budget)
            for arm in arms:
                hit = replay(q[test], true[test], costs[arm][test], prior, budget, seed=1000 * seed + rep)
                reached[arm] += hit is not None
                times[arm].append(budget if hit is None else hit)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()

    def mean_ci(v):
        v = np.asarray(v)
        ci = bootstrap((v,), np.mean, n_resamples=2000, method="percentile", random_state=0).confidence_interval
        return {"value": float(v.mean()), "low": float(ci.low), "high": float(ci.high), "n": int(v.size)}

    n = plan.seeds * plan.reps
    return {f"t_{LEVEL:g}": {a: mean_ci(times[a]) for a in arms},
            "reached": {a: reached[a] / n for a in arms},
            "ratio_flops_over_profiler": ratio_of_means(times["flops"], times["profiler"]),
            "ratio_flops_over_true": ratio_of_means(times["flops"], times["true"]),
            "cost_error": {a: float(np.median(np.abs(np.log(costs[a] / true)))) for a in ("profiler", "flops")},
            "mean_budget_seconds": float(np.mean(budgets)),
            "protocol": {"seeds": plan.seeds, "reps_per_seed": plan.reps, "n_test": plan.n_test,
                         "budget_share_of_total_cost": plan.budget, "workers": 1,
                         "censoring": "a repetition that misses the level counts its budget (a lower bound)"}}


# ---------------------------------------------------------------------------- main
def run(plan: Plan, progress=None) -> dict:
    doc: dict = {"load_before": load()}
    t0 = time.time()
    records = job_log(plan, progress)
    held = leave_one_task_out(records)
    errors = prediction_errors(held)
    doc["load_after_job_log"] = load()
    acai = measure_acai(plan, progress)
    measured = acai_measured(acai)
    simulated = acai_simulated(acai)
    doc["load_after_acai"] = load()
    costs = selection_costs(records)
    selection = selection_effect(costs, plan, progress)
    doc["load_after"] = load()
    chosen = measured["chosen_by_profiler"]
    e1, e2 = errors["profiler"]["value"], errors["flops"]["value"]
    t_key = f"t_{LEVEL:g}"
    return {
        "median_abs_log_error": {"profiler": e1, "flops": e2},
        "autoprovision": {"speedup_at_cost_cap": chosen["speedup_at_cost_cap"],
                          "cost_cut_at_deadline": chosen["cost_cut_at_deadline"]},
        "selection": {f"{t_key}_predicted_costs": selection[t_key]["profiler"]["value"],
                      f"{t_key}_flops_costs": selection[t_key]["flops"]["value"]},
        "targets": {
            "profiler_error_at_most_half_the_proxy": {"ratio": e1 / e2, "met": e1 <= TARGETS["error_ratio_at_most"] * e2},
            "speedup_at_cost_cap_at_least_1.3": chosen["speedup_at_cost_cap"] >= TARGETS["speedup_at_least"],
            "cost_cut_at_deadline_at_least_0.25": chosen["cost_cut_at_deadline"] >= TARGETS["cost_cut_at_least"],
            "acai_reported": {"speedup": 1.7, "cost_cut": 0.39},
        },
        "details": {
            "prediction": {**errors, "synthetic_law": synthetic_law(records), "leave_one_out_unit": "task",
                           "tasks": sorted({r["task"] for r in records})},
            "autoprovision": {"measured": acai, **measured, "simulated": simulated,
                              "prices_per_hour": dataclasses.asdict(DEFAULT_PRICES),
                              "baseline_memory_bytes": WORKER_MEMORY},
            "selection": selection,
            "job_log": records,
        },
        "plan": dataclasses.asdict(plan),
        "machine": {**doc, "cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "seconds": round(time.time() - t0, 1)},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few minutes: fewer tasks, sizes and replays")
    ap.add_argument("--out", type=Path, help="the JSON to write (default: benchmarks/results/provisioner[_quick].json)")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    plan = QUICK if args.quick else FULL
    out = args.out or RESULTS / ("provisioner_quick.json" if args.quick else "provisioner.json")
    result = run(plan, progress=lambda **kw: tqdm(file=sys.stderr, **kw))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1, default=float) + "\n")
    tmp.replace(out)
    head = {k: result[k] for k in ("median_abs_log_error", "autoprovision", "selection", "targets")}
    print(json.dumps(head, indent=1))
    log(f"wrote {out} ({result['machine']['seconds']} s, load {result['machine']['load_after']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
