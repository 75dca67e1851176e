"""A measured quality/cost matrix of the zoo's deep nets on image tasks.

    python benchmarks/image_matrix.py            # full: 18 tasks x 4 nets x 3 rates, 3 timing rounds
                                                 # (about 9 min on a shared 2-core host at load 2-9)
    python benchmarks/image_matrix.py --quick    # 4 small tasks, 1 round (< 1 minute); writes image_quick_* files

Writes ``benchmarks/data/image_quality.csv``, ``image_cost.csv`` and
``image_meta.json`` (``--quick``: ``image_quick_*`` so the committed matrix is
never overwritten by a smoke run), in the layout of the scikit-learn matrix
(``benchmarks/selection.py``'s ``read_csv``): one row per task ("user"), one
column per (candidate, learning rate), named ``<candidate>@lr=<rate>``, e.g.
``lenet@lr=0.01``.

How a cell is measured: as the service trains a torch pick
(``service/mop.py``): the task's program is ``input: [H, W, C] output: [K]``
(``schema.program_from_shapes``); its torch candidates from
``zoo.candidates``; each candidate's learning-rate grid
(``jobspec.TorchWorkload.of``) for ``ServiceConfig.torch_epochs`` epochs,
trained as ONE MOP workload (``MOPRunner`` with ``LearningRateGrid``, Cerebro
§4.2) on a one-worker ``LocalEngine`` (the service's default ``workers=1``),
seed 0, the runner's 80/20 validation split by example id. Quality of a cell
= that rate's best validation accuracy over its epochs (what the service
records per config). Cost = the grid's wall seconds split among its rates in
proportion to the compute seconds of each rate's MOP units (train and
validation), so a candidate's columns add up to the pick's wall time; the
median over the timing rounds.

A pick in the service trains the whole grid, so the per-candidate view of the
matrix (what the service's selector sees as one arm) is: quality = max over
the candidate's columns, cost = sum over them; ``per_candidate`` does that.

Tasks ("users") are made from scikit-learn's bundled digits (1797 8x8
images, nothing downloaded): digit pairs and subsets, label noise,
random rotations and flips, class imbalance, down- and upsampling, and a
colour-tinted three-channel variant (``make_tasks``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import csv
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SEP = "@"  # column = <candidate>@lr=<rate>


# -- task makers (pure numpy, tested on tiny inputs) -------------------------------------
@dataclass(frozen=True)
class ImageTask:
    """One user's image classification task: ``X`` is (n, H, W, C) float32 in
    [0, 1], ``y`` class indices 0..K-1."""

    name: str
    X: np.ndarray
    y: np.ndarray
    description: str
    facts: dict[str, Any] = field(default_factory=dict)  # e.g. the noise rate actually applied

    @property
    def n_classes(self) -> int:
        return int(self.y.max()) + 1


def digits_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (1797, 8, 8, 1) float32 in [0, 1], as the demo feeds them."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32)[..., None], d.target.astype(np.int64)


def select_classes(X: np.ndarray, y: np.ndarray, classes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The examples of ``classes``, relabelled 0..len(classes)-1 in that order."""
    classes = list(classes)
    keep = np.isin(y, classes)
    lookup = {c: i for i, c in enumerate(classes)}
    return X[keep], np.array([lookup[int(v)] for v in y[keep]], dtype=np.int64)


def with_label_noise(y: np.ndarray, rate: float, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``y`` with exactly ``round(rate * n)`` labels, chosen at
    random, replaced by a different class drawn uniformly (symmetric noise)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"rate: found {rate}, expected a fraction in [0, 1)")
    out = y.copy()
    flip = rng.choice(len(y), size=round(rate * len(y)), replace=False)
    shift = rng.integers(1, n_classes, size=len(flip))  # 1..K-1: never the same class
    out[flip] = (y[flip] + shift) % n_classes
    return out


def rotate_random(X: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each image rotated by its own random multiple of 90 degrees; returns
    the images and the quarter turns applied."""
    turns = rng.integers(0, 4, size=len(X))
    return np.stack([np.rot90(img, k, axes=(0, 1)) for img, k in zip(X, turns)]), turns


def flip_random(X: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each image mirrored left-right with probability 1/2; returns the images and the flags."""
    flags = rng.random(len(X)) < 0.5
    out = X.copy()
    out[flags] = out[flags][:, :, ::-1]
    return out, flags


def downsample(X: np.ndarray, factor: int) -> np.ndarray:
    """Block means over ``factor`` x ``factor`` pixels (H and W divisible by it)."""
    n, h, w, c = X.shape
    if h % factor or w % factor:
        raise ValueError(f"factor: found {factor}, expected a divisor of the image size {h}x{w}")
    return X.reshape(n, h // factor, factor, w // factor, factor, c).mean(axis=(2, 4)).astype(np.float32)


def upsample(X: np.ndarray, factor: int) -> np.ndarray:
    """Bilinear upsampling by an integer factor (``scipy.ndimage.zoom``, order 1)."""
    from scipy.ndimage import zoom

    return np.clip(zoom(X, (1, factor, factor, 1), order=1), 0.0, 1.0).astype(np.float32)


def imbalance(X: np.ndarray, y: np.ndarray, keep: Sequence[float],
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Keep ``round(keep[k] * count_k)`` random examples of each class k (at least two)."""
    idx = []
    for k, frac in enumerate(keep):
        members = np.flatnonzero(y == k)
        n = max(2, round(frac * len(members)))
        idx.append(rng.choice(members, size=min(n, len(members)), replace=False))
    sel = np.sort(np.concatenate(idx))
    return X[sel], y[sel]


def tint(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Grey images as three-channel ones, each ink a random colour (one random
    weight in [0.3, 1] per image and channel), so colour carries no label."""
    weights = rng.uniform(0.3, 1.0, size=(len(X), 1, 1, 3)).astype(np.float32)
    return (X * weights).astype(np.float32)


def make_tasks(X: np.ndarray, y: np.ndarray, *, seed: int = 0, quick: bool = False) -> list[ImageTask]:
    """The matrix's tasks from digits images ``X`` (n, 8, 8, 1) and labels ``y``."""
    rng = np.random.default_rng(seed)
    tasks: list[ImageTask] = []

    def add(name: str, Xt: np.ndarray, yt: np.ndarray, description: str, **facts: Any) -> None:
        tasks.append(ImageTask(name, np.ascontiguousarray(Xt, dtype=np.float32), yt.astype(np.int64), description, facts))

    for a, b in [(0, 1), (3, 8)] if quick else [(0, 1), (3, 8), (4, 9), (1, 7)]:
        add(f"digits_{a}v{b}", *select_classes(X, y, [a, b]), f"digit {a} against digit {b}")
    Xs, ys = select_classes(X, y, [3, 8])
    add("digits_3v8_noise30", Xs, with_label_noise(ys, 0.3, 2, rng), "3 v 8, 30% of labels flipped", noise_rate=0.3)
    if quick:
        add("digits_0v1_4x4", downsample(tasks[0].X, 2), tasks[0].y, "0 v 1 downsampled to 4x4 (2x2 block means)")
        return tasks
    lo = y < 5
    add("digits_0-4", X[lo], y[lo], "digits 0-4 (5 classes)")
    add("digits_5-9", X[~lo], y[~lo] - 5, "digits 5-9 (5 classes)")
    add("digits_all", X, y, "all ten digits")
    add("digits_even_odd", X, y % 2, "even against odd digits (2 classes)")
    add("digits_all_noise20", X, with_label_noise(y, 0.2, 10, rng), "all digits, 20% of labels replaced by another class",
        noise_rate=0.2)
    Xr, turns = rotate_random(X, rng)
    add("digits_all_rot90", Xr, y, "all digits, each rotated by a random multiple of 90 degrees",
        quarter_turns=np.bincount(turns, minlength=4).tolist())
    Xf, flags = flip_random(X[~lo], rng)
    add("digits_5-9_flip", Xf, y[~lo] - 5, "digits 5-9, each mirrored left-right with probability 1/2",
        flipped=int(flags.sum()))
    Xi, yi = imbalance(*select_classes(X, y, [1, 7]), [1.0, 0.1], rng)
    add("digits_1v7_imb10", Xi, yi, "1 v 7 with only 10% of the 7s kept", class_counts=np.bincount(yi).tolist())
    Xi, yi = imbalance(X, y, [0.5 ** (k / 3) for k in range(10)], rng)
    add("digits_all_longtail", Xi, yi, "all digits, class k keeps 0.5**(k/3) of its examples",
        class_counts=np.bincount(yi).tolist())
    add("digits_all_4x4", downsample(X, 2), y, "all digits downsampled to 4x4 (2x2 block means)")
    X04, y04 = X[lo], y[lo]
    add("digits_0-4_16x16", upsample(X04, 2), y04, "digits 0-4 upsampled to 16x16 (bilinear)")
    add("digits_all_32x32", upsample(X, 4), y, "all digits upsampled to 32x32 (bilinear)")
    add("digits_all_rgb", tint(X, rng), y, "all digits as 8x8x3 images, each inked in a random colour")
    return tasks


# -- measuring one cell ------------------------------------------------------------------
@dataclass(frozen=True)
class GridRun:
    """One candidate's learning-rate grid trained on one task."""

    lrs: tuple[float, ...]
    accuracy: tuple[float, ...]  # per rate: best validation accuracy over the epochs
    seconds: tuple[float, ...]  # per rate: its share of the grid's wall time
    wall_seconds: float


def column(candidate: str, lr: float) -> str:
    from ease_jupyter.jobspec import point_label

    return f"{candidate}{SEP}{point_label({'lr': lr})}"


def image_candidates(task: ImageTask) -> list[Any]:
    """The service's torch candidates for the task's program, in the zoo's order."""
    from ease_jupyter.schema import program_from_shapes
    from ease_jupyter.zoo import Engine, candidates

    program = program_from_shapes(task.X.shape[1:], [max(task.n_classes, 2)])
    return [c for c in candidates(program) if c.engine is Engine.TORCH]


def train_grid(engine: Any, candidate: Any, task: ImageTask, epochs: int, seed: int = 0) -> GridRun:
    """The candidate's rate grid as one MOP workload, as ``service.mop.run_torch_job`` trains it."""
    from ease_jupyter.execution.automl import LearningRateGrid
    from ease_jupyter.execution.mop.runner import MOPRunner
    from ease_jupyter.jobspec import TorchWorkload

    spec = TorchWorkload.of(candidate, epochs)
    procedure = LearningRateGrid(candidate.name, list(spec.lrs), epochs=spec.epochs)
    trial_lr = {s.id: float(dict(s.params)["lr"]) for s in LearningRateGrid(candidate.name, list(spec.lrs),
                                                                             epochs=spec.epochs).start()}
    unit_seconds = dict.fromkeys(trial_lr, 0.0)

    def on_unit(rec: Any) -> None:
        unit_seconds[rec.trial] += float(rec.metrics.get("seconds", 0.0))

    t0 = time.perf_counter()
    result = MOPRunner(engine, procedure, [candidate], task.X, task.y, seed=seed, on_unit=on_unit).run()
    wall = time.perf_counter() - t0
    total = sum(unit_seconds.values()) or 1.0
    acc = tuple(float(result.best_checkpoints[t][0]) if t in result.best_checkpoints else float("nan") for t in trial_lr)
    secs = tuple(wall * unit_seconds[t] / total for t in trial_lr)
    return GridRun(tuple(trial_lr.values()), acc, secs, wall)


# -- the matrix ----------------------------------------------------------------------------
def per_candidate(models: Sequence[str], quality: np.ndarray, cost: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The matrix as the service's selector sees it, one arm per candidate:
    quality = the best of its rates (max over its columns), cost = the whole
    grid's seconds (sum over its columns)."""
    names = list(dict.fromkeys(m.split(SEP)[0] for m in models))
    groups = [[j for j, m in enumerate(models) if m.split(SEP)[0] == n] for n in names]
    q = np.stack([np.nanmax(quality[:, g], axis=1) for g in groups], axis=1)
    c = np.stack([np.nansum(cost[:, g], axis=1) for g in groups], axis=1)
    return names, q, c


def write_csv(path: Path, users: Sequence[str], models: Sequence[str], m: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        wr = csv.writer(fh)
        wr.writerow(["user", *models])
        for u, row in zip(users, m):
            wr.writerow([u, *("" if math.isnan(x) else f"{x:.6g}" for x in row)])


def read_csv(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return ([r[0] for r in rows[1:]], rows[0][1:],
            np.asarray([[float("nan") if v == "" else float(v) for v in r[1:]] for r in rows[1:]]))


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version()}


def versions() -> dict[str, str]:
    import scipy
    import sklearn
    import torch

    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=False, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"torch": torch.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
            "scikit-learn": sklearn.__version__, "ease_jupyter_commit": commit}


def spread_summary(walls: dict[tuple[str, str], list[float]]) -> dict[str, Any]:
    """How much a grid's wall time moved between timing rounds: max/min per cell."""
    ratios = sorted(max(v) / min(v) for v in walls.values() if len(v) > 1 and min(v) > 0)
    if not ratios:
        return {"rounds": 1, "note": "one timing round: no spread measured"}
    q = np.quantile(ratios, [0.5, 0.9, 1.0])
    return {"max_over_min_per_grid": {"median": round(float(q[0]), 3), "p90": round(float(q[1]), 3),
                                      "max": round(float(q[2]), 3)}}


def main(argv: Sequence[str] | None = None) -> int:
    from ease_jupyter.jobspec import DEFAULT_EPOCHS
    from ease_jupyter.service.config import ServiceConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Columns: <candidate>@lr=<rate>; per-candidate view: per_candidate().")
    ap.add_argument("--quick", action="store_true", help="4 small tasks, 1 timing round, image_quick_* files (< 1 min)")
    ap.add_argument("--rounds", type=int, default=None, help="timing rounds over the whole matrix (default 3; quick 1)")
    ap.add_argument("--epochs", type=int, default=ServiceConfig().torch_epochs or DEFAULT_EPOCHS,
                    help="epochs per rate (default: the service's --torch-epochs if set, else jobspec.DEFAULT_EPOCHS: "
                         "the service's own epochs follow each task's data size, docs/budget.md)")
    ap.add_argument("--out", type=Path, default=DATA, help="directory of the CSV and JSON files")
    ap.add_argument("--seed", type=int, default=0, help="task making and training seed (the service's: 0)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    prefix = "image_quick" if args.quick else "image"
    t_all = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t_all:6.1f}s load {loadavg()[0]:.2f}] {msg}", file=sys.stderr, flush=True)

    from ease_jupyter.execution.engine import make_engine

    X, y = digits_images()
    tasks = make_tasks(X, y, seed=args.seed, quick=args.quick)
    log(f"{len(tasks)} tasks, {rounds} timing round(s), {args.epochs} epochs per rate")
    load_before = loadavg()
    loads = [load_before]
    engine = make_engine("local", n_workers=1)  # the service's torch engine with workers=1
    try:
        warm = tasks[0]
        for cand in image_candidates(warm):  # the first units pay torch's lazy set-up: not a cell's cost
            train_grid(engine, cand, ImageTask("warmup", warm.X[:64], warm.y[:64], "warm-up"), 1, args.seed)
        models: list[str] | None = None
        acc: dict[str, dict[str, float]] = {t.name: {} for t in tasks}
        secs: dict[tuple[str, str], list[float]] = {}
        walls: dict[tuple[str, str], list[float]] = {}
        accuracy_changed = 0
        for r in range(rounds):
            for task in tasks:
                cands = image_candidates(task)
                cols = [column(c.name, lr) for c in cands for lr in _rates(c, args.epochs)]
                if models is None:
                    models = cols
                elif cols != models:
                    raise RuntimeError(f"candidates: task {task.name} has columns {cols}, expected {models}")
                for cand in cands:
                    run = train_grid(engine, cand, task, args.epochs, args.seed)
                    walls.setdefault((task.name, cand.name), []).append(run.wall_seconds)
                    for lr, a, s in zip(run.lrs, run.accuracy, run.seconds):
                        key = column(cand.name, lr)
                        if r == 0:
                            acc[task.name][key] = a
                        elif acc[task.name][key] != a:
                            accuracy_changed += 1
                        secs.setdefault((task.name, key), []).append(s)
                loads.append(loadavg())
                best = max(acc[task.name].items(), key=lambda kv: kv[1])
                log(f"round {r + 1}/{rounds} {task.name:<20} n={len(task.y):4d} "
                    f"best {best[0]} {best[1]:.3f}  grids {sum(walls[(task.name, c.name)][-1] for c in cands):6.2f}s")
    finally:
        engine.close()
    assert models is not None
    users = [t.name for t in tasks]
    q = np.array([[acc[u][m] for m in models] for u in users])
    c = np.array([[statistics.median(secs[(u, m)]) for m in models] for u in users])
    write_csv(args.out / f"{prefix}_quality.csv", users, models, q)
    write_csv(args.out / f"{prefix}_cost.csv", users, models, c)
    example = max(walls, key=lambda k: statistics.median(walls[k]))
    meta = {
        "quality_source": "MEASURED: best validation accuracy over the epochs of each (candidate, rate), trained as "
                          "the service trains a torch pick: the rate grid as one MOP workload (MOPRunner + "
                          f"LearningRateGrid, {args.epochs} epochs = ServiceConfig.torch_epochs), one-worker "
                          "LocalEngine, seed 0, the runner's 80/20 validation split by example id",
        "cost_source": "MEASURED: wall seconds of the candidate's grid split among its rates in proportion to the "
                       f"compute seconds of each rate's MOP units (train + validation); median of {rounds} timing "
                       "round(s); one torch thread on a shared 2-core machine, so noisy (see load, timing_spread)",
        "model_source": "ease_jupyter.zoo.candidates(program_from_shapes(image shape, [classes])), torch candidates; "
                        "rates from jobspec.TorchWorkload.of",
        "columns": "<candidate>@lr=<rate>; per-candidate arm (what the service's selector picks): quality = max over "
                   "its columns, cost = sum over them (image_matrix.per_candidate)",
        "tasks": [{"name": t.name, "description": t.description, "examples": len(t.y),
                   "shape": list(t.X.shape[1:]), "classes": t.n_classes, **t.facts} for t in tasks],
        "made_by": "python benchmarks/image_matrix.py" + (" --quick" if args.quick else "")
                   + (f" --rounds {args.rounds}" if args.rounds else ""),
        "data": "sklearn.datasets.load_digits (bundled with scikit-learn; nothing downloaded)",
        "epochs": args.epochs, "seed": args.seed, "timing_rounds": rounds,
        "timing_spread": {**spread_summary(walls),
                          "example_grid": {"task": example[0], "candidate": example[1],
                                           "wall_seconds": [round(v, 3) for v in walls[example]]}},
        "accuracy_changed_between_rounds": accuracy_changed,
        "machine": machine(),
        "load": {"before": load_before, "after": loadavg(), "max_1min": max(v[0] for v in loads),
                 "note": "os.getloadavg() (what uptime prints) on a 2-core machine shared with other jobs"},
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": versions(),
        "build_seconds": round(time.time() - t_all, 1),
    }
    (args.out / f"{prefix}_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    log(f"wrote {args.out / prefix}_{{quality,cost}}.csv and {prefix}_meta.json: {q.shape[0]} tasks x {q.shape[1]} columns")
    print(summary(users, models, q, c))
    return 0


def _rates(candidate: Any, epochs: int) -> tuple[float, ...]:
    from ease_jupyter.jobspec import TorchWorkload

    return TorchWorkload.of(candidate, epochs).lrs


def summary(users: Sequence[str], models: Sequence[str], q: np.ndarray, c: np.ndarray) -> str:
    """Per task: the best column and arm, the spread of accuracies; then the
    candidates' cost relative to the cheapest."""
    names, qa, ca = per_candidate(models, q, c)
    lines = [f"{'task':<20} {'best column':<26} {'best':>5} {'worst':>5} {'median':>6}  per-candidate best"]
    for i, u in enumerate(users):
        j = int(np.nanargmax(q[i]))
        arms = " ".join(f"{n}={qa[i, k]:.3f}" for k, n in enumerate(names))
        lines.append(f"{u:<20} {models[j]:<26} {q[i, j]:5.3f} {np.nanmin(q[i]):5.3f} {np.nanmedian(q[i]):6.3f}  {arms}")
    rel = ca / ca.min(axis=1, keepdims=True)
    lines.append("grid cost relative to the task's cheapest candidate (median over tasks [min, max]):")
    for k, n in enumerate(names):
        lines.append(f"  {n:<16} {np.median(rel[:, k]):5.2f} [{rel[:, k].min():.2f}, {rel[:, k].max():.2f}]"
                     f"  grid seconds median {np.median(ca[:, k]):.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
