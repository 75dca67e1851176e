"""Benchmark of MOP execution (issue #4 item 6): the randomized scheduler in
simulation, and MOP against task parallelism and DDP on real runs.

    python benchmarks/mop.py                  # full: 2 repetitions at x8 + 4 more seeds + 1 run at x2
    python benchmarks/mop.py --quick          # 2 configs, 1 epoch, untiled data, 2 seeds; writes mop_quick.json
    python benchmarks/mop.py --accuracy-only  # only (e); writes mop_accuracy.json

(lightly loaded 2-core host, estimated: full ~8-12 min, quick ~40-50 s; both grow several-fold
when other jobs load the host: quick 65 s at load 6-7, full 43 min at load 7-13.)

Writes benchmarks/results/mop.json (and mop.md, the tables quoted in
docs/execution.md). Everything is measured side by side in one run and the
headline figures are ratios, never absolute times.

Parts
-----
(a) Scheduler quality: ``figure6_grid`` (Cerebro §5.4, Figure 6 settings: 16
    or 256 configs x 8 or 16 workers x homogeneous / heterogeneous, 5 seeds);
    makespan of the randomized scheduler / max(L_max, max per-config total).
(b) Real runs on a Dask LocalCluster of 2 worker processes x 1 thread, the same
    configs for the same epochs, one after the other (one engine each, so no
    method runs while another does):
    * MOP: ``run_mop`` with a ``GridSearch`` over the zoo's LeNet (program
      ``input: [8,8,1] output: [10]``), one training partition per worker.
    * task parallelism with full data replication (Celery in Cerebro §6.1):
      the training data are placed on every worker, and each config trains
      all its epochs on one worker (FIFO queue, next config to the first idle
      worker), with the same unit code (``units.train_unit`` on the whole
      training set each epoch) and the same initial weights.
    * data-parallel torch DDP, gloo backend, 2 processes on 127.0.0.1, each
      config in turn, PER-RANK batch 32 (global batch 64, as Horovod in
      Cerebro §6.2 Figure 9: "effective batch size is 256 (32 x 8)"), same
      epochs, same initial weights, gradients clipped like the units.
    Data: scikit-learn's digits (1797 8x8 images); 20% of the ORIGINAL images
    are validation; the training images are tiled ``--tile`` times with
    one-pixel shifts (0, right, down, right+down, ...) to make units heavy
    enough to time (full: x8, plus a single x2 run for the unit-size sweep; quick: x1).
(c) Hop overhead: ``units.measure_hop`` on one MOP partition in the runner's
    hop mode: (driver wall per unit - compute per unit) / driver wall per
    unit, where compute excludes checkpoint load/save (timed separately).
(d) ``decision_latency(256, 64)``: p50 milliseconds per steady-state decision.
(e) Accuracy over training seeds (``--acc-seeds``, default 5): one MOP and one
    task-parallel run per seed (seed ``--seed`` is the first timed repetition
    of (b); the others run on the first task-parallel engine after its timed
    run). Noise is each method's own spread over seeds; per config the gap of
    means is compared with SE(diff) = sqrt(sd_MOP^2/n + sd_TP^2/n), and the
    verdict is Welch's t-test per config with Holm's correction over configs.

The script imports no Dask module itself: workers, placement and submission go
through the engine API; ``engine.client.run`` (the engine's documented
diagnostics handle) reads the bytes each worker holds, and
``engine.worker_pids()`` gives the processes whose RSS psutil samples.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"

TARGETS = {
    "makespan_ratio_to_lower_bound": "<= 1.1 on average",
    "accuracy_gap_mop_vs_task_parallel": "within noise over seeds: no config's gap of means significant "
                                         "(Welch t, Holm over configs, 5%); 2 SE per config reported too",
    "memory_ratio_mop_vs_task_parallel": "about 1/p (p = 2 workers: 0.5)",
    "time_ratio_ddp_vs_mop_batch32": "> 1 (MOP beats DDP at batch 32)",
    "hop_overhead_share": "< 0.05",
}

# ---------------------------------------------------------------------------
# pure helpers (tested in tests/execution/test_mop_benchmark.py)
# ---------------------------------------------------------------------------


def summarize_grid(rows: list[dict]) -> dict:
    """Mean/min/max ratio per (setting, configs, workers) cell and overall."""
    cells: dict[str, list[float]] = {}
    for r in rows:
        cells.setdefault(f"{r['setting']}/{r['configs']}x{r['workers']}", []).append(float(r["ratio"]))
    out = {k: {"mean": statistics.fmean(v), "min": min(v), "max": max(v), "runs": len(v)} for k, v in cells.items()}
    ratios = [float(r["ratio"]) for r in rows]
    return {
        "mean": statistics.fmean(ratios) if ratios else float("nan"),
        "max": max(ratios) if ratios else float("nan"),
        "cells": out,
    }


def shift_tile(X: np.ndarray, times: int) -> np.ndarray:
    """``X`` (N, H, W, C) repeated ``times`` times, copy k shifted by
    (k // 2 % 2, k % 2) pixels down/right (zero fill); copy 0 is ``X``."""
    if times < 1:
        raise ValueError(f"times: found {times}, expected >= 1")
    out = []
    for k in range(times):
        dy, dx = (k // 2) % 2, k % 2
        s = np.zeros_like(X)
        s[:, dy:, dx:] = X[:, : X.shape[1] - dy, : X.shape[2] - dx]
        out.append(s)
    return np.concatenate(out)


def accuracy_gap(a: dict[str, float], b: dict[str, float]) -> dict:
    """Per-config |a - b| over the configs both have, and their mean."""
    common = sorted(set(a) & set(b))
    per = {t: abs(float(a[t]) - float(b[t])) for t in common}
    return {"mean": statistics.fmean(per.values()) if per else float("nan"), "per_config": per}


def accuracy_noise(acc: dict[str, float], n_val: int) -> float:
    """Mean over configs of the binomial standard error of a DIFFERENCE of two
    independent accuracies measured on ``n_val`` examples: sqrt(2 a (1-a) / n)."""
    if not acc or n_val <= 0:
        return float("nan")
    return statistics.fmean(math.sqrt(2 * a * (1 - a) / n_val) for a in acc.values())


def seed_stats(values: list[float]) -> dict:
    """Mean, sample standard deviation (ddof 1), standard error of the mean,
    min and max of one config's final accuracies over seeds."""
    v = [float(x) for x in values]
    n = len(v)
    if n == 0:
        nan = float("nan")
        return {"n": 0, "mean": nan, "sd": nan, "se": nan, "min": nan, "max": nan, "values": []}
    sd = statistics.stdev(v) if n > 1 else float("nan")
    return {"n": n, "mean": statistics.fmean(v), "sd": sd, "se": sd / math.sqrt(n) if n > 1 else float("nan"),
            "min": min(v), "max": max(v), "values": v}


def welch_p(gap: float, m: dict, p: dict) -> float:
    """Two-sided p-value of Welch's t-test for a difference of means ``gap``
    between two samples summarised by :func:`seed_stats` (NaN below 2 values
    each; 1.0 / 0.0 when both have no spread and the means agree / differ)."""
    from scipy import stats

    if m["n"] < 2 or p["n"] < 2:
        return float("nan")
    vm, vp = m["sd"] ** 2 / m["n"], p["sd"] ** 2 / p["n"]
    if vm + vp == 0:
        return 1.0 if gap == 0 else 0.0
    t = gap / math.sqrt(vm + vp)
    df = (vm + vp) ** 2 / (vm**2 / (m["n"] - 1) + vp**2 / (p["n"] - 1))
    return float(2 * stats.t.sf(abs(t), df))


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values (NaN stays NaN and is not counted)."""
    items = sorted(((v, k) for k, v in pvalues.items() if not math.isnan(v)))
    m, out, running = len(items), {k: float("nan") for k in pvalues}, 0.0
    for i, (v, k) in enumerate(items):
        running = max(running, min(1.0, (m - i) * v))
        out[k] = running
    return out


def compare_over_seeds(mop: dict[str, list[float]], tp: dict[str, list[float]], k: float = 2.0,
                       alpha: float = 0.05) -> dict:
    """Per config: the gap of the means over seeds, |mean_MOP - mean_TP|,
    against the noise measured by the seeds themselves: the standard error of
    that difference, sqrt(sd_MOP^2/n_MOP + sd_TP^2/n_TP) (each method's own
    spread over seeds). ``within_k_se``: gap <= k * SE. ``mop_mean_in_tp_range``:
    MOP's mean lies within task parallelism's [min, max] over seeds.
    Configs with fewer than 2 seeds in either method get SE = NaN and count
    as not within.

    With many configs, "every config within 2 SE" fails by chance alone
    (with 5 seeds per method, Welch's t has 4-8 degrees of freedom and
    |t| <= 2 holds with probability 0.88-0.92 per config, so for 8 configs
    all 8 hold with probability 0.36-0.52 even if the methods are the same), so the overall verdict, ``no_significant_difference``, is a
    Welch t-test per config with Holm's correction over configs at family-wise
    level ``alpha``."""
    per: dict[str, dict] = {}
    for t in sorted(set(mop) & set(tp)):
        m, p = seed_stats(mop[t]), seed_stats(tp[t])
        gap = abs(m["mean"] - p["mean"])
        se = math.sqrt(m["se"] ** 2 + p["se"] ** 2) if m["n"] > 1 and p["n"] > 1 else float("nan")
        per[t] = {
            "welch_p": welch_p(gap, m, p),
            "mop": m,
            "task_parallel": p,
            "gap": gap,
            "se_diff": se,
            "gap_in_se": gap / se if se > 0 else (0.0 if gap == 0 else float("inf")),
            "within_k_se": bool(gap <= k * se) if not math.isnan(se) else False,
            "mop_mean_in_tp_range": bool(p["min"] <= m["mean"] <= p["max"]),
        }
    adjusted = holm({t: v["welch_p"] for t, v in per.items()})
    for t, v in per.items():
        v["holm_p"] = adjusted[t]
        v["significant"] = bool(adjusted[t] < alpha) if not math.isnan(adjusted[t]) else None
    gaps = [v["gap"] for v in per.values()]
    ses = [k * v["se_diff"] for v in per.values()]
    return {
        "k": k,
        "alpha": alpha,
        "no_significant_difference": bool(per) and all(v["significant"] is False for v in per.values()),
        "configs_significant": sum(bool(v["significant"]) for v in per.values()),
        "per_config": per,
        "mean_gap": statistics.fmean(gaps) if gaps else float("nan"),
        "mean_k_se": statistics.fmean(ses) if ses else float("nan"),
        "configs_within_k_se": sum(v["within_k_se"] for v in per.values()),
        "configs_mop_mean_in_tp_range": sum(v["mop_mean_in_tp_range"] for v in per.values()),
        "configs": len(per),
        "all_within_k_se": bool(per) and all(v["within_k_se"] for v in per.values()),
    }


def allreduce_bytes(n_params: int, steps: int, ranks: int, dtype_bytes: int = 4) -> int:
    """Bytes sent over the wire by a ring all-reduce of ``n_params`` floats per
    step, summed over ranks: each rank sends 2 (p-1)/p of the gradient."""
    if ranks < 2:
        return 0
    per_rank = 2 * (ranks - 1) / ranks * n_params * dtype_bytes
    return int(round(per_rank * ranks * steps))


def hop_share(wall_per_unit: float, unit_seconds: float, checkpoint_seconds: float) -> float:
    """Share of a unit's driver-seen wall time not spent computing: dispatch,
    checkpoint transfer (wall - in-worker seconds) plus checkpoint load/save
    inside the unit."""
    if wall_per_unit <= 0:
        return float("nan")
    overhead = max(wall_per_unit - unit_seconds, 0.0) + checkpoint_seconds
    return min(overhead / wall_per_unit, 1.0)


def nbytes(obj: Any) -> int:
    """Bytes of the numpy arrays / bytes inside nested tuples, lists, dicts."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, (tuple, list)):
        return sum(nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(nbytes(o) for o in obj.values())
    return 0


# ---------------------------------------------------------------------------
# functions shipped to workers / DDP ranks (module level, picklable)
# ---------------------------------------------------------------------------


def _warm(data: Any, checkpoint: bytes, spec: Any) -> int:
    """Warm a worker: import torch and the zoo, run one training and one
    validation unit (first calls pay seconds of imports and lazy init)."""
    from ease_jupyter.execution.units import eval_unit, train_unit

    train_unit(data, checkpoint, spec)
    eval_unit(data, checkpoint, spec)
    return os.getpid()


def _held_bytes(dask_worker: Any = None) -> int:
    """Bytes of placed data (keys ``data-...``) on this Dask worker."""
    total = 0
    for key in list(dask_worker.data.keys()):
        if str(key).startswith("data-"):
            total += nbytes(dask_worker.data[key])
    return total


def _tp_train(data: Any, checkpoint: bytes, spec: Any, epochs: int) -> dict:
    """Task parallelism: one config, all epochs, on the full replicated data."""
    from ease_jupyter.execution.units import combine_eval, eval_unit, train_unit

    (X, y), (Xv, yv) = data
    started = time.perf_counter()
    accs, compute = [], 0.0
    for e in range(epochs):
        out = train_unit((X, y), checkpoint, spec.at(e, 0))
        checkpoint = out.checkpoint
        compute += out.metrics["seconds"]
        accs.append(combine_eval([eval_unit((Xv, yv), checkpoint, spec.at(e, 0))])["score"])
    return {"accs": accs, "seconds": time.perf_counter() - started, "unit_seconds": compute,
            "checkpoint_bytes": len(checkpoint)}


def _ddp_rank(rank: int, world: int, port: int, jobs: list, shard_dir: str, epochs: int, batch: int,
              out_path: str) -> None:
    """One DDP rank: it loads only its own shard of the training data (one
    in-memory partition per worker, as in Cerebro §6.1) and trains every
    config in turn, reshuffling its shard every epoch."""
    import io
    import warnings

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ease_jupyter.execution.units import default_model_fn

    warnings.filterwarnings("ignore", message="Grad strides do not match")  # a layout note, not an error
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    X = np.load(os.path.join(shard_dir, f"X{rank}.npy"))
    y = np.load(os.path.join(shard_dir, f"y{rank}.npy"))
    data_bytes = int(X.nbytes + y.nbytes)
    X_t, y_t = torch.as_tensor(X), torch.as_tensor(y.astype(np.int64))
    n = len(X)  # the shards have equal sizes: every rank takes the same number of steps
    # warm-up outside the timed loop, like the Dask workers': imports, one
    # forward/backward pass through a DDP wrapper
    warm = DDP(default_model_fn(jobs[0][0]))
    warm.module.loss(warm(X_t[:32]), y_t[:32]).backward()
    del warm
    if rank == 0:
        Xv, yv = np.load(os.path.join(shard_dir, "Xv.npy")), np.load(os.path.join(shard_dir, "yv.npy"))
    results = []
    dist.barrier()
    t_all = time.perf_counter()
    for spec, momentum, clip, ckpt in jobs:
        torch.manual_seed(0)
        net = default_model_fn(spec)
        state = torch.load(io.BytesIO(ckpt), weights_only=True)
        net.load_state_dict(state["model"])
        ddp = DDP(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=spec.lr, momentum=momentum)
        steps = 0
        dist.barrier()
        t0 = time.perf_counter()
        for e in range(epochs):
            g = torch.Generator()
            g.manual_seed(1000 * e + 7 + rank)
            perm = torch.randperm(n, generator=g)
            net.train()
            for a in range(0, n, batch):
                idx = perm[a:a + batch]
                if len(idx) < 2:
                    continue
                opt.zero_grad(set_to_none=True)
                loss = net.loss(ddp(X_t[idx]), y_t[idx])
                loss.backward()
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(ddp.parameters(), clip)
                opt.step()
                steps += 1
        dist.barrier()
        seconds = time.perf_counter() - t0
        acc = float("nan")
        if rank == 0:
            net.eval()
            with torch.no_grad():
                pred = net(torch.as_tensor(Xv)).argmax(dim=1).numpy()
            acc = float((pred == yv).mean())
        n_params = sum(p.numel() for p in net.parameters())
        results.append({"trial": spec.trial, "seconds": seconds, "steps": steps, "acc": acc, "params": int(n_params)})
    dist.barrier()
    total = time.perf_counter() - t_all
    sizes = [None] * world
    dist.all_gather_object(sizes, data_bytes)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"seconds": total, "configs": results, "data_bytes": sizes}, f)
    dist.destroy_process_group()


def _probe_unit(data: Any, checkpoint: Any, spec: Any, out_dir: str | None) -> Any:
    """A training unit that also times, in the worker, the checkpoint part of
    a unit (build the net, restore the checkpoint, save it; no training)."""
    from ease_jupyter.execution.units import default_model_fn, load_checkpoint, save_checkpoint, train_unit

    out = train_unit(data, checkpoint, spec, out_dir=out_dir)
    t0 = time.perf_counter()
    net = default_model_fn(spec)
    opt = net.make_optimizer(spec.lr)
    load_checkpoint(net, opt, out.checkpoint, spec.lr)
    save_checkpoint(net, opt)
    return out, time.perf_counter() - t0


# ---------------------------------------------------------------------------
# measurement helpers
# ---------------------------------------------------------------------------


class RSSSampler:
    """Peak RSS of given processes, sampled every ``interval`` s in a thread."""

    def __init__(self, pids: dict[str, int], interval: float = 0.05):
        import psutil

        self._procs = {w: psutil.Process(p) for w, p in pids.items()}
        self.baseline = {w: self._rss(p) for w, p in self._procs.items()}
        self.peak = dict(self.baseline)
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def _rss(proc: Any) -> int:
        try:
            return int(proc.memory_info().rss)
        except Exception:  # noqa: BLE001 - the process ended
            return 0

    def _loop(self) -> None:
        while not self._stop.is_set():
            for w, p in self._procs.items():
                self.peak[w] = max(self.peak[w], self._rss(p))
            self._stop.wait(self._interval)

    def __enter__(self) -> "RSSSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> dict:
        return {"peak_rss_mb": {w: v / 2**20 for w, v in self.peak.items()},
                "baseline_rss_mb": {w: v / 2**20 for w, v in self.baseline.items()},
                "peak_minus_baseline_mb": {w: (self.peak[w] - self.baseline[w]) / 2**20 for w in self.peak}}


def load_data(tile: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.images.astype(np.float32) / 16.0)[..., None]  # (N, 8, 8, 1)
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(X))
    n_val = len(X) // 5
    val, tr = order[:n_val], order[n_val:]
    Xt, yt = shift_tile(X[tr], tile), np.tile(y[tr], tile)
    return Xt, yt, X[val], y[val]


def start_engine(workers: int, warm: tuple) -> Any:
    """A Dask LocalCluster engine whose workers each ran one unit of ``warm``
    = (partition, checkpoint, spec) already."""
    from ease_jupyter.execution.engine import make_engine

    engine = make_engine("dask", n_workers=workers)
    ws = engine.workers()
    part, ckpt, spec = warm
    engine.place("warm", part, ws)
    hs = [engine.submit_pinned(_warm, "warm", ckpt, spec, worker=w, timeout=120) for w in ws]
    engine.wait_all(hs, timeout=180)
    engine.drop("warm")
    return engine


def held_bytes(engine: Any) -> dict[str, int]:
    by_address = engine.client.run(_held_bytes)
    return {str(a): int(v) for a, v in by_address.items()}


def run_mop_phase(args: Any, proc_factory: Any, cands: Any, data: tuple, warm: tuple) -> dict:
    from ease_jupyter.execution.mop.runner import MOPRunner

    X, y, Xv, yv = data
    engine = start_engine(args.workers, warm)
    try:
        units: list = []
        held: dict = {}

        def on_unit(rec: Any) -> None:
            units.append(rec)
            if not held:
                held.update(held_bytes(engine))

        runner = MOPRunner(engine, proc_factory(), cands, X, y, validation=(Xv, yv), seed=args.seed,
                           on_unit=on_unit)
        with RSSSampler(engine.worker_pids()) as rss:
            t0 = time.perf_counter()
            res = runner.run()
            wall = time.perf_counter() - t0
        train = [u for u in units if u.kind == "train"]
        val = [u for u in units if u.kind == "val"]
        ckpt = [float(u.metrics.get("checkpoint_bytes", 0.0)) for u in train]
        final, per_epoch, visits = mop_curves(res)
        unit_s = sum(float(u.metrics.get("seconds", 0.0)) for u in units)
        hop = measure_hop_phase(engine, runner, args, cands, X, y)
        part_bytes = {w: held.get(w, 0) for w in held}
        return {
            "wall_seconds": wall,
            "runner_seconds": res.seconds,
            "hop_mode": runner.hop,
            "final_val_acc": final,
            "val_acc_per_epoch": per_epoch,
            "visit_order": visits,
            "train_units": len(train),
            "val_units": len(val),
            "unit_seconds_sum": unit_s,
            "busy_share": unit_s / (wall * args.workers),
            "checkpoint_bytes_mean": statistics.fmean(ckpt) if ckpt else 0.0,
            # each training unit's checkpoint moves once to the next unit; each
            # validation unit reads the current checkpoint once
            "bytes_moved_checkpoints": int(sum(ckpt) + len(val) * (statistics.fmean(ckpt) if ckpt else 0.0)),
            "bytes_placed_once": int(sum(part_bytes.values())),
            "data_bytes_per_worker": part_bytes,
            "requeued": res.requeued,
            "hop": hop,
            **rss.report(),
        }
    finally:
        engine.close()


def measure_hop_phase(engine: Any, runner: Any, args: Any, cands: Any, X: np.ndarray, y: np.ndarray) -> dict:
    """(c): a chain of training units of one config on one MOP-sized
    partition, hopping between the workers at every unit, in the runner's hop
    mode. Per unit: driver-seen wall time (``UnitDone.seconds``), in-worker
    seconds (``metrics["seconds"]``), and the checkpoint build/restore/save
    seconds timed in the worker. Also ``units.measure_hop`` as a cross-check."""
    from ease_jupyter.execution.engine import UnitDone
    from ease_jupyter.execution.units import UnitSpec, initial_checkpoint, measure_hop

    cand = cands[0]
    part = (X[: len(X) // args.workers], y[: len(y) // args.workers])
    spec = UnitSpec.of("hop", cand.name, {"lr": 0.05}, cand.build, seed=args.seed)
    ws = engine.workers()
    engine.place("hop-chain", part, ws)
    walls, inside, ck = [], [], []
    with tempfile.TemporaryDirectory(prefix="mop-bench-hop-") as d:
        out_dir = d if runner.hop == "directory" else None
        ckpt: Any = initial_checkpoint(spec, *part)
        for i in range(args.hop_units):
            h = engine.submit_pinned(_probe_unit, "hop-chain", ckpt, spec.at(0, i), out_dir,
                                     worker=ws[i % len(ws)], timeout=600)
            ev = engine.wait_all([h], timeout=600)[h]
            if not isinstance(ev, UnitDone):
                raise RuntimeError(f"hop probe unit {i}: {ev}")
            out, ck_s = ev.result
            ckpt = out.checkpoint
            walls.append(ev.seconds)
            inside.append(out.metrics["seconds"])
            ck.append(ck_s)
            size = out.metrics["checkpoint_bytes"]
        cross = measure_hop(engine, spec, part, runner.hop, units=args.hop_units,
                            directory=os.path.join(d, "measure_hop"))
    engine.drop("hop-chain")
    shares = [hop_share(w, u, c) for w, u, c in zip(walls, inside, ck)]
    # the first unit of the chain on each worker is excluded (first unit of
    # this spec there), as in a warm run
    steady = shares[len(ws):] or shares
    return {
        "mode": runner.hop,
        "units": args.hop_units,
        "wall_per_unit_median": statistics.median(walls),
        "unit_seconds_median": statistics.median(inside),
        "checkpoint_build_load_save_seconds_median": statistics.median(ck),
        "checkpoint_bytes": size,
        "partition_examples": len(part[0]),
        "shares": shares,
        "share": statistics.median(steady),
        "measure_hop_cross_check": cross,
    }


def tp_fifo(engine: Any, key: str, specs: list, inits: dict, epochs: int) -> dict:
    """Task parallelism's FIFO loop: the next config goes to the first idle
    worker and trains all its epochs there on the data placed under ``key``
    (on every worker). Returns ``{trial: _tp_train's result + worker}``."""
    from ease_jupyter.execution.engine import UnitDone

    queue = list(specs)
    idle = list(engine.workers())
    out: dict = {}
    inflight: dict = {}
    while queue or inflight:
        while queue and idle:
            spec, w = queue.pop(0), idle.pop(0)
            h = engine.submit_pinned(_tp_train, key, inits[spec.trial], spec, epochs, worker=w, timeout=3600)
            inflight[h] = (spec.trial, w)
        for ev in engine.events(0.05):
            h = getattr(ev, "handle", None)
            if h not in inflight:
                continue
            trial, w = inflight.pop(h)
            if not isinstance(ev, UnitDone):
                raise RuntimeError(f"task-parallel config {trial} failed: {ev}")
            out[trial] = {**ev.result, "worker": w}
            idle.append(w)
    return out


def mop_curves(res: Any) -> tuple[dict, dict, dict]:
    """From a ``RunResult``: final validation accuracy, accuracy per epoch and
    the visit order per epoch (partitions in the order visited) per trial."""
    final: dict = {}
    per_epoch: dict = {}
    visits: dict = {}
    for m in res.history:  # history is in epoch order: the last wins
        final[m.trial] = m.score
        per_epoch.setdefault(m.trial, []).append(m.score)
        visits.setdefault(m.trial, []).append(list(m.visits))
    return final, per_epoch, visits


def run_tp_phase(args: Any, specs: list, inits: dict, data: tuple, warm: tuple, after: Any = None) -> dict:
    """Task parallelism, full replication, FIFO over configs (Cerebro §6.1).
    ``after(engine, key)``, if given, runs on the same engine once the timed
    run and the RSS sampling are over (its result goes under ``"after"``)."""
    X, y, Xv, yv = data
    engine = start_engine(args.workers, warm)
    try:
        ws = engine.workers()
        with RSSSampler(engine.worker_pids()) as rss:  # baseline before the replication
            t_place = time.perf_counter()
            engine.place("full", ((X, y), (Xv, yv)), ws)
            place_s = time.perf_counter() - t_place
            held = held_bytes(engine)
            t0 = time.perf_counter()
            out = tp_fifo(engine, "full", specs, inits, args.epochs)
            wall = time.perf_counter() - t0
        extra = {"after": after(engine, "full")} if after is not None else {}
        return {
            **extra,
            "wall_seconds": wall,
            "placement_seconds": place_s,
            "final_val_acc": {t: r["accs"][-1] for t, r in out.items()},
            "val_acc_per_epoch": {t: r["accs"] for t, r in out.items()},
            "per_config_seconds": {t: r["seconds"] for t, r in out.items()},
            "unit_seconds_sum": sum(r["unit_seconds"] for r in out.values()),
            "data_bytes_per_worker": held,
            "bytes_moved_replication": int(sum(held.values())),
            **rss.report(),
        }
    finally:
        engine.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ddp_phase(args: Any, specs: list, inits: dict, data: tuple) -> dict:
    import torch.multiprocessing as tmp

    X, y, Xv, yv = data
    jobs = [(s, float(s.options.get("momentum", 0.9)), s.options.get("clip", 5.0), inits[s.trial]) for s in specs]
    order = np.random.default_rng(args.seed).permutation(len(X))
    shard = len(X) // args.workers
    with tempfile.TemporaryDirectory(prefix="mop-bench-ddp-") as d:
        for r in range(args.workers):
            idx = order[r * shard:(r + 1) * shard]
            np.save(os.path.join(d, f"X{r}.npy"), X[idx])
            np.save(os.path.join(d, f"y{r}.npy"), y[idx])
        np.save(os.path.join(d, "Xv.npy"), Xv)
        np.save(os.path.join(d, "yv.npy"), yv)
        path = os.path.join(d, "ddp.json")
        ctx = tmp.start_processes(_ddp_rank, args=(args.workers, free_port(), jobs, d, args.epochs,
                                                   args.ddp_batch, path),
                                  nprocs=args.workers, join=False, start_method="spawn")
        pids = {f"rank{i}": p for i, p in enumerate(ctx.pids())}
        with RSSSampler(pids) as rss:  # the ranks start by importing torch: peak only
            while not ctx.join(timeout=0.05):
                pass
        with open(path) as f:
            res = json.load(f)
    per = {c["trial"]: c for c in res["configs"]}
    n_params = res["configs"][0]["params"] if res["configs"] else 0
    steps = sum(c["steps"] for c in res["configs"])
    return {
        "wall_seconds": res["seconds"],
        "batch_per_rank": args.ddp_batch,
        "global_batch": args.ddp_batch * args.workers,
        "final_val_acc": {t: c["acc"] for t, c in per.items()},
        "per_config_seconds": {t: c["seconds"] for t, c in per.items()},
        "steps_per_rank": steps,
        "params": n_params,
        "bytes_moved_allreduce_estimate": allreduce_bytes(n_params, steps, args.workers),
        "data_bytes_per_worker": {f"rank{i}": b for i, b in enumerate(res["data_bytes"])},
        "peak_rss_mb": rss.report()["peak_rss_mb"],
    }


def seed_specs(proc_factory: Any, cands: list, X: np.ndarray, y: np.ndarray, seed: int) -> tuple[list, dict]:
    """The unit specs of the grid under training seed ``seed`` and their
    initial checkpoints (the same ones ``MOPRunner(seed=seed)`` builds)."""
    from ease_jupyter.execution.units import UnitSpec, initial_checkpoint

    specs = [UnitSpec.of(s.id, s.model, s.params, cands[0].build, seed=seed) for s in proc_factory().start()]
    return specs, {s.trial: initial_checkpoint(s, X, y) for s in specs}


def accuracy_seed_runs(args: Any, cands: list, proc_factory: Any, data: tuple, warm: tuple,
                       seeds: list[int], engine: Any = None, key: str | None = None) -> dict:
    """(e) Accuracy over training seeds: for each seed, one MOP run
    (``MOPRunner(seed=s)``) and one task-parallel run (specs with seed ``s``)
    on ONE engine (``engine``, whose workers hold ``((X, y), (Xv, yv))``
    under ``key``, or a fresh one), one after the other. The train/validation split is fixed
    (``--seed``); the training seed sets the initial weights (shared by both
    methods), MOP's once-only shuffle into partitions and its schedule, and
    every unit's mini-batch order. MOP's visit order also depends on which
    worker frees up first; it is logged per seed. Wall times are recorded but
    not used for any ratio."""
    from ease_jupyter.execution.mop.runner import MOPRunner

    X, y, Xv, yv = data
    out: dict[int, dict] = {}
    if not seeds:
        return out
    own = engine is None
    if own:
        engine = start_engine(args.workers, warm)
        key = "full-acc"
        engine.place(key, ((X, y), (Xv, yv)), engine.workers())
    try:
        for i, s in enumerate(seeds):
            specs, inits = seed_specs(proc_factory, cands, X, y, s)
            r: dict[str, Any] = {}

            def mop() -> None:
                t0 = time.perf_counter()
                res = MOPRunner(engine, proc_factory(), cands, X, y, validation=(Xv, yv), seed=s).run()
                final, per_epoch, visits = mop_curves(res)
                r["mop"] = {"final_val_acc": final, "val_acc_per_epoch": per_epoch, "visit_order": visits,
                            "wall_seconds": time.perf_counter() - t0}

            def tp() -> None:
                t0 = time.perf_counter()
                res = tp_fifo(engine, key, specs, inits, args.epochs)
                r["task_parallel"] = {"final_val_acc": {t: v["accs"][-1] for t, v in res.items()},
                                      "val_acc_per_epoch": {t: v["accs"] for t, v in res.items()},
                                      "wall_seconds": time.perf_counter() - t0}

            for phase in ((mop, tp) if i % 2 == 0 else (tp, mop)):
                phase()
            out[s] = r
            print(f"    (e) seed {s}: MOP {_fmt_accs(r['mop']['final_val_acc'])}  "
                  f"TP {_fmt_accs(r['task_parallel']['final_val_acc'])}", flush=True)
    finally:
        if own:
            engine.close()
    return out


def _fmt_accs(acc: dict) -> str:
    return " ".join(f"{acc[t]:.3f}" for t in sorted(acc))


def make_warm(cands: list, X: np.ndarray, y: np.ndarray, seed: int) -> tuple:
    """(partition, checkpoint, spec) of the warm-up unit every worker runs first."""
    from ease_jupyter.execution.units import UnitSpec, initial_checkpoint

    spec = UnitSpec.of("warm", cands[0].name, {"lr": 0.01}, cands[0].build, seed=seed).at(0, 0)
    return (X[:64], y[:64]), initial_checkpoint(spec, X[:64], y[:64]), spec


def real_runs(args: Any, tile: int, cands: list, proc_factory: Any, reps: int = 1,
              acc_seeds: list[int] | None = None) -> dict:
    """(b) and (c) on the training set tiled ``tile`` times: MOP, then task
    parallelism, then DDP, each on its own fresh processes. With
    ``acc_seeds``, (e) runs those seeds on the first task-parallel engine
    after its timed run (under ``"accuracy_seed_runs"``)."""
    data = load_data(tile, args.seed)
    X, y, Xv, yv = data
    specs, inits = seed_specs(proc_factory, cands, X, y, args.seed)  # the runner builds the same ones
    print(f"(b) tile x{tile}: {len(specs)} configs x {args.epochs} epochs, {len(X)} training / {len(Xv)} "
          f"validation images", flush=True)
    warm = make_warm(cands, X, y, args.seed)
    phases = {
        "mop": lambda: run_mop_phase(args, proc_factory, cands, data, warm),
        "task_parallel": lambda: run_tp_phase(args, specs, inits, data, warm, after=after.pop() if after else None),
        "ddp": lambda: run_ddp_phase(args, specs, inits, data),
    }
    after = [lambda engine, key: accuracy_seed_runs(args, cands, proc_factory, data, warm, acc_seeds,
                                                    engine=engine, key=key)] if acc_seeds else []
    runs: dict[str, list[dict]] = {k: [] for k in phases}
    for rep in range(reps):
        # other jobs share the machine: alternate the order (ABC, CBA, ...)
        order = list(phases) if rep % 2 == 0 else list(phases)[::-1]
        for name in order:
            t = time.perf_counter()
            runs[name].append(phases[name]())
            print(f"    rep {rep} {name}: {runs[name][-1]['wall_seconds']:.1f} s "
                  f"({time.perf_counter() - t:.0f} s with start-up)", flush=True)
    acc_runs: dict = {}
    for r in runs["task_parallel"]:
        acc_runs.update(r.pop("after", None) or {})
    # per method: the repetition with the MINIMUM wall time (the least
    # disturbed by the other jobs on the host), with all wall times listed
    out = {}
    for name, rs in runs.items():
        best = min(rs, key=lambda r: r["wall_seconds"])
        out[name] = {**best, "wall_seconds_reps": [r["wall_seconds"] for r in rs],
                     "final_val_acc_reps": [r["final_val_acc"] for r in rs],
                     "val_acc_per_epoch_reps": [r.get("val_acc_per_epoch") for r in rs]}
        if name == "mop":
            out[name]["visit_order_reps"] = [r["visit_order"] for r in rs]
    mop, tp, ddp = out["mop"], out["task_parallel"], out["ddp"]
    shares = [r["hop"]["share"] for r in runs["mop"]]
    mop["hop"] = {**mop["hop"], "share": statistics.median(shares), "share_reps": shares}
    return {
        "tile": tile,
        "train_examples": int(len(X)),
        "val_examples": int(len(Xv)),
        "reps": reps,
        "ratios_per_rep": [
            {"time_ratio_mop_vs_task_parallel": m["wall_seconds"] / t["wall_seconds"],
             "time_ratio_ddp_vs_mop_batch32": d["wall_seconds"] / m["wall_seconds"]}
            for m, t, d in zip(runs["mop"], runs["task_parallel"], runs["ddp"])
        ],
        "ratios": {
            "time_ratio_mop_vs_task_parallel": mop["wall_seconds"] / tp["wall_seconds"],
            "time_ratio_ddp_vs_mop_batch32": ddp["wall_seconds"] / mop["wall_seconds"],
            "accuracy_gap_mop_vs_task_parallel": accuracy_gap(mop["final_val_acc"], tp["final_val_acc"])["mean"],
        },
        "mop": mop,
        "task_parallel": tp,
        "ddp": ddp,
        "accuracy_seed_runs": acc_runs,
    }


# ---------------------------------------------------------------------------


def markdown(r: dict) -> str:
    top = r["summary"]
    lines = ["| figure | measured | target | met |", "|---|---|---|---|"]
    for k, v in top.items():
        target = TARGETS.get(k, "-")
        met = r["targets_met"].get(k)
        lines.append(f"| `{k}` | {v:.4g} | {target} | {'-' if met is None else ('yes' if met else 'NO')} |")
    b = r["real_runs"]
    if "accuracy_over_seeds" in r:
        lines += ["", accuracy_markdown(r["accuracy_over_seeds"]).rstrip()]
    lines += ["", "Single run at seed --seed (each method's minimum-time repetition):", "",
              "| config | MOP acc | task-parallel acc | DDP acc | params |", "|---|---|---|---|---|"]
    for t in sorted(b["mop"]["final_val_acc"]):
        lines.append(f"| {t} | {b['mop']['final_val_acc'][t]:.3f} | {b['task_parallel']['final_val_acc'].get(t, float('nan')):.3f} | "
                     f"{b['ddp']['final_val_acc'].get(t, float('nan')):.3f} | {b['configs'][t]} |")
    lines += ["", "| method | wall s, min (all reps) | data bytes / worker | peak RSS MB / worker | bytes moved |", "|---|---|---|---|---|"]
    for name, key in (("MOP", "bytes_moved_checkpoints"), ("task parallel", "bytes_moved_replication"),
                      ("DDP", "bytes_moved_allreduce_estimate")):
        m = b[{"MOP": "mop", "task parallel": "task_parallel", "DDP": "ddp"}[name]]
        data = ", ".join(str(v) for v in m["data_bytes_per_worker"].values())
        rss = ", ".join(f"{v:.0f}" for v in m["peak_rss_mb"].values())
        reps = ", ".join(f"{v:.1f}" for v in m.get("wall_seconds_reps", [m["wall_seconds"]]))
        lines.append(f"| {name} | {m['wall_seconds']:.1f} ({reps}) | {data} | {rss} | {m[key]} |")
    sweep = r.get("unit_size_sweep") or {}
    if sweep:
        lines += ["", "| training set | MOP / TP time | DDP / MOP time | hop overhead share | MOP worker busy share |",
                  "|---|---|---|---|---|"]
        n_reps = len(b["mop"].get("wall_seconds_reps", [0]))
        rows = [(f"x{b['tile']} (headline, {b['train_examples']} images, min of {n_reps})",
                 r["time_ratio_mop_vs_task_parallel"], r["time_ratio_ddp_vs_mop_batch32"],
                 r["hop_overhead_share"], b["mop"]["busy_share"])]
        for k, v in sweep.items():
            rows.append((f"{k.replace('tile', 'x')} ({v['train_examples']} images, 1 run)",
                         v["time_ratio_mop_vs_task_parallel"], v["time_ratio_ddp_vs_mop_batch32"],
                         v["hop_overhead_share"], v["mop_busy_share"]))
        for name, a, d, h, busy in rows:
            lines.append(f"| {name} | {a:.3f} | {d:.3f} | {h:.3f} | {busy:.3f} |")
    lines += ["", "| Figure 6 cell | mean ratio | min | max |", "|---|---|---|---|"]
    for cell, v in r["scheduler"]["cells"].items():
        lines.append(f"| {cell} | {v['mean']:.3f} | {v['min']:.3f} | {v['max']:.3f} |")
    return "\n".join(lines) + "\n"


def meta(args: Any, quick: bool, started: float, load_start: list, torch: Any) -> dict:
    return {
        "quick": quick,
        "accuracy_only": bool(args.accuracy_only),
        "seed": args.seed,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": time.perf_counter() - started,
        "load_average_start_end": [load_start, list(os.getloadavg())],
        "notes": [
            "time ratios are wall seconds of the training runs only: engine start-up, worker warm-up "
            "(torch import), data placement and DDP process spawn are excluded",
            "MOP wall time includes its per-epoch validation units; task parallelism also evaluates "
            "after every epoch; DDP evaluates once at the end (rank 0, outside the timed loop)",
            "DDP batch is PER RANK (global = per rank x workers)",
            "DDP all-reduce bytes are an estimate: 2 (p-1)/p x params x 4 bytes per rank per step",
            "memory_ratio is placed data bytes per worker, measured on the Dask workers; peak RSS is "
            "reported too but is dominated by torch/Dask (hundreds of MB vs a few MB of data)",
            "accuracy: one MOP and one task-parallel run per training seed, same train/validation split; "
            "noise = each method's own spread over seeds; accuracies do not depend on timing except through "
            "MOP's visit order (logged per seed)",
        ],
    }


def accuracy_section(runs: dict[int, dict], configs: dict, sources: dict[int, str],
                     default_source: str = "accuracy_seed_runs (one engine)") -> dict:
    """(e) per seed results, per config statistics and the comparison."""
    seeds = sorted(runs)
    by = {m: {t: [runs[s][m]["final_val_acc"][t] for s in seeds] for t in configs}
          for m in ("mop", "task_parallel")}
    return {
        "seeds": seeds,
        "what_a_seed_sets": "initial weights (shared by both methods), MOP's once-only shuffle into partitions "
                            "and its scheduler, every unit's mini-batch order; the train/validation split is fixed",
        "sources": {str(s): sources.get(s, default_source) for s in seeds},
        "final_val_acc": {m: {t: v for t, v in d.items()} for m, d in by.items()},
        "comparison": compare_over_seeds(by["mop"], by["task_parallel"]),
        "per_seed": {str(s): runs[s] for s in seeds},
    }


def accuracy_markdown(acc: dict) -> str:
    c = acc["comparison"]
    lines = [f"Final validation accuracy over training seeds {acc['seeds']} (mean ± sd [min, max]); "
             f"SE(Δ) = sqrt(sd_MOP²/n + sd_TP²/n)", "",
             "| config | MOP | task parallel | gap of means | 2·SE(Δ) | within 2·SE | MOP mean in TP range | Welch p (Holm) |",
             "|---|---|---|---|---|---|---|---|"]
    for t, v in c["per_config"].items():
        m, p = v["mop"], v["task_parallel"]
        lines.append(f"| {t} | {m['mean']:.3f} ± {m['sd']:.3f} [{m['min']:.3f}, {m['max']:.3f}] | "
                     f"{p['mean']:.3f} ± {p['sd']:.3f} [{p['min']:.3f}, {p['max']:.3f}] | {v['gap']:.3f} | "
                     f"{2 * v['se_diff']:.3f} | {'yes' if v['within_k_se'] else 'NO'} | "
                     f"{'yes' if v['mop_mean_in_tp_range'] else 'no'} | {v['welch_p']:.3g} ({v['holm_p']:.3g}) |")
    lines += ["", f"Mean gap {c['mean_gap']:.4f}, mean 2·SE(Δ) {c['mean_k_se']:.4f}; "
                  f"{c['configs_within_k_se']}/{c['configs']} configs within 2·SE, "
                  f"{c['configs_mop_mean_in_tp_range']}/{c['configs']} with MOP's mean in TP's range; "
                  f"{c['configs_significant']}/{c['configs']} significant after Holm at {c['alpha']}.", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 configs, 1 epoch, untiled data: < 1 minute")
    ap.add_argument("--epochs", type=int, default=None, help="epochs per config (default 8; quick 1)")
    ap.add_argument("--tile", type=int, default=None, help="training-set copies with 1-pixel shifts (default 8; quick 1)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ddp-batch", type=int, default=32, help="DDP batch PER RANK (default 32)")
    ap.add_argument("--hop-units", type=int, default=None, help="units in the hop probe chain (default 12; quick 6)")
    ap.add_argument("--sweep-tiles", type=int, nargs="*", default=None,
                    help="extra tiles to repeat (b) at, ratios only (default 2; quick none)")
    ap.add_argument("--reps", type=int, default=None,
                    help="repetitions of (b) at --tile, alternating the method order; min wall time "
                         "per method (default 2; quick 1)")
    ap.add_argument("--seed", type=int, default=0,
                    help="train/validation split and the timed runs' training seed (default 0)")
    ap.add_argument("--acc-seeds", type=int, default=None,
                    help="training seeds --seed, --seed+1, ... for the accuracy comparison (e); seed --seed "
                         "reuses the first timed repetition (default 5; quick 2)")
    ap.add_argument("--accuracy-only", action="store_true",
                    help="run only (e) at --tile (all seeds on one engine) and write mop_accuracy.json")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--render", type=Path, default=None, help="only rewrite the .md next to this results JSON")
    args = ap.parse_args(argv)
    if args.render is not None:
        args.render.with_suffix(".md").write_text(markdown(json.loads(args.render.read_text())))
        return 0
    quick = args.quick
    args.epochs = args.epochs or (1 if quick else 4)
    args.tile = args.tile or (1 if quick else 8)
    args.sweep_tiles = args.sweep_tiles if args.sweep_tiles is not None else ([] if quick else [2])
    args.hop_units = args.hop_units or (6 if quick else 12)
    args.reps = args.reps or (1 if quick else 2)
    args.acc_seeds = args.acc_seeds or (2 if quick else 5)
    seeds = [args.seed + i for i in range(args.acc_seeds)]
    started = time.perf_counter()
    load_start = list(os.getloadavg())  # other jobs share this host: recorded, see meta

    import torch

    torch.set_num_threads(1)
    from ease_jupyter.execution.automl import GridSearch
    from ease_jupyter.execution.mop.simulation import decision_latency, figure6_grid
    from ease_jupyter.schema import parse
    from ease_jupyter.zoo import candidates

    program = "input: [8,8,1] output: [10]"
    cands = [c for c in candidates(parse(program)) if c.name == "lenet"]
    grid = {"lr": [0.1, 0.03]} if quick else {"lr": [0.1, 0.05, 0.02, 0.01], "momentum": [0.9, 0.5]}

    def proc_factory() -> Any:
        return GridSearch("lenet", grid, epochs=args.epochs)

    configs = {s.id: dict(s.params) for s in proc_factory().start()}
    if args.accuracy_only:
        data = load_data(args.tile, args.seed)
        print(f"(e) tile x{args.tile}: {len(configs)} configs x {args.epochs} epochs, seeds {seeds}", flush=True)
        runs = accuracy_seed_runs(args, cands, proc_factory, data, make_warm(cands, data[0], data[1], args.seed), seeds)
        acc = accuracy_section(runs, configs, {})
        results = {"accuracy_over_seeds": acc, "real_runs": {"program": program, "grid": grid, "epochs": args.epochs,
                                                            "tile": args.tile, "configs": configs,
                                                            "train_examples": int(len(data[0])),
                                                            "val_examples": int(len(data[2]))},
                   "meta": meta(args, quick, started, load_start, torch)}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "mop_accuracy.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
        (args.out / "mop_accuracy.md").write_text(accuracy_markdown(acc))
        print(accuracy_markdown(acc))
        print(f"wrote {args.out / 'mop_accuracy.json'} in {time.perf_counter() - started:.0f} s")
        return 0

    # (a) and (d): simulation and scheduler cost
    rows = figure6_grid(seeds=range(5))
    sched = summarize_grid(rows)
    lat = decision_latency(256, 64, seed=args.seed, max_decisions=3000 if quick else None)
    print(f"(a) makespan / lower bound: mean {sched['mean']:.4f} max {sched['max']:.4f}", flush=True)
    print(f"(d) decision p50 {lat['p50_ms']:.4f} ms, p99 {lat['p99_ms']:.4f} ms", flush=True)

    # (b) real runs
    # (e) accuracy over training seeds: seed --seed is the first timed
    # repetition of each method; the others run on the first task-parallel
    # engine after its timed run
    print(f"(e) accuracy over training seeds {seeds}: {seeds[1:]} run after the first timed TP run", flush=True)
    head = real_runs(args, args.tile, cands, proc_factory, reps=args.reps, acc_seeds=seeds[1:])
    mop, tp, ddp = head["mop"], head["task_parallel"], head["ddp"]
    reused = {args.seed: {
        "mop": {"final_val_acc": mop["final_val_acc_reps"][0], "val_acc_per_epoch": mop["val_acc_per_epoch_reps"][0],
                "visit_order": mop["visit_order_reps"][0]},
        "task_parallel": {"final_val_acc": tp["final_val_acc_reps"][0],
                          "val_acc_per_epoch": tp["val_acc_per_epoch_reps"][0]},
    }}
    acc_runs = {**reused, **head["accuracy_seed_runs"]}
    acc = accuracy_section(acc_runs, configs, {args.seed: "the first timed repetition of (b)"},
                           "the first task-parallel engine of (b), after its timed run")
    sweep = {}
    for tile in args.sweep_tiles:
        if tile != args.tile:
            r = real_runs(args, tile, cands, proc_factory)
            sweep[f"tile{tile}"] = {"train_examples": r["train_examples"], "reps": 1, **r["ratios"],
                                    "hop_overhead_share": r["mop"]["hop"]["share"],
                                    "mop_busy_share": r["mop"]["busy_share"]}
    X, Xv = head["train_examples"], head["val_examples"]
    # the single-run figures of earlier versions (seed --seed, minimum-time repetition), for reference only
    gap1 = accuracy_gap(mop["final_val_acc"], tp["final_val_acc"])
    noise1 = accuracy_noise(tp["final_val_acc"], Xv)
    cmp = acc["comparison"]
    mop_data = statistics.fmean(mop["data_bytes_per_worker"].values())
    tp_data = statistics.fmean(tp["data_bytes_per_worker"].values())
    n_params = ddp["params"]
    summary = {
        "makespan_ratio_to_lower_bound": sched["mean"],
        "time_ratio_mop_vs_task_parallel": mop["wall_seconds"] / tp["wall_seconds"],
        "memory_ratio_mop_vs_task_parallel": mop_data / tp_data,
        "time_ratio_ddp_vs_mop_batch32": ddp["wall_seconds"] / mop["wall_seconds"],
        "hop_overhead_share": mop["hop"]["share"],
        "accuracy_gap_mop_vs_task_parallel": cmp["mean_gap"],
        "decision_ms_256x64": lat["p50_ms"],
    }
    met = {
        "makespan_ratio_to_lower_bound": sched["mean"] <= 1.1,
        "accuracy_gap_mop_vs_task_parallel": cmp["no_significant_difference"],
        "memory_ratio_mop_vs_task_parallel": abs(summary["memory_ratio_mop_vs_task_parallel"] - 1 / args.workers) <= 0.1 / args.workers,
        "time_ratio_ddp_vs_mop_batch32": summary["time_ratio_ddp_vs_mop_batch32"] > 1.0,
        "hop_overhead_share": summary["hop_overhead_share"] < 0.05,
    }
    results = {
        **summary,
        "summary": summary,
        "targets": TARGETS,
        "targets_met": met,
        "noise_accuracy_diff": cmp["mean_k_se"],
        "accuracy_gap_per_config": {t: v["gap"] for t, v in cmp["per_config"].items()},
        "accuracy_gap_in_se_per_config": {t: v["gap_in_se"] for t, v in cmp["per_config"].items()},
        "accuracy_gap_median": statistics.median(v["gap"] for v in cmp["per_config"].values()),
        "accuracy_over_seeds": acc,
        "accuracy_single_run_seed0": {
            "gap_mean": gap1["mean"], "gap_per_config": gap1["per_config"],
            "binomial_noise": noise1,
            "note": "the figure of earlier versions: MOP's minimum-time repetition vs task parallelism at seed "
                    "--seed only, against the binomial standard error of a difference of two accuracies on the "
                    "validation set. Both methods use the SAME validation set, and the binomial error ignores "
                    "the training-path variance that dominates here; it is kept for reference, not as the target",
        },
        "memory_ratio_peak_rss_mop_vs_task_parallel": (statistics.fmean(mop["peak_rss_mb"].values())
                                                       / statistics.fmean(tp["peak_rss_mb"].values())),
        "time_ratio_mop_vs_ddp": mop["wall_seconds"] / ddp["wall_seconds"],
        "scheduler": {**sched, "rows": rows, "settings": "Cerebro §5.4 Figure 6: 16/256 configs x 8/16 workers x "
                      "homogeneous/heterogeneous, seeds 0-4, replication 1; bound = max(L_max, max per-config total)"},
        "decision_latency": lat,
        "real_runs": {
            "program": program,
            "model": "lenet (zoo candidate)",
            "grid": grid,
            "epochs": args.epochs,
            "tile": args.tile,
            "reps": args.reps,
            "train_examples": X,
            "val_examples": Xv,
            "workers": args.workers,
            "batch_size_units": 32,
            "configs": configs,
            "params_per_model": n_params,
            "mop": mop,
            "task_parallel": tp,
            "ddp": ddp,
        },
        "unit_size_sweep": sweep,
        "meta": meta(args, quick, started, load_start, torch),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "mop_quick" if quick else "mop"
    (args.out / f"{name}.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    (args.out / f"{name}.md").write_text(markdown(results))
    for k, v in summary.items():
        print(f"{k:40s} {v:.4g}  {'' if k not in met else ('met' if met[k] else 'MISSED')}")
    print(f"wrote {args.out / (name + '.json')} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
