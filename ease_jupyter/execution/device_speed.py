"""How fast each device kind of a pool trains a zoo net, in FLOP/s.

Cost-aware GP-UCB (ease.ml pvldb §4.1) weighs each arm by ``c_k``, "the
estimate of its execution time", which the service makes from the zoo's FLOP
counts (``Candidate.cost``). Seconds need a speed, and a GPU trains a net
many times faster than the CPU beside it, so the speed is measured per device
kind: one short probe trains a fixed small zoo net (:data:`PROBE_NET` on
:data:`PROBE_SHAPE` images, batch :data:`PROBE_BATCH`) with the training
step the units use, after a warm-up, and divides its FLOPs, counted as
``zoo.cost`` counts them (``torch_train_flops``: 3 x the forward FLOPs of
``FlopCounterMode``), by the seconds. The probe thus speaks the unit of
``Candidate.cost``, and a torch arm's seconds are its FLOPs over the speed
of the devices torch units run on.

:func:`measure_pool` runs the probe once per device kind among an engine's
workers (one task, on one worker of that kind), plus once on a CPU for the
scikit-learn arms; a CPU-only pool measures once. Kinds already in the
caller's cache are not measured again.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Mapping

from ease_jupyter.errors import EaseMLError
from ease_jupyter.execution.device import describe_device, worker_device
from ease_jupyter.execution.engine.base import GPU, Engine, gpu_workers
from ease_jupyter.execution.gpu_memory import WorkerDevice, worker_devices

__all__ = [
    "CPU",
    "PROBE_BATCH",
    "PROBE_SHAPE",
    "DeviceSpeed",
    "PoolSpeeds",
    "measure_pool",
    "measure_speed",
]

PROBE_NET = "SmallResNet"  # of zoo.nets: convolutions, BatchNorm and a residual path, like the zoo's image nets
PROBE_SHAPE = (32, 32, 3)
PROBE_CLASSES = 10
PROBE_BATCH = 64
WARMUP_STEPS = 2  # first steps pay for allocation and kernel selection
MIN_SECONDS = 0.3  # timed steps run at least this long ...
MIN_STEPS = 3  # ... in chunks of at least this many
CPU = "cpu"


@dataclass(frozen=True)
class DeviceSpeed:
    """Training throughput of one device kind, in ``Candidate.cost`` FLOPs
    per second."""

    kind: str
    flops_per_second: float

    def __post_init__(self) -> None:
        if not (isinstance(self.flops_per_second, (int, float)) and self.flops_per_second > 0):
            raise EaseMLError(f"flops_per_second of {self.kind!r}: found {self.flops_per_second!r}, expected a positive number")


def measure_speed(device: Any = None, *, min_seconds: float = MIN_SECONDS) -> DeviceSpeed:
    """Train the probe net on ``device`` (default: the worker's own) and
    return its kind's speed. On a CPU the probe runs on one torch thread, as
    the units do."""
    import torch

    from ease_jupyter.zoo import nets
    from ease_jupyter.zoo.cost import torch_train_flops

    device = torch.device(device) if device is not None else worker_device()
    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = getattr(nets, PROBE_NET)(PROBE_SHAPE, PROBE_CLASSES)
        flops_per_step = torch_train_flops(net, PROBE_SHAPE) * PROBE_BATCH
        x = torch.randn((PROBE_BATCH, *PROBE_SHAPE)).to(device)
        y = torch.randint(0, PROBE_CLASSES, (PROBE_BATCH,)).to(device)
    net.to(device)
    opt = net.make_optimizer(0.01)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    try:
        if device.type == "cpu":
            torch.set_num_threads(1)
        for _ in range(WARMUP_STEPS):
            net.train_step(opt, x, y)
        sync(device)
        steps, started = 0, perf_counter()
        while True:  # in chunks, one wait for the device each: units do not wait per batch either
            chunk = max(MIN_STEPS, steps // 2)
            for _ in range(chunk):
                net.train_step(opt, x, y)
            steps += chunk
            sync(device)
            seconds = perf_counter() - started
            if seconds >= min_seconds:
                break
    finally:
        torch.set_num_threads(threads)
    return DeviceSpeed(describe_device(device).kind, flops_per_step * steps / seconds)


@dataclass(frozen=True)
class PoolSpeeds:
    """The speeds that price a pool's arms.

    ``torch`` is the speed of the devices torch units run on (the GPU workers
    when the pool has any: their mean speed, per worker), ``sklearn`` the
    CPU's; ``kinds`` holds every kind measured and ``workers`` each worker's
    kind.
    """

    torch: DeviceSpeed
    sklearn: DeviceSpeed
    kinds: Mapping[str, DeviceSpeed] = field(default_factory=dict)
    workers: Mapping[str, str] = field(default_factory=dict)


def measure_pool(
    engine: Engine,
    *,
    cache: dict[str, DeviceSpeed] | None = None,
    devices: Mapping[str, WorkerDevice] | None = None,
    timeout: float = 300.0,
) -> PoolSpeeds:
    """Measure each device kind among the engine's workers once.

    Args:
        cache: kind -> speed already measured; the new kinds are added to it.
        devices: each worker's device (:func:`gpu_memory.worker_devices`,
            called when None).

    Call it while nothing else runs on the engine (at start, before a
    driver submits work): waiting for the probes drops the events of other
    work that arrive meanwhile, results included.
    """
    cache = {} if cache is None else cache
    devices = worker_devices(engine, timeout=timeout) if devices is None else devices
    if not devices:
        raise EaseMLError("engine: found no live workers, expected at least one to measure")
    gpu = [w for w in gpu_workers(engine.worker_resources()) if w in devices]
    cpu = sorted(w for w in devices if w not in gpu)
    handles: dict[str, str] = {}
    for w in gpu:
        kind = devices[w].kind
        if kind != CPU and kind not in cache and kind not in handles:
            handles[kind] = engine.submit(measure_speed, resources={GPU: 1}, workers=[w])
    if CPU not in cache:  # the scikit-learn arms' speed, and a GPU-less worker's
        handles[CPU] = engine.submit(measure_speed, CPU, workers=[(cpu or gpu)[0]])
    for kind, speed in engine.results(handles, "speed probe of", timeout).items():
        cache[kind] = DeviceSpeed(kind, speed.flops_per_second)
    kinds = {w: devices[w].kind for w in devices}
    torch_workers = gpu or cpu
    per_worker = [cache[kinds[w]].flops_per_second for w in torch_workers]
    torch_kind = " + ".join(sorted({kinds[w] for w in torch_workers}))
    return PoolSpeeds(
        torch=DeviceSpeed(torch_kind, statistics.fmean(per_worker)),
        sklearn=cache[CPU],
        kinds={k: cache[k] for k in sorted(set(kinds.values()) | {CPU})},
        workers=kinds,
    )
