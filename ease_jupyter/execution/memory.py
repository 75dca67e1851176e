"""Memory auto-sizing for Seneca-style grid tasks (Seneca §II-A, Alg. 1).

Seneca probes a function once with a typical payload, reads the memory it
used, and searches from there for the allocation with the lowest compute
charge (allocated memory x billed duration), because on AWS Lambda more
memory also buys more CPU. Here a task reserves ``MEMORY`` (bytes) from the
Dask worker's declared resources, so a smaller reservation lets more tasks
share a worker without running out of memory; the reservation does not make a
task faster. We keep the structure of Alg. 1:

1. :func:`measure_peak` runs the probe and measures its peak memory: the
   larger of Python's ``tracemalloc`` peak (numpy buffers included) and the
   growth of the process's resident set, sampled every 2 ms (native
   allocations, e.g. libsvm).
2. :func:`seneca_size` starts at that peak (times a safety factor, rounded up
   to 64 MB steps) and walks up in 64 MB steps while a window of ``N = 5``
   charges is not both monotonically increasing and growing at least as fast
   as the memory (elasticity ``d log charge / d log memory >= threshold``,
   threshold 1, Seneca's N and threshold). When the duration does not depend
   on the reservation, as on Dask, the charge grows exactly in proportion to
   the memory, so the search stops at its starting point; we therefore
   evaluate it on the probe's own duration instead of paying for N more
   probes (``charge=None``).
3. :func:`gb_seconds` prices a run as the sum over tasks of reserved GB x
   task seconds, the unit Lambda bills and the quantity compared against a
   fixed, generous reservation in :class:`CostReport`.

Torch configs on GPUs are sized the same way, on GPU memory and by batch
size (:mod:`ease_jupyter.execution.gpu_memory`).
"""

from __future__ import annotations

import collections
import math
import threading
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any, Callable, Iterable

__all__ = [
    "MB",
    "STEP",
    "Probe",
    "CostReport",
    "measure_peak",
    "reservation",
    "seneca_size",
    "gb_seconds",
    "cost_report",
]

MB = 2**20
#: Seneca's (and Lambda's) allocation increment.
STEP = 64 * MB


@dataclass(frozen=True)
class Probe:
    """One measured run: its result, peak memory above the starting point
    (bytes) and wall seconds."""

    result: Any
    peak_bytes: int
    seconds: float
    traced_bytes: int  # tracemalloc's peak
    rss_bytes: int  # growth of the resident set


def _rss() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:  # pragma: no cover - psutil comes with distributed
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def measure_peak(fn: Callable[..., Any], *args: Any, interval: float = 0.002, **kwargs: Any) -> Probe:
    """Run ``fn(*args, **kwargs)`` and measure its peak memory.

    The peak is ``max(tracemalloc peak, sampled RSS growth)``. Memory that the
    allocator reuses without growing the process is only seen by
    tracemalloc; native allocations only by the RSS sampler. Tracing slows
    the probe down (numpy allocations are traced), which :class:`Probe`'s
    ``seconds`` includes.
    """
    stop = threading.Event()
    base = _rss()
    high = [base]

    def sample() -> None:
        while not stop.is_set():
            high[0] = max(high[0], _rss())
            stop.wait(interval)

    sampler = threading.Thread(target=sample, name="ease-memory-probe", daemon=True)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    traced_base = tracemalloc.get_traced_memory()[0]
    sampler.start()
    started = time.perf_counter()
    try:
        result = fn(*args, **kwargs)
    finally:
        seconds = time.perf_counter() - started
        traced = max(0, tracemalloc.get_traced_memory()[1] - traced_base)
        if not was_tracing:
            tracemalloc.stop()
        stop.set()
        sampler.join()
    high[0] = max(high[0], _rss())
    rss = max(0, high[0] - base)
    return Probe(result, max(traced, rss), seconds, traced, rss)


def reservation(peak_bytes: float, *, safety: float = 1.5, floor: int = STEP, step: int = STEP) -> int:
    """The starting reservation of Alg. 1: the probe's peak times ``safety``,
    rounded up to a multiple of ``step``, at least ``floor``."""
    if not (isinstance(peak_bytes, (int, float)) and math.isfinite(peak_bytes) and peak_bytes >= 0):
        raise ValueError(f"peak_bytes: found {peak_bytes!r}, expected a non-negative number of bytes")
    if not (isinstance(safety, (int, float)) and safety >= 1):
        raise ValueError(f"safety: found {safety!r}, expected a number >= 1")
    want = max(float(floor), float(peak_bytes) * float(safety))
    return int(math.ceil(want / step) * step)


def seneca_size(
    start_bytes: int,
    charge: Callable[[int], float] | None = None,
    *,
    seconds: float = 1.0,
    step: int = STEP,
    cap: int | None = None,
    window: int = 5,
    threshold: float = 1.0,
) -> tuple[int, list[tuple[int, float]]]:
    """Seneca's Algorithm 1: the allocation with the lowest compute charge.

    Args:
        start_bytes: line 1, the memory the probe used (see :func:`reservation`).
        charge: ``charge(memory) -> memory x duration`` of one more probe at
            that allocation (line 10). None: the duration does not depend on
            the allocation (a Dask reservation), so ``charge(m) = m x seconds``.
        seconds: the probe's duration, used when ``charge`` is None.
        step: line 9, the increment (64 MB).
        cap: the largest allocation (Lambda: 3008 MB); default: unbounded
            below ``start + 64 * step``.
        window: N, the deque length (5).
        threshold: the slope threshold (1), as an elasticity.

    Returns:
        The chosen allocation and the (memory, charge) pairs probed.
    """
    if window < 2:
        raise ValueError(f"window: found {window!r}, expected at least 2")
    cap = int(cap if cap is not None else start_bytes + 64 * step)
    price = charge if charge is not None else (lambda m: m * float(seconds))
    deque: collections.deque[tuple[int, float]] = collections.deque(maxlen=window)
    probed: list[tuple[int, float]] = []
    memory = int(start_bytes)
    while memory <= cap:
        point = (memory, float(price(memory)))  # lines 9-11
        deque.append(point)
        probed.append(point)
        if len(deque) == window:
            ms = [m for m, _ in deque]
            cs = [c for _, c in deque]
            rising = all(b > a for a, b in zip(cs, cs[1:]))
            elasticity = (
                math.log(cs[-1] / cs[0]) / math.log(ms[-1] / ms[0]) if cs[0] > 0 and cs[-1] > 0 else 0.0
            )
            if rising and elasticity >= threshold - 1e-9:  # line 4
                return deque[0][0], probed  # lines 5-7
        memory += step
    best = min(deque, key=lambda mc: (mc[1], mc[0]))  # no exit: the cheapest in the deque
    return best[0], probed


def gb_seconds(tasks: Iterable[tuple[float, float]]) -> float:
    """Sum of reserved GB x seconds over ``(reserved bytes, seconds)`` pairs."""
    return float(sum(b / 1e9 * s for b, s in tasks))


@dataclass(frozen=True)
class CostReport:
    """What memory sizing saved, in reserved GB·s (Seneca §III's cost)."""

    reserved_bytes: int  # per task, after sizing
    fixed_bytes: int  # the generous reservation compared against
    probe_peak_bytes: int
    gb_seconds: float  # as run: the probe at the fixed reservation, the rest sized
    fixed_gb_seconds: float  # the same tasks, all at the fixed reservation
    tasks: int
    fit_at_once: int  # tasks the workers' MEMORY admits at once when sized
    fixed_fit_at_once: int  # ... at the fixed reservation

    @property
    def ratio(self) -> float:
        """Sized / fixed cost (lower is better)."""
        return self.gb_seconds / self.fixed_gb_seconds if self.fixed_gb_seconds else float("nan")


def cost_report(
    reserved_bytes: int,
    fixed_bytes: int,
    probe_peak_bytes: int,
    probe_seconds: float,
    task_seconds: Iterable[float],
    worker_memory: Iterable[float],
) -> CostReport:
    """Price a sized run against the fixed reservation (same task durations)."""
    secs = list(task_seconds)
    mems = list(worker_memory)
    sized = gb_seconds([(fixed_bytes, probe_seconds)] + [(reserved_bytes, s) for s in secs])
    fixed = gb_seconds([(fixed_bytes, s) for s in [probe_seconds, *secs]])
    return CostReport(
        reserved_bytes=int(reserved_bytes),
        fixed_bytes=int(fixed_bytes),
        probe_peak_bytes=int(probe_peak_bytes),
        gb_seconds=sized,
        fixed_gb_seconds=fixed,
        tasks=len(secs) + 1,
        fit_at_once=int(sum(m // reserved_bytes for m in mems)) if reserved_bytes else 0,
        fixed_fit_at_once=int(sum(m // fixed_bytes for m in mems)) if fixed_bytes else 0,
    )
