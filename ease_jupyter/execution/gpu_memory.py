"""GPU memory sizing of a torch config (Seneca §II-A, Alg. 1, on GPU memory).

Seneca sizes a function's memory from one probe with a typical payload
(Alg. 1, line 1: "find memory used by payload as starting point") and then
searches one knob from there. On a GPU the memory is fixed and the knob is the
batch size: what has to be chosen is the largest batch size, up to the one
asked for, whose training step fits in a worker's GPU memory, and the workers
whose GPUs hold the config at that size. We keep Alg. 1's structure, a probe
with a typical payload and a short search from it, and drop its charge-slope
exit (a GPU is not billed by the byte, so the search stops at the largest
batch size that fits, not at the cheapest allocation):

1. :func:`measure_step_peak` builds the config's net on the worker's GPU,
   runs training steps (forward, backward, optimizer step; two, so that the
   optimizer's state is there) on a batch cut from a sample of the task's
   data, and reads
   ``torch.cuda.max_memory_allocated`` over the last step, after
   ``reset_peak_memory_stats``: weights, gradients, optimizer state and
   activations. The first step is left out of the peak: with cuDNN
   autotuning it tries kernels in workspaces as large as the GPU allows,
   memory a step does not need (a unit's first step tries them too, and
   halves a workspace that does not fit). On a CPU it returns None: there is
   no GPU to size for.
2. :func:`fit_batch_size` is the search, pure (tested with fake
   measurements). The peak is about affine in the batch size, a fixed part
   (weights, gradients, momentum) plus a part per example (activations), so
   two probes give the line that predicts the largest size whose peak,
   times a safety factor, fits; a probe there and one just above check it.
3. :func:`workers_that_fit` and :class:`GpuPlan` give the workers, by their
   GPU memory, that hold the config at that batch size; :func:`plan_config`
   runs the search as one engine task on a GPU worker (the one with the least
   memory, so the batch size fits every GPU); :func:`submit_sizing` and
   :func:`make_plan` are the same in two steps, for a driver that reads the
   engine's events itself.
4. :func:`sizing_unit` is the search as a pinned MOP unit (its partition is
   the sample), and :func:`plan_from_sizings` the plan from such units on
   several GPU workers: what ``mop.runner`` does before a trial's first
   training unit.

``max_memory_allocated`` counts what tensors hold, not the allocator's
fragmentation or the CUDA context; the safety factor (:data:`SAFETY`) covers
the first. A worker's capacity is its free memory, read after it released
its cache (so the context, and what other processes on a shared GPU hold,
are left out), within the process's own limit where one is set
(``torch.cuda.set_per_process_memory_fraction``, how a GPU is shared among
processes), less the share of that memory units may keep partitions in.
The probes run under a unit's kernel settings (``units._Seeded``: with
cuDNN autotuning where the units use it, whose workspaces count in the
peak).

On a CPU worker every entry point answers None (no GPU sizing), and
training keeps the requested batch size.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from ease_jupyter.errors import DeviceOutOfMemoryError, EaseMLError
from ease_jupyter.execution.device import (
    classify_device_error,
    describe_device,
    mixed_precision,
    worker_device,
)
from ease_jupyter.execution.engine.base import GPU, Engine, gpu_workers
from ease_jupyter.execution.units import DEVICE_PARTITION_SHARE, Hooks, UnitSpec, _Seeded, build_net, unit_seed

__all__ = [
    "MIN_BATCH",
    "SAFETY",
    "BatchSizing",
    "GpuPlan",
    "WorkerDevice",
    "device_info",
    "fit_batch_size",
    "gpu_memory_of",
    "make_plan",
    "measure_step_peak",
    "plan_config",
    "plan_from_sizings",
    "probe_order",
    "size_batch",
    "sizing_unit",
    "submit_sizing",
    "worker_devices",
    "workers_that_fit",
]

#: Peak times this must fit: the allocator's fragmentation and per-size
#: kernel workspaces are not in ``max_memory_allocated``.
SAFETY = 1.2

#: BatchNorm cannot train on a batch of one (as in ``units._batches``).
MIN_BATCH = 2

#: Training steps per probe: the optimizer's state (SGD momentum) is made by
#: the first step and held through the second's forward and backward pass.
PROBE_STEPS = 2

#: Probes one search may run on the GPU (an affine peak takes four).
MAX_PROBES = 8

GiB = 2**30


# -- the worker's device -----------------------------------------------------------


def _free_bytes(device: Any) -> int:
    """GPU memory this process could allocate now, after handing its own
    cached blocks back (the CUDA context and other processes stay counted)."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def _usable_bytes(device: Any) -> int:
    """Room for a training step: the free memory, within this process's
    limit (``set_per_process_memory_fraction`` of the GPU, less what the
    process holds), less the share of that memory that units may fill with
    the partitions they keep there (``units.DEVICE_PARTITION_SHARE``;
    counted twice for partitions kept already, which errs on the safe side)."""
    import torch

    device = torch.device(device)
    if device.index is None:  # torch's per-process limit wants an indexed device
        device = torch.device(device.type, torch.cuda.current_device())
    free = _free_bytes(device)
    limit = (describe_device(device).total_memory or 0) * torch.cuda.get_per_process_memory_fraction(device)
    room = min(free, limit - torch.cuda.memory_reserved(device))
    return max(1, int(room - DEVICE_PARTITION_SHARE * limit))


@dataclass(frozen=True)
class WorkerDevice:
    """A worker's device: its kind and, for a GPU, the bytes a training step
    may use there (:func:`_usable_bytes`; None on a CPU) and its total
    memory."""

    kind: str
    memory_bytes: int | None = None
    total_bytes: int | None = None


def device_info() -> WorkerDevice:
    """The calling worker's device (an engine task)."""
    device = worker_device()
    if device.type != "cuda":
        return WorkerDevice("cpu")
    desc = describe_device(device)
    return WorkerDevice(desc.kind, _usable_bytes(device), desc.total_memory)


def worker_devices(engine: Engine, *, timeout: float = 120.0) -> dict[str, WorkerDevice]:
    """Every live worker's device. Workers that declare a ``GPU`` resource are
    asked, one small task each, since only they know their GPU's model and
    free memory; the others train on their CPU."""
    resources = engine.worker_resources()
    found = {w: WorkerDevice("cpu") for w in resources}
    asked = {w: engine.submit(device_info, resources={GPU: 1}, workers=[w]) for w in gpu_workers(resources)}
    found.update(engine.results(asked, "device of worker", timeout))
    return found


# -- the probe ------------------------------------------------------------------------


def _train_steps(spec: UnitSpec, X: Any, y: Any, batch_size: int, device: Any, hooks: Hooks) -> None:
    """Build, adapt and move the net, then :data:`PROBE_STEPS` of
    ``train_step`` on a batch of ``batch_size`` cut from ``(X, y)`` (repeated
    when the sample is smaller), in the hooks' precision as a unit would; the
    peak memory statistic is reset before the last step. Everything it
    allocates is freed when it returns."""
    import torch

    net = build_net(hooks, spec)
    net.adapt(X, y)
    net.to(device)
    opt = net.make_optimizer(spec.lr)
    amp = mixed_precision(hooks.precision, device)
    options = {"autocast": amp.autocast, "scaler": amp.scaler()} if amp.active else {}
    idx = torch.arange(batch_size) % int(X.shape[0])
    xb, yb = X[idx].to(device), y[idx].to(device)
    for step in range(PROBE_STEPS):
        if step == PROBE_STEPS - 1:  # the peak of the last step (the module docstring says why)
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        net.train_step(opt, xb, yb, clip=spec.options.get("clip", 5.0), **options)


def measure_step_peak(spec: UnitSpec, sample: tuple[Any, Any], batch_size: int, device: Any = None,
                      hooks: Hooks = Hooks()) -> int | None:
    """Peak GPU bytes of training ``spec``'s net at ``batch_size``.

    The net is built, adapted to the sample and moved to ``device`` (default:
    the worker's), then :data:`PROBE_STEPS` steps of ``net.train_step`` run
    on a batch cut from ``sample`` (``(X, y)`` as ``hooks.input_fn`` reads
    it). Returns
    ``max_memory_allocated`` over the last step minus what was allocated
    before the net was built, or None on a CPU (no GPU sizing) or when the step ran out of
    memory (the size does not fit).
    """
    import torch

    device = torch.device(device) if device is not None else worker_device()
    if device.type != "cuda":
        return None
    X, y = hooks.input_fn(sample)
    if int(X.shape[0]) < 1:
        raise EaseMLError("sample: found no examples, expected at least one to size the batch from")
    torch.cuda.synchronize(device)
    _free_bytes(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    try:
        _train_steps(spec, X, y, batch_size, device, hooks)
        torch.cuda.synchronize(device)
        peak: int | None = int(torch.cuda.max_memory_allocated(device) - base)
    except RuntimeError as error:  # torch.cuda.OutOfMemoryError, or cuDNN/cuBLAS failing to allocate
        oom = classify_device_error(error, device, model=spec.model, batch_size=batch_size, phase="sizing")
        if not isinstance(oom, DeviceOutOfMemoryError):
            raise
        peak = None
    _free_bytes(device)  # the step's tensors (and, after an out of memory, the traceback's) are gone now
    return peak


# -- the search (pure) -------------------------------------------------------------------


@dataclass(frozen=True)
class BatchSizing:
    """What :func:`fit_batch_size` found.

    ``batch_size`` is None when not even ``MIN_BATCH`` fits. ``peaks`` maps
    each probed size to its peak bytes (None: out of memory). ``fixed_bytes``
    and ``bytes_per_example`` are the line through the two measurements
    nearest the budget (None with fewer than two). ``device`` and
    ``total_bytes`` name the GPU searched on (None from the pure search).
    """

    batch_size: int | None
    requested: int
    capacity_bytes: int
    safety: float
    peaks: tuple[tuple[int, int | None], ...]
    fixed_bytes: float | None = None
    bytes_per_example: float | None = None
    device: str | None = None
    total_bytes: int | None = None

    def peak_bytes(self, batch_size: int | None = None) -> float | None:
        """The peak at ``batch_size`` (default: the chosen one): measured when
        it was probed, else the affine fit's prediction."""
        b = self.batch_size if batch_size is None else batch_size
        if b is None:
            return None
        measured = dict(self.peaks)
        if measured.get(b) is not None:
            return float(measured[b])
        if self.bytes_per_example is None or self.fixed_bytes is None:
            return None
        return self.fixed_bytes + self.bytes_per_example * b


def _line(points: Sequence[tuple[int, int]], budget: float) -> tuple[float, float] | None:
    """``peak = fixed + per_example * b`` through the two measured points
    whose peaks are nearest the budget (a secant: the peak is about affine,
    and where it is not, the nearest points predict the crossing best)."""
    near = sorted(points, key=lambda bp: (abs(bp[1] - budget), bp[0]))[:2]
    if len(near) < 2:
        return None
    (b0, p0), (b1, p1) = near
    per = (p1 - p0) / (b1 - b0)
    return p0 - per * b0, per


def _check_positive_int(name: str, value: Any, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise EaseMLError(f"{name}: found {value!r}, expected an integer >= {least}")
    return value


def fit_batch_size(
    peak_at: Callable[[int], int | None],
    requested: int,
    capacity: float,
    *,
    safety: float = SAFETY,
    min_batch: int = MIN_BATCH,
    max_probes: int = MAX_PROBES,
) -> BatchSizing:
    """The largest batch size ``<= requested`` whose peak times ``safety``
    fits in ``capacity`` bytes.

    ``peak_at(b)`` measures the peak bytes at batch size ``b`` (None: out of
    memory). The search probes ``requested`` first (Alg. 1's typical payload)
    and stops there when it fits. Otherwise it keeps the largest size known to
    fit and the smallest known not to, and probes between them: where the
    line through the two measurements nearest the budget crosses it (before
    there are two: the one measured size scaled by budget / peak, or the
    smallest size after out-of-memory only), then the size just above the
    largest that fits, as a check; halfway between the two when a measurement
    contradicts the line (a step in the peak, e.g. a kernel's workspace). It
    stops when the two are adjacent, or after ``max_probes`` probes; an
    affine peak takes four.
    """
    requested = _check_positive_int("requested", requested, min_batch)
    max_probes = _check_positive_int("max_probes", max_probes)
    if not (isinstance(capacity, (int, float)) and not isinstance(capacity, bool)
            and math.isfinite(capacity) and capacity > 0):
        raise EaseMLError(f"capacity: found {capacity!r}, expected a positive number of bytes")
    if not (isinstance(safety, (int, float)) and math.isfinite(safety) and safety >= 1):
        raise EaseMLError(f"safety: found {safety!r}, expected a number >= 1")
    budget = float(capacity) / float(safety)
    peaks: dict[int, int | None] = {}
    fits_at: int | None = None  # the largest size known to fit
    fails_at = requested + 1  # the smallest size known not to fit
    size, checking = requested, False
    while True:
        peak = peaks[size] = peak_at(size)
        fits = peak is not None and peak <= budget
        if fits:
            fits_at = size
        else:
            fails_at = size
        low = min_batch if fits_at is None else fits_at + 1
        if fits_at == requested or fails_at == min_batch or low >= fails_at or len(peaks) >= max_probes:
            break
        measured = [(b, p) for b, p in peaks.items() if p is not None]
        line = _line(measured, budget)
        if line is not None:
            fixed, per = line
            guess = math.floor((budget - fixed) / per) if per > 0 else fails_at
        elif measured:
            (b0, p0), = measured
            guess = math.floor(b0 * budget / p0) if p0 > 0 else fails_at
        else:
            guess = min_batch  # only out-of-memory so far: the smallest size tells the fixed part
        was_check, checking = checking, False
        if guess >= fails_at or (guess < low and was_check and fits):
            guess = (low + fails_at) // 2  # the fit is contradicted by a measurement: bisect
        elif guess < low:
            guess, checking = low, fits_at is not None  # check the size just above the largest that fits
        size = guess
    line = _line([(b, p) for b, p in peaks.items() if p is not None], budget)
    return BatchSizing(
        batch_size=fits_at,
        requested=requested,
        capacity_bytes=int(capacity),
        safety=float(safety),
        peaks=tuple(sorted(peaks.items())),
        fixed_bytes=None if line is None else line[0],
        bytes_per_example=None if line is None else line[1],
    )


def workers_that_fit(peak_bytes: float, worker_memory: Mapping[str, int | None], *,
                     safety: float = SAFETY) -> list[str]:
    """The workers whose GPU memory holds ``peak_bytes`` times ``safety``
    (workers without a GPU, memory None, never), sorted."""
    need = float(peak_bytes) * float(safety)
    return sorted(w for w, mem in worker_memory.items() if mem is not None and need <= mem)


# -- the plan ------------------------------------------------------------------------------


def size_batch(spec: UnitSpec, sample: tuple[Any, Any], requested: int, capacity_bytes: int | None = None,
               safety: float = SAFETY, min_batch: int = MIN_BATCH, hooks: Hooks = Hooks()) -> BatchSizing | None:
    """:func:`fit_batch_size` on the calling worker's GPU (an engine task):
    capacity is the room a training step has there (see
    :class:`WorkerDevice`), or ``capacity_bytes`` when that is smaller. The
    probes run with the kernels a unit of ``spec`` would use there
    (``hooks.deterministic_on``). None on a CPU worker."""
    device = worker_device()
    if device.type != "cuda":
        return None
    capacity = _usable_bytes(device)
    if capacity_bytes is not None:
        capacity = min(capacity, int(capacity_bytes))
    with _Seeded(unit_seed(spec.seed, spec.trial, -2, -2), device, hooks.deterministic_on(device)):
        sizing = fit_batch_size(lambda b: measure_step_peak(spec, sample, b, device, hooks), requested, capacity,
                                safety=safety, min_batch=min_batch)
    desc = describe_device(device)
    return replace(sizing, device=desc.kind, total_bytes=desc.total_memory)


def _as_given(sample: tuple[Any, Any]) -> tuple[Any, Any]:
    return sample


def sizing_unit(partition: Any, spec: UnitSpec, requested: int, hooks: Hooks = Hooks(),
                capacity_bytes: int | None = None) -> BatchSizing | None:
    """:func:`size_batch` as a pinned MOP unit (``Engine.submit_pinned``):
    the sample is the first ``requested`` examples of ``partition`` (what
    ``hooks.input_fn`` reads; read once for all the probes). None on a
    worker without CUDA, without reading the partition."""
    if worker_device().type != "cuda":
        return None
    X, y = hooks.input_fn(partition)
    n = min(int(X.shape[0]), requested)
    return size_batch(spec, (X[:n], y[:n]), requested, capacity_bytes, hooks=replace(hooks, input_fn=_as_given))


@dataclass(frozen=True)
class GpuPlan:
    """Where and how a config trains on GPUs.

    ``batch_size`` is the largest size up to the requested one that fits the
    probed worker's GPU (None: not even :data:`MIN_BATCH` fits on any GPU),
    ``workers`` the GPU workers whose memory holds it (sorted).
    """

    model: str
    batch_size: int | None
    workers: tuple[str, ...]
    requested: int
    peak_bytes: float | None  # at batch_size (or, when nothing fits, at MIN_BATCH)
    probed_on: str
    sizing: BatchSizing

    @property
    def cut(self) -> bool:
        """True when the requested batch size did not fit and was reduced."""
        return self.batch_size is not None and self.batch_size < self.requested

    def describe(self) -> str:
        """One line for a job's record or a failure message."""
        cap = self.sizing.capacity_bytes / GiB
        if self.batch_size is None:
            return (f"model {self.model!r} does not fit on a GPU: batch size {self.sizing.peaks[0][0]} "
                    f"needs more than the {cap:.1f} GiB of GPU memory free on worker {self.probed_on!r}")
        need = "?" if self.peak_bytes is None else f"{self.peak_bytes / GiB:.2f}"
        return (f"model {self.model!r}: batch size {self.batch_size} (requested {self.requested}) needs "
                f"{need} GiB of the {cap:.1f} GiB of GPU memory free on worker {self.probed_on!r}; "
                f"fits on {list(self.workers)}")


def gpu_memory_of(devices: Mapping[str, WorkerDevice], capacity_bytes: int | None = None) -> dict[str, int]:
    """Each GPU worker's memory (capped at ``capacity_bytes``); CPU workers are left out."""
    return {w: d.memory_bytes if capacity_bytes is None else min(d.memory_bytes, int(capacity_bytes))
            for w, d in devices.items() if d.memory_bytes is not None}


def probe_order(memory: Mapping[str, int]) -> list[str]:
    """Where to size: the GPU worker with the least memory (a size that fits
    it fits every GPU), then, if nothing fits there, the one with the most."""
    by_memory = sorted(memory, key=lambda w: (memory[w], w))
    return list(dict.fromkeys(by_memory[:1] + by_memory[-1:]))


def submit_sizing(engine: Engine, worker: str, spec: UnitSpec, sample: tuple[Any, Any], requested_batch_size: int,
                  *, capacity_bytes: int | None = None, safety: float = SAFETY, hooks: Hooks = Hooks()) -> str:
    """Submit :func:`size_batch` to ``worker`` (holding its GPU slot when it
    declares one); the handle's result is a :class:`BatchSizing` or None.
    For a driver that reads the engine's events itself."""
    needs_gpu = {GPU: 1} if worker in gpu_workers(engine.worker_resources()) else None
    return engine.submit(size_batch, spec, sample, requested_batch_size, capacity_bytes, safety, MIN_BATCH, hooks,
                         resources=needs_gpu, workers=[worker])


def make_plan(model: str, worker: str, sizing: BatchSizing, memory: Mapping[str, int]) -> GpuPlan:
    """The plan from a sizing run on ``worker`` and every GPU worker's memory."""
    if sizing.batch_size is None:
        return GpuPlan(model, None, (), sizing.requested, sizing.peak_bytes(sizing.peaks[0][0]), worker, sizing)
    peak = sizing.peak_bytes()
    fit = workers_that_fit(peak, memory, safety=sizing.safety) if peak is not None else [worker]
    return GpuPlan(model, sizing.batch_size, tuple(fit), sizing.requested, peak, worker, sizing)


def plan_from_sizings(model: str, sizings: Mapping[str, BatchSizing | None]) -> GpuPlan | None:
    """The plan from one search per GPU worker (worker -> its
    :class:`BatchSizing`, None where the worker had no CUDA device).

    The batch size is the smallest of those found, so that it fits every GPU
    that holds the config at all (as :func:`probe_order` sizes on the GPU
    with the least memory first); ``workers`` are those GPUs (each measured
    there) and ``probed_on`` the one that set the size. When not even
    :data:`MIN_BATCH` fits anywhere, the plan (batch size None) is the GPU's
    with the most room. None when no worker had CUDA (nothing to plan).
    """
    measured = {w: s for w, s in sizings.items() if s is not None}
    if not measured:
        return None
    fitting = {w: s for w, s in measured.items() if s.batch_size is not None}
    if not fitting:
        worker = max(sorted(measured), key=lambda w: measured[w].capacity_bytes)
        sizing = measured[worker]
        return GpuPlan(model, None, (), sizing.requested, sizing.peak_bytes(sizing.peaks[0][0]), worker, sizing)
    worker = min(sorted(fitting), key=lambda w: (fitting[w].batch_size, fitting[w].capacity_bytes))
    sizing = fitting[worker]
    return GpuPlan(model, sizing.batch_size, tuple(sorted(fitting)), sizing.requested, sizing.peak_bytes(),
                   worker, sizing)


def plan_config(
    engine: Engine,
    worker: str | None,
    spec: UnitSpec,
    sample: tuple[Any, Any],
    requested_batch_size: int,
    *,
    devices: Mapping[str, WorkerDevice] | None = None,
    capacity_bytes: int | None = None,
    safety: float = SAFETY,
    hooks: Hooks = Hooks(),
    timeout: float = 600.0,
) -> GpuPlan | None:
    """Size ``spec``'s batch for the engine's GPUs (see the module docstring).

    The search runs as one task on ``worker`` (default: :func:`probe_order`,
    the GPU worker with the least free memory, then the one with the most if
    not even :data:`MIN_BATCH` fits). ``devices`` (from
    :func:`worker_devices`, which is called when it is None) gives every
    worker's GPU memory for :func:`workers_that_fit`.

    This waits on the engine's event stream, which drops the events of other
    work meanwhile: call it while nothing else runs on the engine, or use
    :func:`submit_sizing` and :func:`make_plan` from the driver's own loop.

    Returns:
        The plan, or None when the engine has no GPU worker with CUDA (train
        at the requested batch size, on the CPU).
    """
    devices = worker_devices(engine, timeout=timeout) if devices is None else devices
    memory = gpu_memory_of(devices, capacity_bytes)
    if not memory:
        return None
    plan = None
    for name in [worker] if worker is not None else probe_order(memory):
        handle = submit_sizing(engine, name, spec, sample, requested_batch_size,
                               capacity_bytes=capacity_bytes, safety=safety, hooks=hooks)
        sizing = engine.results({name: handle}, f"batch sizing of {spec.model!r} on worker", timeout)[name]
        if sizing is None:
            return None  # the worker declares a GPU but has no CUDA device
        plan = make_plan(spec.model, name, sizing, memory)
        if plan.batch_size is not None:
            break
    return plan
