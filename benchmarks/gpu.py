"""Benchmark of MOP training units on one GPU against a plain torch loop.

    python benchmarks/gpu.py            # full: 50,000 images, 4 units per arm, up to 5 repeats, measuring for 200 s at most
    python benchmarks/gpu.py --quick    # 8,192 images, 2 units per arm, 2 repeats, 45 s at most

Writes benchmarks/results/gpu.json (``--quick``: gpu_quick.json, which git
ignores). Where torch sees no CUDA device it says so, writes a JSON that says
so (never over a result measured on a GPU) and exits 0.

What is measured. One GPU is one MOP worker (Cerebro §4.3: a worker trains
one unit at a time; dask-cuda gives each GPU its own worker process). The
worker holds one partition of N synthetic 32x32x3 images (10 classes, a
learnable linear rule) and trains the zoo's SmallResNet (``--net``) with
batch size 256, in three arms that each see the same number of examples:

* **mop**: C = 2 configs (learning rates 0.05 and 0.1) take turns on the
  partition, U units in all; each unit is ``units.train_unit``: read the
  config's checkpoint from a directory ("directory" hop, local disk), load
  it onto the GPU, train one sub-epoch, save it device-neutral (CPU tensors)
  and write it. The partition's tensors stay on the GPU between units
  (``units.DEVICE_PARTITION_SHARE``); their one copy per worker is reported
  apart (``partition_to_device_s``). The units run with their default
  kernels on a GPU: torch's fast ones with cuDNN autotuning
  (``Hooks(deterministic=None)``).
* **plain**: one model of the same net from the same initial weights, in a
  plain torch loop (``randperm`` on the GPU, forward, cross-entropy,
  backward, the same gradient clipping, SGD step) for U epochs over the
  same data already on the GPU, with the same kernels as the units (fast,
  cuDNN autotuning).
* **plain_det**: the plain loop with deterministic algorithms on (what
  ``Hooks(deterministic=True)`` gives the units): the gap between plain
  and plain_det is the price of bit-identical re-runs on a GPU.

Each arm runs in fp32, bf16 (autocast) and fp16 (autocast and a
``GradScaler``), through ``device.mixed_precision`` in all three arms.
Throughput is images per second (examples trained / wall seconds, the GPU
synchronised around each piece). The arms take turns piece by piece (a MOP
unit, then a plain epoch, then a deterministic epoch, the order rotating),
so that a slow second of a shared machine falls on every arm alike: on this
workload the GPU waits for the CPU that launches its kernels, and the
machine's CPU speed varies from second to second. The headline is the
ratio mop / plain per precision, its mean with a 95% t-interval over
repeats. Target: mop >= 0.9 x plain.

Hop overhead: per MOP unit, ``hop_seconds`` (read + load + save + write the
checkpoint) against ``train_seconds`` (the sub-epoch), from the units' own
metrics; medians over units.

Only torch, numpy and this package's ``execution.units`` / ``execution.device``
/ ``zoo`` modules are imported (no Dask, no scipy). ``--budget-s`` bounds the
measured part: the image count is cut if the warm-up says a repeat would not
fit twice, and no repeat starts that would not end within the budget.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ease_jupyter.execution import blob_io, units  # noqa: E402
from ease_jupyter.execution.device import describe_device, mixed_precision, worker_device  # noqa: E402
from ease_jupyter.zoo.templates import TorchBuilder  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PRECISIONS = ("fp32", "bf16", "fp16")
ARMS = ("mop", "plain", "plain_det")
TARGET = 0.9
NETS = {"resnet_small": "SmallResNet", "lenet": "LeNet", "vgg_small": "SmallVGG", "mobilenet_small": "MobileNetLite"}
LRS = (0.05, 0.1)
CLIP = 5.0

# two-sided 95% Student t quantiles by degrees of freedom (no scipy on a bare GPU box)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def interval(values: list[float]) -> dict:
    """Mean with a two-sided 95% t-interval over repeats."""
    n = len(values)
    mean = statistics.fmean(values) if values else float("nan")
    if n < 2:
        return {"mean": mean, "lo": float("nan"), "hi": float("nan"), "n": n, "values": values}
    half = T95.get(n - 1, 1.96) * statistics.stdev(values) / math.sqrt(n)
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n": n, "values": values}


def synthetic_images(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 32x32x3 float32 images and labels from a fixed random linear rule (learnable)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 32, 32, 3), dtype=np.float32)
    W = rng.standard_normal((32 * 32 * 3, 10), dtype=np.float32)
    y = np.concatenate([np.argmax(X[a:a + 8192].reshape(-1, 3072) @ W, axis=1) for a in range(0, n, 8192)])
    return X, y.astype(np.int64)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- the arms --------------------------------------------------------------------------------


class Workload:
    """The partition, the configs and their initial checkpoints, shared by every arm."""

    def __init__(self, X: np.ndarray, y: np.ndarray, net: str, batch: int, units_per_arm: int, device: torch.device):
        self.X, self.y = X, y
        self.partition = (X, y)  # one object: a GPU worker keeps its tensors on the GPU between units
        self.batch, self.units, self.device = batch, units_per_arm, device
        builder = TorchBuilder(net, NETS[net], ((32, 32, 3), 10))
        self.specs = [units.UnitSpec.of(f"c{i}", net, {"lr": lr, "batch_size": batch, "clip": CLIP}, builder, seed=i)
                      for i, lr in enumerate(LRS)]
        self.initial = [units.initial_checkpoint(s, X, y) for s in self.specs]
        self.Xd = torch.as_tensor(X).to(device)
        self.yd = torch.as_tensor(y).to(device)

    @property
    def images(self) -> int:
        return self.units * len(self.X)


class MopArm:
    """C configs taking turns on the partition, each unit hopping through ``directory``."""

    def __init__(self, w: Workload, precision: str, directory: str):
        self.w, self.directory = w, directory
        self.hooks = units.Hooks(precision=precision)
        self.refs: list[Any] = [blob_io.write_atomic(directory, f"{s.trial}/init-{precision}.pt", ck)
                                for s, ck in zip(w.specs, w.initial)]
        self.metrics: list[dict] = []

    def piece(self, u: int) -> None:
        """Training unit ``u``: config ``u mod C``, its ``u div C``-th sub-epoch."""
        c = u % len(self.w.specs)
        out = units.train_unit(self.w.partition, self.refs[c], self.w.specs[c].at(u // len(self.w.specs), 0),
                               self.hooks, self.directory)
        blob_io.remove(self.refs[c])
        self.refs[c] = out.checkpoint
        self.metrics.append(dict(out.metrics))

    def close(self) -> None:
        for ref in self.refs:
            blob_io.remove(ref)


class PlainArm:
    """One model from the same initial weights, trained in a plain torch loop
    over the same data on the GPU; each piece is one epoch."""

    def __init__(self, w: Workload, precision: str, deterministic: bool):
        self.w, self.deterministic = w, deterministic
        spec = w.specs[0]
        self.net = units.default_model_fn(spec).to(w.device)
        self.opt = self.net.make_optimizer(spec.lr)
        units.load_checkpoint(self.net, self.opt, w.initial[0], spec.lr)
        self.net.train()
        self.amp = mixed_precision(precision, w.device)
        self.scaler = self.amp.scaler()
        self.total = torch.zeros((), device=w.device)
        self.metrics: list[dict] = []

    def piece(self, u: int) -> None:
        w, net, opt, scaler = self.w, self.net, self.opt, self.scaler
        n = len(w.Xd)
        was = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
        torch.use_deterministic_algorithms(self.deterministic, warn_only=True)
        torch.backends.cudnn.benchmark = not self.deterministic  # the units' policy on a GPU
        try:
            perm = torch.randperm(n, device=w.device)
            for a in range(0, n, w.batch):
                idx = perm[a:a + w.batch]
                opt.zero_grad(set_to_none=True)
                with self.amp.autocast():
                    loss = F.cross_entropy(net(w.Xd[idx]), w.yd[idx])
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
                    scaler.step(opt)
                    scaler.update()
                else:
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
                    opt.step()
                self.total += loss.detach()
            _sync(w.device)
        finally:
            torch.use_deterministic_algorithms(was[0], warn_only=True)
            torch.backends.cudnn.benchmark = was[1]

    def close(self) -> None:
        if not math.isfinite(float(self.total)):
            print("  note: a plain loop's loss is not finite", flush=True)


def make_arm(w: Workload, arm: str, precision: str, directory: str) -> MopArm | PlainArm:
    if arm == "mop":
        return MopArm(w, precision, directory)
    return PlainArm(w, precision, deterministic=arm == "plain_det")


def run_interleaved(w: Workload, arms: tuple[str, ...], precision: str, directory: str) -> tuple[dict[str, float], list[dict]]:
    """Every arm trains U pieces (a unit, or an epoch), the arms taking turns
    piece by piece, so a slow second of the machine falls on all of them.
    Returns each arm's seconds over its pieces, and the MOP units' metrics."""
    made = {a: make_arm(w, a, precision, directory) for a in arms}
    seconds = dict.fromkeys(arms, 0.0)
    for u in range(w.units):
        for a in arms[u % len(arms):] + arms[:u % len(arms)]:
            _sync(w.device)
            started = time.perf_counter()
            made[a].piece(u)
            _sync(w.device)
            seconds[a] += time.perf_counter() - started
    for arm in made.values():
        arm.close()
    return seconds, made["mop"].metrics if "mop" in made else []


# -- the benchmark ----------------------------------------------------------------------------------


def measure(args: argparse.Namespace, device: torch.device) -> dict:
    started = time.perf_counter()
    X, y = synthetic_images(args.images)
    directory = tempfile.mkdtemp(prefix="easeml-gpu-bench-")
    # warm-up on a slice: CUDA context, cuDNN/cuBLAS handles, the allocator, each precision's kernels
    # (every batch here and below has the same shape: cuDNN autotunes each new
    # shape once, which must not land in a measured arm)
    warm = Workload(X[:args.batch * 8], y[:args.batch * 8], args.net, args.batch, 2, device)
    warm_ips = {}
    for p in PRECISIONS:
        run_interleaved(warm, ARMS, p, directory)
        seconds, _ = run_interleaved(warm, ARMS, p, directory)
        for arm in ARMS:
            warm_ips[(arm, p)] = warm.images / seconds[arm]
    del warm
    # a repeat must fit twice in the budget: cut the images if the warm-up says it would not
    budget = args.budget_s - (time.perf_counter() - started)
    per_image = sum(1.0 / v for v in warm_ips.values())  # seconds per image per unit, all arms and precisions
    n = len(X) - len(X) % args.batch
    fit = int(budget / 2.5 / (per_image * args.units))
    if fit < n:
        n = max(args.batch * 4, fit - fit % args.batch)
        print(f"budget: {n} of {len(X)} images per partition", flush=True)
    w = Workload(X[:n], y[:n], args.net, args.batch, args.units, device)
    del X, y
    _sync(device)
    t0 = time.perf_counter()
    units._unit_tensors(w.partition, units.Hooks(), device)  # the worker's one copy of its partition
    _sync(device)
    to_device = time.perf_counter() - t0

    ips: dict[tuple[str, str], list[float]] = {(a, p): [] for a in ARMS for p in PRECISIONS}
    unit_metrics: dict[str, list[dict]] = {p: [] for p in PRECISIONS}
    repeat_seconds: list[float] = []
    measure_start = time.perf_counter()
    for r in range(args.repeats):
        spent = time.perf_counter() - started
        if repeat_seconds and spent + max(repeat_seconds) > args.budget_s:
            print(f"budget: stopping after {r} repeats ({spent:.0f} s spent)", flush=True)
            break
        r_start = time.perf_counter()
        for p in PRECISIONS:
            seconds, m = run_interleaved(w, ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)], p, directory)
            for arm in ARMS:
                ips[(arm, p)].append(w.images / seconds[arm])
            unit_metrics[p].extend(m)
            print(f"repeat {r} {p}: " + ", ".join(f"{a} {ips[(a, p)][-1]:,.0f} img/s" for a in ARMS), flush=True)
        repeat_seconds.append(time.perf_counter() - r_start)

    per_precision = {}
    for p in PRECISIONS:
        mop, plain, det = ips[("mop", p)], ips[("plain", p)], ips[("plain_det", p)]
        ms = unit_metrics[p]
        ratio = interval([a / b for a, b in zip(mop, plain)])
        per_precision[p] = {
            "effective_precision": mixed_precision(p, device).effective,
            "images_per_s": {a: {"median": statistics.median(ips[(a, p)]), "values": ips[(a, p)]} for a in ARMS},
            "ratio_mop_over_plain": ratio,
            "ratio_mop_over_plain_det": interval([a / b for a, b in zip(mop, det)]),
            "ratio_plain_det_over_plain": interval([a / b for a, b in zip(det, plain)]),
            "target_met": bool(ratio["n"] and ratio["mean"] >= TARGET),
            "hop": {
                "unit_seconds_median": statistics.median(m["seconds"] for m in ms),
                "train_seconds_median": statistics.median(m["train_seconds"] for m in ms),
                "hop_seconds_median": statistics.median(m["hop_seconds"] for m in ms),
                "input_seconds_median": statistics.median(m["input_seconds"] for m in ms),
                "hop_share_median": statistics.median(m["hop_seconds"] / m["seconds"] for m in ms),
                "checkpoint_bytes": ms[0]["checkpoint_bytes"],
                "units_on_gpu": sum(m["gpu"] for m in ms),
                "units": len(ms),
            } if ms else {},
        }
    return {
        "images": n,
        "units_per_arm": w.units,
        "configs": len(w.specs),
        "batch_size": w.batch,
        "net": args.net,
        "repeats_done": len(repeat_seconds),
        "partition_to_device_s": to_device,
        "partition_bytes": int(w.X.nbytes + w.y.nbytes),
        "warmup_images_per_s": {f"{a}/{p}": v for (a, p), v in warm_ips.items()},
        "precisions": per_precision,
        "measured_seconds": time.perf_counter() - measure_start,
    }


def _write(out: Path, result: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8,192 images, 2 units per arm, 2 repeats; writes gpu_quick.json")
    parser.add_argument("--images", type=int, default=None, help="images in the worker's partition (default 50,000; quick 8,192)")
    parser.add_argument("--units", type=int, default=None, help="training units (plain: epochs) per arm (default 4; quick 2)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats at most (default 5; quick 2)")
    parser.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
    parser.add_argument("--net", choices=sorted(NETS), default="resnet_small", help="zoo image net (default resnet_small)")
    parser.add_argument("--budget-s", type=float, default=None, help="seconds for the whole run at most (default 200; quick 45)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON")
    parser.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)  # a tiny end-to-end run on the CPU
    args = parser.parse_args(argv)
    args.images = args.images or (8192 if args.quick else 50_000)
    args.units = args.units or (2 if args.quick else 4)
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.budget_s = args.budget_s or (45.0 if args.quick else 200.0)
    out = args.out or RESULTS / ("gpu_quick.json" if args.quick else "gpu.json")
    warnings.filterwarnings("ignore", message=".*does not have a deterministic implementation.*")
    head = {"what": "MOP training units vs a plain torch loop on one GPU (images/s per GPU)", "target": TARGET,
            "mode": "quick" if args.quick else "full", "torch": torch.__version__, "python": platform.python_version()}

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print("benchmarks/gpu.py needs CUDA: torch.cuda.is_available() is False on this machine; nothing measured")
        try:
            previous = json.loads(out.read_text()) if out.exists() else {}
        except ValueError:
            previous = {}
        if previous.get("cuda"):
            print(f"kept {out.name}: it holds a result measured on a GPU")
        else:
            _write(out, {**head, "cuda": False, "reason": "torch.cuda.is_available() is False"})
        return 0
    device = worker_device()
    if not cuda:
        args.images, args.units, args.repeats, args.batch = min(args.images, 512), 2, min(args.repeats, 2), 64
        out = args.out or RESULTS / "gpu_cpu_check_quick.json"
    desc = describe_device(device)
    print(f"device {desc.kind} ({(desc.total_memory or 0) / 2**30:.1f} GiB), {args.images} images, "
          f"{args.units} units per arm, batch {args.batch}, {args.net}", flush=True)
    started = time.perf_counter()
    result = measure(args, device)
    for p, r in result["precisions"].items():
        ratio = r["ratio_mop_over_plain"]
        print(f"{p}: mop/plain {ratio['mean']:.3f} [{ratio['lo']:.3f}, {ratio['hi']:.3f}] "
              f"(target {TARGET}: {'met' if r['target_met'] else 'not met'}), "
              f"hop share {r['hop'].get('hop_share_median', float('nan')):.3f}")
    _write(out, {**head, "cuda": cuda, "device": desc.kind, "total_memory": desc.total_memory,
                 **result, "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    sys.exit(main())
