"""MOP training and validation units (Cerebro §3.1, §4.1) on zoo nets.

A *training unit* trains one config for one sub-epoch on one data partition;
a *validation unit* evaluates one config's checkpoint on one validation
partition. Both run on the worker that holds the partition and are plain,
picklable module-level functions, so every engine can ship them.

Hooks (Cerebro §4.1). Like Cerebro's ``input_fn``/``model_fn``/``train_fn``,
a :class:`Hooks` value says how to read a partition, how to build a net and
how to train it for one sub-epoch (plus how to evaluate it). The defaults use
the zoo's :class:`~ease_jupyter.zoo.nets.ZooModule` protocol::

    X, y = hooks.input_fn(partition)              # numpy (X, y) -> tensors
    net = hooks.model_fn(spec)                    # spec.builder(ModelConfig)
    opt = net.make_optimizer(lr)                  # then restore the checkpoint
    metrics = hooks.train_fn(net, opt, X, y, spec, generator)

Model hops (Cerebro §4.2-4.3). A checkpoint holds the net's ``state_dict``
(the ``adapt`` statistics are buffers, so they travel with the weights) and
the optimizer's state (SGD momentum), so a config resumes on the next
partition exactly where it stopped. It hops in one of two ways:

* ``"bytes"``: the checkpoint is a ``bytes`` value returned by the unit to
  the driver and passed to the next unit as an argument;
* ``"directory"``: the unit writes the checkpoint into a shared directory
  (write to a temporary name, then ``os.replace``) and only its path travels.
  The directory may also be an fsspec URL (``s3://...``) where the workers
  share no file system with the driver (``blob_io``); partitions can travel
  the same way (``blob_io.StagedPartition``, read by :func:`default_input_fn`).

Devices (docs/gpus.md). Each unit runs on its worker's device
(:func:`~ease_jupyter.execution.device.worker_device`: the worker's GPU when
it has one, else the CPU), chosen inside the unit, never by the driver. The
net, the partition's tensors and the mini-batch indices live there; a GPU
worker keeps the tensors of the partitions it holds on the GPU between units
(:data:`DEVICE_PARTITION_SHARE`). Checkpoints are saved with every tensor on
the CPU and loaded with ``map_location="cpu"``, then copied into the net on
the unit's device, so a config can hop between a GPU worker and a CPU worker. The training loop sums the
loss on the device and reads it once per unit (no host sync per batch,
except ``fp16``'s ``GradScaler``, which checks for infinite gradients at
every step). ``Hooks.precision`` opts into mixed precision (``bf16``;
``fp16`` with a gradient scaler whose state travels in the checkpoint). A
CUDA out-of-memory error becomes
:class:`~ease_jupyter.errors.DeviceOutOfMemoryError` and any other CUDA
failure :class:`~ease_jupyter.errors.DeviceFailedError`.

Measured on 2026-11-22 with :func:`measure_hop` (this machine: 2 CPU
cores shared with other jobs, Dask LocalCluster of 2 worker processes x 1
thread on one host, distributed 2026.8.0, torch 2.13 CPU; a chain of 12
units of a GRU classifier on 8 examples, hopping between the two workers at
every unit; wall seconds per unit seen by the driver, median, mean of two
repetitions):

================  ==============  ==================
checkpoint size   bytes (s/unit)  directory (s/unit)
================  ==============  ==================
35 KB             0.027           0.026
1.6 MB            0.056           0.041
25 MB             0.33            0.25
101 MB            1.53            1.03
================  ==============  ==================

With the checkpoint bytes embedded in the task graph (through the scheduler)
the bytes hop took 0.82 s (25 MB) and 2.8 s (101 MB) per unit; the Dask
engine therefore scatters checkpoint arguments over 1 MiB straight to the
unit's worker, which gives the numbers above. The directory hop is never
slower here (the page cache of one host serves the reads), so
:data:`DEFAULT_HOP` is ``"directory"`` wherever the workers share a file
system with the driver (the local engine, a Dask LocalCluster); a remote
cluster without a declared shared directory uses ``"bytes"`` (see
``MOPRunner(hop="auto")``). Both modes are tested.

Determinism. A unit seeds torch's global generators and a private CPU
``torch.Generator`` (which orders the mini-batches: the permutation is drawn
on the CPU and then moved to the device, so the batch order of a unit does
not depend on its device) from ``unit_seed(seed, trial, epoch, partition)``,
runs with one torch thread and deterministic algorithms (on a GPU only with
``Hooks(deterministic=True)``), and starts from the checkpoint the driver
gives it. So, on the CPU, a unit re-run after a worker
died gives bit-identical weights, and a run replayed with the same visit
order (``MOPScheduler(visit_order=...)``) ends with the same weights as the
original, whichever workers run the units. On one GPU model, with
``Hooks(deterministic=True)``, a unit re-run in fp32 gives bit-identical weights for nets whose kernels have deterministic
CUDA versions (``device`` sets ``CUBLAS_WORKSPACE_CONFIG``); a GPU and a
CPU, or two precisions, agree only to rounding (docs/gpus.md).

torch's global generator is one per process, shared by its threads (an
engine's worker threads, a unit still running on the thread of a worker
that was killed, the driver). Every net this module builds is built while
holding :data:`GLOBAL_RNG` (``build_net``), and the driver builds a trial's
initial weights under it from the trial's seed, so those weights never
depend on what other threads do meanwhile (a user's net is built in its own
child process, without the lock, under the same seed: ``build_net``). A net that itself draws from the
global generator while it trains (dropout) is reproducible only where one
unit runs per process (a Dask worker process with one thread).
"""

from __future__ import annotations

import hashlib
import io
import math
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution import blob_io
from ease_jupyter.execution.device import (
    PRECISIONS,
    classify_device_error,
    describe_device,
    mixed_precision,
    release_device_memory,
    worker_device,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEVICE_PARTITION_SHARE",
    "EVAL_BATCH_SIZE",
    "DEFAULT_HOP",
    "HOP_MODES",
    "HOP_MEASUREMENTS",
    "TRAIN_OPTIONS",
    "GLOBAL_RNG",
    "Hooks",
    "UnitSpec",
    "build_net",
    "UnitOutput",
    "combine_eval",
    "default_eval_fn",
    "default_input_fn",
    "default_model_fn",
    "default_train_fn",
    "eval_unit",
    "initial_checkpoint",
    "load_checkpoint",
    "load_model",
    "read_checkpoint",
    "save_checkpoint",
    "train_unit",
    "unit_seed",
]

HOP_MODES = ("bytes", "directory")

#: ``{mode: {checkpoint bytes: seconds per unit}}`` measured with
#: :func:`measure_hop` on 2026-11-22 (see the module docstring for the set-up).
HOP_MEASUREMENTS: dict[str, dict[int, float]] = {
    "bytes": {34_617: 0.027, 1_618_745: 0.056, 25_334_585: 0.33, 100_995_897: 1.53},
    "directory": {34_617: 0.026, 1_618_745: 0.041, 25_334_585: 0.25, 100_995_897: 1.03},
}

#: The faster hop mode on :data:`HOP_MEASUREMENTS` (needs a file system the
#: driver and the workers share).
DEFAULT_HOP = "directory"

DEFAULT_BATCH_SIZE = 32

#: Examples per forward pass of :func:`default_eval_fn` (no gradients kept).
EVAL_BATCH_SIZE = 256

#: Share of a GPU's memory that the partition tensors kept on it may take
#: (the most recently used partition is kept whatever its size).
DEVICE_PARTITION_SHARE = 0.25

#: Trial params the units consume; the others go to the model builder.
#: ``lr`` goes to both (the zoo's ``TorchBuilder`` accepts it and ignores it).
TRAIN_OPTIONS = ("lr", "batch_size", "momentum", "weight_decay", "clip")

#: Held while torch's global generator is seeded, restored, or drawn from to
#: build a net (see "Determinism" above).
GLOBAL_RNG = threading.RLock()


# -- specs -----------------------------------------------------------------------


@dataclass(frozen=True)
class UnitSpec:
    """What a unit needs besides its data and checkpoint.

    ``epoch`` counts the trial's own epochs (0 for its first), ``builder``
    maps a :class:`~ease_jupyter.zoo.ModelConfig` to a fresh, untrained net
    (a zoo ``Candidate.build``).
    """

    trial: str
    model: str
    params: tuple[tuple[str, Any], ...]
    builder: Callable[[Any], Any] = field(repr=False)
    epoch: int = 0
    partition: int = -1
    seed: int = 0

    @classmethod
    def of(cls, trial: str, model: str, params: Mapping[str, Any], builder: Callable[[Any], Any], *, seed: int = 0) -> "UnitSpec":
        return cls(trial, model, tuple(sorted(dict(params).items())), builder, seed=seed)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.params)

    def at(self, epoch: int, partition: int) -> "UnitSpec":
        return UnitSpec(self.trial, self.model, self.params, self.builder, epoch, partition, self.seed)

    def with_params(self, **changes: Any) -> "UnitSpec":
        """The same unit with some params replaced or added (e.g. a retry
        after an out-of-memory error with ``batch_size=spec.batch_size // 2``)."""
        return replace(self, params=tuple(sorted({**dict(self.params), **changes}.items())))

    @property
    def lr(self) -> float:
        lr = self.options.get("lr", 0.01)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
            raise EaseMLError(f"params['lr'] of trial {self.trial!r}: found {lr!r}, expected a positive finite number")
        return float(lr)

    @property
    def batch_size(self) -> int:
        bs = self.options.get("batch_size", DEFAULT_BATCH_SIZE)
        if isinstance(bs, bool) or not isinstance(bs, int) or bs < 2:
            raise EaseMLError(f"params['batch_size'] of trial {self.trial!r}: found {bs!r}, expected an integer >= 2 (BatchNorm needs 2)")
        return bs


@dataclass(frozen=True)
class UnitOutput:
    """A training unit's result: the new checkpoint (bytes or a path) and metrics."""

    checkpoint: bytes | str = field(repr=False)
    metrics: Mapping[str, float]


def unit_seed(seed: int, trial: str, epoch: int, partition: int) -> int:
    """A stable 63-bit seed for one unit (not Python's salted ``hash``)."""
    digest = hashlib.blake2b(f"{seed}/{trial}/{epoch}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


# -- default hooks -----------------------------------------------------------------


def default_input_fn(partition: Any) -> tuple[Any, Any]:
    """``(X, y)`` numpy arrays, or a :class:`~ease_jupyter.execution.blob_io.StagedPartition`
    holding them -> ``(float32 tensor, tensor)`` on the CPU; integer labels
    become int64, anything else float32. The unit moves them to its device."""
    import torch

    if isinstance(partition, blob_io.StagedPartition):
        partition = partition.load()
    X, y = partition
    x_t = torch.as_tensor(np.asarray(X, dtype=np.float32))
    y_np = np.asarray(y)
    y_t = torch.as_tensor(y_np.astype(np.int64) if y_np.dtype.kind in "iub" else y_np.astype(np.float32))
    return x_t, y_t


def default_model_fn(spec: UnitSpec) -> Any:
    """Build a fresh net: the trial's params minus the training-only ones."""
    from ease_jupyter.zoo import ModelConfig

    allowed = getattr(spec.builder, "allowed", None)
    options = {
        k: v for k, v in spec.params
        if k not in TRAIN_OPTIONS or (allowed is not None and k in allowed)
    }
    return spec.builder(ModelConfig.of(spec.model, options))


def _batches(n: int, batch_size: int, generator: Any, device: Any = None) -> list[Any]:
    """A seeded permutation cut into batches of indices on ``device``; a
    trailing batch of one example joins the previous one (BatchNorm cannot
    train on a batch of one). The permutation is drawn with the CPU
    ``generator`` and moved once, so the order is the same on every device."""
    import torch

    order = torch.randperm(n, generator=generator)
    if device is not None and torch.device(device).type != "cpu":
        order = order.to(device)
    cuts = list(range(0, n, batch_size))
    if len(cuts) > 1 and n - cuts[-1] == 1:
        cuts.pop()
    bounds = cuts[1:] + [n]
    return [order[a:b] for a, b in zip(cuts, bounds)]


def default_train_fn(net: Any, opt: Any, X: Any, y: Any, spec: UnitSpec, generator: Any, *,
                     amp: Any = None, scaler: Any = None) -> dict[str, float]:
    """One sub-epoch of mini-batch SGD over the partition (``net.train_step``).

    Returns the example-weighted mean training loss and the example count. A
    partition of one example is skipped (BatchNorm), reported with
    ``examples = 0``. The loss is summed in float64 on the device and read
    once at the end. ``amp`` (a ``device.MixedPrecision``) and ``scaler``
    are given by the unit for mixed precision only.
    """
    import torch

    n = int(X.shape[0])
    if n < 2:
        return {"loss": float("nan"), "examples": 0.0}
    clip = spec.options.get("clip", 5.0)
    step_options: dict[str, Any] = {"clip": clip}
    if amp is not None:
        step_options.update(autocast=amp.autocast, scaler=scaler)
    total = torch.zeros((), dtype=torch.float64, device=X.device)
    for idx in _batches(n, spec.batch_size, generator, X.device):
        loss = net.train_step(opt, X[idx], y[idx], **step_options)
        total.add_(loss, alpha=len(idx))  # one kernel: the float32 loss is widened inside the add
    return {"loss": float(total) / n, "examples": float(n)}


def default_eval_fn(net: Any, X: Any, y: Any, spec: UnitSpec, batch_size: int = EVAL_BATCH_SIZE) -> dict[str, Any]:
    """Sums over one validation partition that :func:`combine_eval` merges:

    * classification: ``n``, ``loss_sum``, ``correct``;
    * regression: ``n``, ``loss_sum`` and, per output column, ``sse``,
      ``sum_y``, ``sum_y2`` (so R² over all partitions is exact).
    """
    import torch

    n = int(X.shape[0])
    net.eval()
    out_parts = []
    with torch.no_grad():
        for a in range(0, n, batch_size):
            out_parts.append(net(X[a:a + batch_size]))
    out = torch.cat(out_parts) if out_parts else None
    if n == 0 or out is None:
        return {"n": 0.0, "loss_sum": 0.0}
    with torch.no_grad():
        loss_sum = float(net.loss(out, y)) * n
    if getattr(net, "task", "classification") == "classification":
        truth = y.argmax(dim=1) if y.dim() == 2 else y.reshape(-1).long()
        return {"n": float(n), "loss_sum": loss_sum, "correct": float((out.argmax(dim=1) == truth).sum())}
    o = out.reshape(n, -1).double()
    t = y.reshape(n, -1).double()
    return {
        "n": float(n),
        "loss_sum": loss_sum,
        "sse": ((o - t) ** 2).sum(dim=0).tolist(),
        "sum_y": t.sum(dim=0).tolist(),
        "sum_y2": (t**2).sum(dim=0).tolist(),
    }


def combine_eval(parts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Merge validation units into ``{"score", "val_loss", "examples"}``.

    The score is accuracy for classification and the mean R² over output
    columns for regression, clipped to [0, 1] (as in ``sklearn_fit``); NaN
    when the validation set is empty or a net diverged.
    """
    n = sum(p.get("n", 0.0) for p in parts)
    if n <= 0:
        return {"score": float("nan"), "val_loss": float("nan"), "examples": 0.0}
    loss = sum(p.get("loss_sum", 0.0) for p in parts) / n
    if any("correct" in p for p in parts):
        score = sum(p.get("correct", 0.0) for p in parts) / n
    else:
        cols = [p for p in parts if p.get("n", 0.0) > 0]
        sse = np.sum([p["sse"] for p in cols], axis=0)
        s1 = np.sum([p["sum_y"] for p in cols], axis=0)
        s2 = np.sum([p["sum_y2"] for p in cols], axis=0)
        sst = s2 - s1**2 / n
        with np.errstate(divide="ignore", invalid="ignore"):
            r2 = np.where(sst > 1e-12, 1.0 - sse / sst, np.where(sse <= 1e-12, 1.0, 0.0))
        score = float(np.clip(np.mean(r2), 0.0, 1.0)) if np.all(np.isfinite(r2)) else float("nan")
    if not math.isfinite(loss):
        score = float("nan")
    return {"score": float(score), "val_loss": float(loss), "examples": float(n)}


@dataclass(frozen=True)
class Hooks:
    """Cerebro's user-defined functions (§4.1), with zoo defaults, and the
    units' arithmetic.

    All four functions must be picklable (module-level functions or callable
    values) to reach Dask workers. ``input_fn`` returns tensors on any device
    (the unit moves them to its own). ``precision`` is one of
    :data:`~ease_jupyter.execution.device.PRECISIONS`: with ``"bf16"`` or
    ``"fp16"`` on a device that autocasts, ``train_fn`` is also given the
    keywords ``amp`` (a ``device.MixedPrecision``) and ``scaler`` (a
    ``GradScaler`` for ``fp16``, else None), and ``eval_fn`` runs under
    autocast; with ``"fp32"`` the hooks are called exactly as before.

    ``deterministic``: None (default) runs deterministic algorithms on the
    CPU, where they cost nothing measurable, and torch's fast kernels with
    cuDNN autotuning on a GPU, where deterministic ones cost about a fifth
    of the throughput (docs/gpus.md); True asks for deterministic kernels on
    every device (bit-identical re-runs on one GPU model), False for the
    fast ones everywhere.
    """

    input_fn: Callable[[Any], tuple[Any, Any]] = default_input_fn
    model_fn: Callable[[UnitSpec], Any] = default_model_fn
    train_fn: Callable[..., Mapping[str, float]] = default_train_fn
    eval_fn: Callable[..., Mapping[str, Any]] = default_eval_fn
    precision: str = "fp32"
    deterministic: bool | None = None

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise EaseMLError(f"Hooks.precision: found {self.precision!r}, expected one of {list(PRECISIONS)}")
        if self.deterministic not in (None, True, False):
            raise EaseMLError(f"Hooks.deterministic: found {self.deterministic!r}, expected None, True or False")

    def deterministic_on(self, device: Any) -> bool:
        """Whether a unit on ``device`` runs deterministic kernels."""
        if self.deterministic is not None:
            return self.deterministic
        return getattr(device, "type", str(device)) != "cuda"


# -- checkpoints ---------------------------------------------------------------------


def _on_cpu(obj: Any) -> Any:
    """``obj`` (a state dict, nested) with every tensor on the CPU; returned
    as is when it is already, so CPU checkpoints keep their exact bytes."""
    import torch

    devices: set[Any] = set()

    def moved(o: Any) -> Any:
        if isinstance(o, torch.Tensor):
            if o.device.type == "cuda":
                devices.add(o.device)
                return o.to("cpu", non_blocking=True)  # into pinned memory; one wait below, not one per tensor
            return o.cpu()
        if isinstance(o, dict):
            out = type(o)((k, moved(v)) for k, v in o.items())
            if hasattr(o, "_metadata"):  # a module's state dict: versions for load_state_dict
                out._metadata = o._metadata
            return out
        if isinstance(o, (list, tuple)):
            return type(o)(moved(v) for v in o)
        return o

    def anywhere_else(o: Any) -> bool:
        if isinstance(o, torch.Tensor):
            return o.device.type != "cpu"
        if isinstance(o, dict):
            return any(anywhere_else(v) for v in o.values())
        if isinstance(o, (list, tuple)):
            return any(anywhere_else(v) for v in o)
        return False

    if not anywhere_else(obj):
        return obj
    out = moved(obj)
    for device in devices:
        torch.cuda.synchronize(device)
    return out


def save_checkpoint(net: Any, opt: Any, scaler: Any = None) -> bytes:
    """The net's ``state_dict`` (weights and adapt buffers), the optimizer's
    state and, for ``fp16``, the gradient scaler's state, as ``torch.save``
    bytes with every tensor on the CPU (device-neutral)."""
    import torch

    state = {"model": _on_cpu(net.state_dict()), "optimizer": _on_cpu(opt.state_dict()) if opt is not None else None}
    if scaler is not None:
        state["scaler"] = scaler.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def read_checkpoint(ref: bytes | str) -> bytes:
    """Checkpoint bytes from either hop mode's reference (bytes, a path or
    an fsspec URL)."""
    if isinstance(ref, (bytes, bytearray, memoryview)):
        return bytes(ref)
    return blob_io.read_bytes(ref)


def load_checkpoint(net: Any, opt: Any, ref: bytes | str, lr: float | None = None, *, scaler: Any = None) -> None:
    """Restore a checkpoint into ``net`` (and ``opt``, and ``scaler``) on the
    net's device; the learning rate is then reset to ``lr``, the trial's own
    (a PBT child keeps its parent's weights and momentum but not its learning
    rate)."""
    import torch

    # read onto the CPU: load_state_dict then copies each tensor straight into the
    # net's own (device) tensors, with no device copy made in between
    state = torch.load(io.BytesIO(read_checkpoint(ref)), map_location="cpu", weights_only=True)
    net.load_state_dict(state["model"])
    if opt is not None and state.get("optimizer") is not None:
        opt.load_state_dict(state["optimizer"])
        if lr is not None:
            for group in opt.param_groups:
                group["lr"] = lr
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])


def _make_optimizer(net: Any, spec: UnitSpec) -> Any:
    opts = spec.options
    kwargs = {k: float(opts[k]) for k in ("momentum", "weight_decay") if k in opts}
    return net.make_optimizer(spec.lr, **kwargs)


def _write(out_dir: str, spec: UnitSpec, data: bytes) -> str:
    """Write a checkpoint atomically under ``out_dir`` (a path or an fsspec
    URL); a re-run of a lost unit never overwrites the checkpoint it starts
    from (each write has a fresh name)."""
    trial_dir = hashlib.blake2b(spec.trial.encode(), digest_size=8).hexdigest()
    name = f"e{spec.epoch:05d}-p{spec.partition:05d}-{uuid.uuid4().hex[:12]}.pt"
    return blob_io.write_atomic(out_dir, f"{trial_dir}/{name}", data)


def build_net(hooks: "Hooks", spec: UnitSpec, *, seed: int | None = None) -> Any:
    """``hooks.model_fn(spec)``, built holding :data:`GLOBAL_RNG` (after
    seeding the global generator with ``seed``, if given), so that its random
    initial weights are drawn while no other thread uses the generator. A
    builder whose class says ``draws_global_rng = False`` (a user's net,
    built in its own child process) is built without the lock: user code
    must never hold up the other units of the process. Such a builder has
    ``with_seed(seed)``, a copy that seeds its own process's generators with
    ``seed`` before it builds the net."""
    if not getattr(spec.builder, "draws_global_rng", True):
        if seed is not None:
            # this process's generator never reaches her child: the seed must travel with the builder
            spec = replace(spec, builder=spec.builder.with_seed(seed))
        return hooks.model_fn(spec)
    import torch

    with GLOBAL_RNG:
        if seed is not None:
            torch.manual_seed(seed)
        return hooks.model_fn(spec)


class _Seeded:
    """One unit's torch settings: its seed in the global generators and in a
    private CPU ``torch.Generator`` (returned), one thread, and the kernels
    ``deterministic`` asks for (deterministic algorithms; on a GPU without
    them, cuDNN's autotuned kernels). The global generators and both flags
    are restored on exit."""

    def __init__(self, seed: int, device: Any = None, deterministic: bool = True):
        self.seed = seed
        self.device = device
        self.deterministic = deterministic

    def __enter__(self) -> Any:
        import torch

        self._cuda = self.device is not None and torch.device(self.device).type == "cuda"
        with GLOBAL_RNG:
            self._state = torch.random.get_rng_state()
            if self._cuda:
                self._cuda_state = torch.cuda.get_rng_state(self.device)
            torch.manual_seed(self.seed)  # also seeds every CUDA device
        if self._cuda:
            self._cudnn_benchmark = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = not self.deterministic
        self._deterministic = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(self.deterministic, warn_only=True)
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)
        gen = torch.Generator()
        gen.manual_seed(self.seed)
        return gen

    def __exit__(self, *exc: object) -> None:
        import torch

        with GLOBAL_RNG:
            torch.random.set_rng_state(self._state)
            if self._cuda:
                torch.cuda.set_rng_state(self._cuda_state, self.device)
        if self._cuda:
            torch.backends.cudnn.benchmark = self._cudnn_benchmark
        torch.use_deterministic_algorithms(self._deterministic, warn_only=True)


def initial_checkpoint(spec: UnitSpec, X: Any, y: Any, hooks: Hooks = Hooks()) -> bytes:
    """Fresh weights for a trial: build the net under the trial's seed, adapt
    it to the training data (input/target statistics become buffers), and
    save it with a fresh optimizer. Runs on the CPU, wherever it is called."""
    seed = unit_seed(spec.seed, spec.trial, -1, -1)
    with _Seeded(seed):
        net = build_net(hooks, spec, seed=seed)  # the seed again, under the lock: no thread draws between
        X_t, y_t = hooks.input_fn((X, y))
        net.adapt(X_t, y_t)
        return save_checkpoint(net, _make_optimizer(net, spec))


def load_model(ref: bytes | str, spec: UnitSpec, hooks: Hooks = Hooks(), device: Any = "cpu") -> Any:
    """A net with a checkpoint's weights on ``device`` (default the CPU), in eval mode."""
    net = build_net(hooks, spec).to(device)
    load_checkpoint(net, None, ref)
    net.eval()
    return net


# -- partitions on the device ------------------------------------------------------------


class _DevicePartitions:
    """The tensors of the partitions a GPU worker holds, kept on its GPU
    between units, so that a unit does not copy its partition to the device
    again (Cerebro places a partition on a worker once, §4.2).

    An entry is keyed by the input hook, the device and the partition: a
    staged partition by its URL, ``(X, y)`` numpy arrays by identity, checked
    with weak references (the worker's copy is the same object at every
    unit, and the entry goes at the next unit after the worker dropped it).
    Other partitions are not kept. The partition's arrays must not change while it is placed.
    Entries beyond :data:`DEVICE_PARTITION_SHARE` of the GPU's memory are
    dropped, least recently used first, and all of them after an
    out-of-memory error.
    """

    def __init__(self) -> None:
        import threading
        from collections import OrderedDict

        self._items: OrderedDict[Any, tuple[tuple[Any, ...], tuple[Any, Any]]] = OrderedDict()
        self._lock = threading.RLock()

    @staticmethod
    def _key(partition: Any, input_fn: Any, device: Any) -> tuple[Any, tuple[Any, ...]] | None:
        import weakref

        if isinstance(partition, blob_io.StagedPartition):
            source: Any = ("url", partition.url)
            refs: tuple[Any, ...] = ()
        elif isinstance(partition, tuple) and len(partition) == 2 and all(isinstance(a, np.ndarray) for a in partition):
            source = ("arrays", id(partition[0]), id(partition[1]))
            refs = tuple(weakref.ref(a) for a in partition)
        else:
            return None
        key = (input_fn, str(device), source)
        try:
            hash(key)
        except TypeError:
            return None
        return key, refs

    def get(self, partition: Any, input_fn: Any, device: Any) -> tuple[Any, Any]:
        found = self._key(partition, input_fn, device)
        with self._lock:
            self._drop_dead()
        if found is not None:
            key, refs = found
            with self._lock:
                hit = self._items.get(key)
                if hit is not None and all(r() is a for r, a in zip(hit[0], partition if refs else ())):
                    self._items.move_to_end(key)
                    return hit[1]
        X, y = input_fn(partition)
        tensors = (_to_device(X, device), _to_device(y, device))
        if found is not None:
            with self._lock:
                self._items[key] = (refs, tensors)
                self._items.move_to_end(key)
                self._evict(device)
        return tensors

    def _drop_dead(self) -> None:
        """Forget the partitions whose arrays the worker no longer holds."""
        for key in [k for k, (refs, _) in self._items.items() if any(r() is None for r in refs)]:
            del self._items[key]

    def _evict(self, device: Any) -> None:
        limit = DEVICE_PARTITION_SHARE * (describe_device(device).total_memory or 0)
        while len(self._items) > 1 and self._bytes() > limit:
            self._items.popitem(last=False)

    def _bytes(self) -> int:
        return sum(_nbytes(t) for _, pair in self._items.values() for t in pair)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def _nbytes(t: Any) -> int:
    return int(t.numel() * t.element_size()) if hasattr(t, "element_size") else 0


def _to_device(t: Any, device: Any) -> Any:
    return t.to(device) if hasattr(t, "to") else t


_DEVICE_PARTITIONS = _DevicePartitions()


def _unit_tensors(partition: Any, hooks: Hooks, device: Any) -> tuple[Any, Any]:
    """The partition's ``(X, y)`` tensors on ``device`` (kept there on a GPU)."""
    if device.type == "cpu":
        X, y = hooks.input_fn(partition)
        return _to_device(X, device), _to_device(y, device)
    return _DEVICE_PARTITIONS.get(partition, hooks.input_fn, device)


# -- the units ---------------------------------------------------------------------------


def _run_classified(body: Callable[[], Any], spec: UnitSpec, device: Any, phase: str, batch_size: int) -> Any:
    """Run a unit's body; a device failure becomes our error (see
    ``device.classify_device_error``). The body's frames (its tensors) are
    gone before the CUDA cache is emptied."""
    try:
        return body()
    except RuntimeError as exc:
        failure = classify_device_error(exc, device, model=spec.model, batch_size=batch_size, phase=phase)
        if failure is None:
            raise
    _DEVICE_PARTITIONS.clear()
    release_device_memory(device)
    raise failure


def _config_batch_size(spec: UnitSpec) -> int:
    bs = spec.options.get("batch_size", DEFAULT_BATCH_SIZE)
    return bs if isinstance(bs, int) else DEFAULT_BATCH_SIZE


def train_unit(partition: Any, checkpoint: bytes | str, spec: UnitSpec, hooks: Hooks = Hooks(), out_dir: str | None = None) -> UnitOutput:
    """One training unit: restore, train one sub-epoch on ``partition``, save.

    Args:
        partition: the partition's data, as ``hooks.input_fn`` reads it.
        checkpoint: the config's latest checkpoint (bytes, a path or a URL).
        spec: the trial, with ``epoch`` and ``partition`` set.
        out_dir: None to return the checkpoint as bytes ("bytes" hop), or the
            shared directory (a path or an fsspec URL) to write it into
            ("directory" hop).

    Metrics: the train hook's (``loss``, ``examples``), ``seconds`` (the
    whole unit), ``train_seconds`` (the train hook), ``hop_seconds``
    (reading, restoring, saving and writing the checkpoint), ``input_seconds``
    (the partition to tensors on the device), ``checkpoint_bytes`` and
    ``gpu`` (1.0 when the unit ran on a GPU).

    Raises:
        DeviceOutOfMemoryError: the config does not fit in the GPU's memory.
        DeviceFailedError: the GPU failed.
    """
    started = time.perf_counter()
    device = worker_device()
    amp = mixed_precision(hooks.precision, device)

    def body() -> UnitOutput:
        with _Seeded(unit_seed(spec.seed, spec.trial, spec.epoch, spec.partition), device,
                     hooks.deterministic_on(device)) as gen:
            t0 = time.perf_counter()
            X, y = _unit_tensors(partition, hooks, device)
            t1 = time.perf_counter()
            net = build_net(hooks, spec).to(device)
            opt = _make_optimizer(net, spec)
            scaler = amp.scaler()
            load_checkpoint(net, opt, checkpoint, spec.lr, scaler=scaler)
            net.train()
            t2 = time.perf_counter()
            extra = {"amp": amp, "scaler": scaler} if amp.active else {}
            metrics = dict(hooks.train_fn(net, opt, X, y, spec, gen, **extra))
            t3 = time.perf_counter()
            data = save_checkpoint(net, opt, scaler)
        out: bytes | str = data if out_dir is None else _write(out_dir, spec, data)
        done = time.perf_counter()
        metrics["seconds"] = done - started
        metrics["train_seconds"] = t3 - t2
        metrics["hop_seconds"] = (t2 - t1) + (done - t3)
        metrics["input_seconds"] = t1 - t0
        metrics["checkpoint_bytes"] = float(len(data))
        metrics["gpu"] = 1.0 if device.type == "cuda" else 0.0
        return UnitOutput(out, metrics)

    return _run_classified(body, spec, device, "training", _config_batch_size(spec))


def eval_unit(partition: Any, checkpoint: bytes | str, spec: UnitSpec, hooks: Hooks = Hooks()) -> dict[str, Any]:
    """One validation unit: the checkpoint's sums on one validation partition
    (parameters are not trained, Cerebro §4.1), on the worker's device.

    Raises:
        DeviceOutOfMemoryError: with ``phase="validation"`` and the
            evaluation batch (:data:`EVAL_BATCH_SIZE`).
        DeviceFailedError: the GPU failed.
    """
    started = time.perf_counter()
    device = worker_device()
    amp = mixed_precision(hooks.precision, device)

    def body() -> dict[str, Any]:
        with _Seeded(unit_seed(spec.seed, spec.trial, spec.epoch, spec.partition), device,
                     hooks.deterministic_on(device)):
            X, y = _unit_tensors(partition, hooks, device)
            net = build_net(hooks, spec).to(device)
            load_checkpoint(net, None, checkpoint)
            for p in net.parameters():
                p.requires_grad_(False)
            with amp.autocast():
                sums = dict(hooks.eval_fn(net, X, y, spec))
        sums["seconds"] = time.perf_counter() - started
        return sums

    return _run_classified(body, spec, device, "validation", EVAL_BATCH_SIZE)


# -- measuring the hop modes -----------------------------------------------------------


def measure_hop(
    engine: Any,
    spec: UnitSpec,
    partition: Any,
    mode: str,
    *,
    units: int = 10,
    directory: str | None = None,
    hooks: Hooks = Hooks(),
    timeout: float = 600.0,
) -> dict[str, float]:
    """Time a chain of ``units`` training units of one config that hops
    between the engine's workers at every unit, in hop ``mode``.

    The partition is placed on every worker (key ``"hop-probe"``), so only
    the checkpoint moves. Returns the median and mean wall seconds per unit
    seen by the driver (submit to result), and the checkpoint size.
    """
    import statistics

    if mode not in HOP_MODES:
        raise EaseMLError(f"mode: found {mode!r}, expected one of {list(HOP_MODES)}")
    if mode == "directory" and directory is None:
        raise EaseMLError("directory: found None, expected a directory shared by the workers for the directory hop")
    workers = engine.workers()
    engine.place("hop-probe", partition, workers)
    try:
        X, y = partition
        ckpt: bytes | str = initial_checkpoint(spec, X, y, hooks)
        if mode == "directory":
            ckpt = _write(directory, spec.at(-1, -1), ckpt)
        times = []
        size = 0.0
        for i in range(units):
            started = time.perf_counter()
            h = engine.submit_pinned(train_unit, "hop-probe", ckpt, spec.at(0, i), hooks,
                                     directory if mode == "directory" else None,
                                     worker=workers[i % len(workers)], timeout=timeout)
            ev = engine.wait_all([h], timeout=timeout)[h]
            if not hasattr(ev, "result"):
                raise EaseMLError(f"hop probe unit {i}: {ev}")
            times.append(time.perf_counter() - started)
            if mode == "directory" and isinstance(ckpt, str):
                blob_io.remove(ckpt)
            ckpt = ev.result.checkpoint
            size = ev.result.metrics["checkpoint_bytes"]
        if isinstance(ckpt, str):
            blob_io.remove(ckpt)
        return {"median": statistics.median(times), "mean": statistics.fmean(times), "checkpoint_bytes": size}
    finally:
        engine.drop("hop-probe")
